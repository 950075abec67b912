"""A Fetch answer whose partitions come in any order (an incremental fetch
answers partitions with news as it finds them): each topic's partitions are
encoded together, and the sendfile slices land in their own partitions."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from kafka.protocol.consumer import FetchResponse

from broker.handlers import fetch
from broker.metrics import BrokerMetrics
from broker.zero_copy import SplicedResponse
from protocol.api import RequestHeader
from replication.fetch import FetchParams, FetchPartition, FetchResult
from storage.log.file_slice import FileSlice

VERSION = 12


def test_interleaved_topics_with_file_slices(tmp_path: Path) -> None:
    order = [("a", 1), ("b", 0), ("a", 0), ("b", 1)]
    contents = {tp: os.urandom(1000 + 10 * i) for i, tp in enumerate(order)}
    results = []
    for tp in order:
        path = tmp_path / f"{tp[0]}-{tp[1]}.log"
        path.write_bytes(b"pad" + contents[tp])
        fd = os.open(path, os.O_RDONLY)
        results.append(FetchResult(records=FileSlice(fd, 3, len(contents[tp]), 0)))
        os.close(fd)
    params = FetchParams([FetchPartition(t, p, 0, 1 << 20) for t, p in order], zero_copy=True)
    ctx = SimpleNamespace(metrics=BrokerMetrics(), metadata=None)
    answer = fetch._build(ctx, FetchResponse[VERSION], VERSION, params,  # type: ignore[arg-type]
                          [None] * len(order), results, 7, None)
    assert isinstance(answer, SplicedResponse)
    header = RequestHeader(1, VERSION, 3, "test", 0)
    parts = answer.encode(header, flexible_body=True)
    wire = b"".join(p if isinstance(p, bytes) else p.read() for p in parts)
    decoded = FetchResponse[VERSION].decode(wire[4:], version=VERSION, header=True)
    assert decoded.session_id == 7
    got = {(t.topic, p.partition_index): bytes(p.records)
           for t in decoded.responses for p in t.partitions}
    assert got == contents
    assert [t.topic for t in decoded.responses] == ["a", "b"]
