"""``tierd admin tiering dump-metadata``'s lines, one record at a time."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.admin.tiering_dump import record_line
from storage.remote.rlmm_serde import serialize
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 3)


def _record(value: bytes, offset: int = 5) -> SimpleNamespace:
    return SimpleNamespace(offset=offset, timestamp=1_700_000_000_000, value=value)


def test_a_segment_is_printed_with_its_fields_and_state_by_name() -> None:
    seg_id = RemoteLogSegmentId(TIP, uuid.UUID(int=9))
    md = RemoteLogSegmentMetadata(seg_id, 100, 199, 1_700_000_000_500, 2, 1_700_000_000_600,
                                  {4: 100, 5: 150}, 4096)
    line = record_line(1, _record(serialize(md)), set())
    assert line is not None
    assert (line["partition"], line["offset"], line["timestamp"]) == (1, 5, 1_700_000_000_000)
    event = line["event"]
    assert event["type"] == "REMOTE_LOG_SEGMENT_METADATA"
    assert event["remote_log_segment_id"] == {
        "topic_id_partition": {"name": "orders", "id": str(TIP.topic_id), "partition": 3},
        "id": str(seg_id.id)}
    assert (event["start_offset"], event["end_offset"], event["broker_id"]) == (100, 199, 2)
    assert event["segment_leader_epochs"] == [{"leader_epoch": 4, "offset": 100},
                                              {"leader_epoch": 5, "offset": 150}]
    assert event["remote_log_segment_state"] == "COPY_SEGMENT_STARTED"
    assert record_line(1, _record(serialize(md)), {"payments"}) is None  # filtered out


def test_an_undecodable_record_is_printed_with_its_error() -> None:
    line = record_line(0, _record(b"\x00\x63garbage", offset=8), {"orders"})
    assert line is not None and line["offset"] == 8 and "event" not in line
    assert line["error"]
