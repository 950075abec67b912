"""The audit rules (storage/remote/audit.py): orphans, missing and wrong-sized
segments, and the two races it must not mistake for findings."""

from __future__ import annotations

import dataclasses
import uuid

from storage.remote.api import SegmentObjectName, StoredObject
from storage.remote.audit import audit
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TIP = TopicIdPartition(uuid.uuid4(), "t", 0)
NOW_MS = 10_000_000
HOUR_MS = 3_600_000
S = RemoteLogSegmentState


def segment(start: int, size: int = 100, state: S = S.COPY_SEGMENT_FINISHED,
            event_ms: int = NOW_MS - HOUR_MS * 2) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TIP, uuid.uuid4()), start_offset=start,
        end_offset=start + 9, max_timestamp_ms=0, broker_id=0, event_timestamp_ms=event_ms,
        segment_leader_epochs={0: start}, segment_size_in_bytes=size, state=state)


def objects_of(md: RemoteLogSegmentMetadata, size: int | None = None,
               modified_ms: int = NOW_MS - HOUR_MS * 2,
               suffixes: tuple[str, ...] = ("log", "index")) -> list[StoredObject]:
    out = []
    for suffix in suffixes:
        name = SegmentObjectName(md.remote_log_segment_id, md.start_offset, suffix)
        out.append(StoredObject(f"t/{md.start_offset}.{suffix}",
                                (size if size is not None else md.segment_size_in_bytes)
                                if suffix == "log" else 7, modified_ms / 1000, name))
    return out


def test_a_consistent_partition_is_clean() -> None:
    segs = [segment(0), segment(10)]
    result = audit([o for s in segs for o in objects_of(s)], segs, NOW_MS, HOUR_MS)
    assert result.clean and result.examples == []


def test_orphans_missing_and_mismatches_are_counted() -> None:
    kept, missing, resized = segment(0), segment(10), segment(20)
    stray = segment(30)  # objects without metadata: a crashed copy
    objects = (objects_of(kept) + objects_of(missing, suffixes=("index",))
               + objects_of(resized, size=99) + objects_of(stray)
               + [StoredObject("t/notes.txt", 5, (NOW_MS - HOUR_MS * 2) / 1000, None)])
    result = audit(objects, [kept, missing, resized], NOW_MS, HOUR_MS)
    assert (result.orphan_objects, result.orphan_bytes) == (3, 100 + 7 + 5)
    assert (result.missing_segments, result.size_mismatches) == (1, 1)
    assert len(result.examples) == 5


def test_a_young_unknown_copy_is_not_an_orphan() -> None:
    # Another broker's copy that started a moment ago: its record is not read yet.
    young = segment(0)
    result = audit(objects_of(young, modified_ms=NOW_MS - 1000), [], NOW_MS, HOUR_MS)
    assert result.clean
    old = audit(objects_of(young, modified_ms=NOW_MS - HOUR_MS - 1), [], NOW_MS, HOUR_MS)
    assert old.orphan_objects == 2


def test_a_copy_in_flight_is_not_an_orphan_nor_missing() -> None:
    started = segment(0, state=S.COPY_SEGMENT_STARTED)
    result = audit(objects_of(started, suffixes=("log",)), [started], NOW_MS, 0)
    assert result.clean


def test_a_segment_finished_after_the_listing_is_not_judged() -> None:
    late = segment(0, event_ms=NOW_MS + 5)
    assert audit([], [late], NOW_MS, HOUR_MS).clean
    assert audit([], [dataclasses.replace(late, event_timestamp_ms=NOW_MS - 1)], NOW_MS,
                 HOUR_MS).missing_segments == 1


def test_objects_of_a_delete_under_way_wait_for_the_grace_period() -> None:
    deleting = segment(0, state=S.DELETE_SEGMENT_STARTED, event_ms=NOW_MS - 1000)
    assert audit(objects_of(deleting), [deleting], NOW_MS, HOUR_MS).clean
    stuck = dataclasses.replace(deleting, event_timestamp_ms=NOW_MS - HOUR_MS * 2)
    assert audit(objects_of(stuck), [stuck], NOW_MS, HOUR_MS).orphan_objects == 2
