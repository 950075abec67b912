"""Fetch responses sent with sendfile are byte for byte the pread path's.

One broker, one topic with a partition per codec (none, gzip, snappy, lz4,
zstd), each filled by kafka-python's producer with several batches. The same
Fetch requests (classic v4 and v11, flexible v12 and v16 with topic ids;
a fetch of everything, one with a budget that ends between batches, one whose
first batch is over the partition budget, one for the whole topic at once, a
read_committed one) are sent to the broker with ``tierd.fetch.zero.copy`` on
(local data sent with sendfile) and, after a restart on the same data, with
it off (read into memory and encoded): every response frame must be
identical, and the records in them must decode to what was produced.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.record import MemoryRecords

from system_tests._proc import (
    RawClient,
    create_topics_request,
    encode_request,
    metadata_request,
    scrape,
    start_tierd,
)

CODECS = (None, "gzip", "snappy", "lz4", "zstd")
BATCHES = 6
PER_BATCH = 40
VALUE_SIZE = 700


def _values(partition: int) -> list[bytes]:
    """Incompressible values, so a batch is ~28 KB with every codec."""
    rng = random.Random(partition)
    return [f"p{partition}-{i}-".encode() + rng.randbytes(VALUE_SIZE)
            for i in range(BATCHES * PER_BATCH)]


def _produce(bootstrap: str, topic: str) -> None:
    for partition, codec in enumerate(CODECS):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                                 linger_ms=1000, batch_size=1 << 20, acks="all")
        values = _values(partition)
        for b in range(BATCHES):
            for value in values[b * PER_BATCH:(b + 1) * PER_BATCH]:
                producer.send(topic, value, partition=partition)
            producer.flush()  # one batch per flush
        producer.close()


def _fetch(topic: str, topic_id: Any, version: int, wanted: dict[int, int],
           partition_max: int, isolation: int = 0) -> Any:
    topic_cls = FetchRequest.FetchTopic
    parts = [topic_cls.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                      last_fetched_epoch=-1, log_start_offset=-1,
                                      partition_max_bytes=partition_max)
             for p, o in wanted.items()]
    named = ({"topic_id": topic_id, "topic": ""} if version >= 13 else {"topic": topic})
    return FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20,
        isolation_level=isolation, session_id=0, session_epoch=-1,
        topics=[topic_cls(partitions=parts, **named)], forgotten_topics_data=[], rack_id="")


def _requests(topic: str, topic_id: Any) -> list[tuple[int, Any]]:
    everything = dict.fromkeys(range(len(CODECS)), 0)
    out = []
    for version in (4, 11, 12, 16):
        out.append((version, _fetch(topic, topic_id, version, everything, 1 << 20)))
        out.append((version, _fetch(topic, topic_id, version, {2: 0}, 70 * 1024)))
        out.append((version, _fetch(topic, topic_id, version, {0: PER_BATCH}, 100)))
        out.append((version, _fetch(topic, topic_id, version, {1: 7, 3: 0, 4: 2 * PER_BATCH},
                                    40 * 1024, isolation=1)))
    return out


def _answers(bootstrap_port: int, requests: list[tuple[int, Any]]) -> list[bytes]:
    frames = []
    with RawClient("127.0.0.1", bootstrap_port) as client:
        for n, (version, req) in enumerate(requests):
            client.send_raw(encode_request(req, version, n + 1))
            frames.append(client.recv_frame())
    return frames


def _records(frame: bytes, version: int) -> dict[int, list[bytes]]:
    resp = FetchResponse.decode(frame, version=version, header=True)
    out: dict[int, list[bytes]] = {}
    for t in resp.responses:
        for p in t.partitions:
            assert p.error_code == 0, p
            recs = MemoryRecords(bytes(p.records or b""))
            values = []
            while (batch := recs.next_batch()) is not None:
                values.extend(r.value for r in batch)
            out[p.partition_index] = values
    return out


def test_sendfile_responses_equal_the_pread_path_for_every_codec(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    broker = start_tierd(request, tmp_path / "broker", {"tierd.fetch.zero.copy": "true"})
    topic = "zero-copy"
    with RawClient(broker.host, broker.port) as client:
        created = client.request(create_topics_request([(topic, len(CODECS), 1, {})]), 5,
                                 CreateTopicsResponse)
        assert created.topics[0].error_code == 0, created
    _produce(broker.bootstrap, topic)
    with RawClient(broker.host, broker.port) as client:
        meta = client.request(metadata_request([topic], version=12), 12, MetadataResponse)
    [info] = meta.topics
    assert len(info.partitions) == len(CODECS)
    requests = _requests(topic, info.topic_id)

    sent = _answers(broker.port, requests)
    assert scrape(broker.metrics_url).total("tierd_fetch_sendfile_bytes_total") > 0
    broker.stop()
    broker.overrides["tierd.fetch.zero.copy"] = "false"
    broker.start()
    read = _answers(broker.port, requests)
    assert scrape(broker.metrics_url).total("tierd_fetch_sendfile_bytes_total") == 0

    for n, ((version, _), a, b) in enumerate(zip(requests, sent, read, strict=True)):
        assert a == b, f"request {n} (v{version}): sendfile and pread answers differ"
    # The answers are the records produced, not two equal wrong answers.
    for version, frame in zip((r[0] for r in requests[::4]), sent[::4], strict=True):
        got = _records(frame, version)
        assert got == {p: _values(p) for p in range(len(CODECS))}, version
    # The budgeted fetches stop at whole batches (min one batch when over budget).
    assert _records(sent[1], 4)[2] == _values(2)[:2 * PER_BATCH]
    assert _records(sent[2], 4)[0] == _values(0)[PER_BATCH:2 * PER_BATCH]
