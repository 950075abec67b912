"""Retention of a tiered topic with remote.log.copy.disable=true (KIP-950,
Kafka's KAFKA-17236).

While copying is off nothing new reaches the remote tier, so the total
retention (retention.bytes here) must bound the local log itself; and the
remote segments must be deleted only as the total retention says: not while
the remote and local bytes together still fit, all of them once the newest
retention.bytes are on local disk. The log stays one contiguous range: the
earliest offset is readable through to the end, and below it is out of range.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from system_tests._proc import TierdProc
from system_tests.tiered_helpers import (
    DELETE_SEGMENT_FINISHED,
    EARLIEST,
    OFFSET_OUT_OF_RANGE,
    TIERED_BROKER_OVERRIDES,
    RemoteTier,
    alter_topic,
    create_tiered_topic,
    eventually,
    fetch,
    local_segment_bases,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

PER_BATCH = 2
# retention.bytes in segments (one batch each): more than the 3 remote plus
# 4 local segments of the second phase, far fewer than the third phase makes.
RETENTION_SEGMENTS = 8
# How long to watch that nothing is deleted: ten retention checks and ten
# remote expiration runs.
QUIET_S = 10 * int(TIERED_BROKER_OVERRIDES["remote.log.manager.task.interval.ms"]) / 1000


def segment_size(broker: TierdProc, topic: str, base: int) -> int:
    return (broker.data_dir / f"{topic}-0" / f"{base:020d}.log").stat().st_size


def test_copy_disabled_bounds_local_disk_by_total_retention(request: pytest.FixtureRequest,
                                                            tmp_path: Path, tier: RemoteTier,
                                                            topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        first = numbered_batches(4, PER_BATCH, tag="first")
        bases = produce_batches(client, topic, 0, first)
        wait_tiered(broker, tier, topic, 3)
        seg = segment_size(broker, topic, bases[-1])
        retention = RETENTION_SEGMENTS * seg
        alter_topic(broker, topic, remote_log_copy_disable="true",
                    retention_bytes=str(retention))

        # Remote (3 segments) plus local (4) fit the retention: nothing goes.
        second = numbered_batches(3, PER_BATCH, tag="second")
        bases += produce_batches(client, topic, 0, second)
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            assert len(tier.log_objects(topic)) == 3
            assert local_segment_bases(broker, topic) == bases[3:]
            time.sleep(0.2)
        assert [r for _, r in read_all(client, topic)] == [r for b in first + second for r in b]

        # Far more than the retention, all local: the local log is bounded by
        # retention.bytes (it kept growing before), and the remote segments,
        # older than the newest retention.bytes, are deleted.
        third = numbered_batches(20, PER_BATCH, tag="third")
        bases += produce_batches(client, topic, 0, third)
        # Kafka's rule keeps at least retention.bytes: below it plus one segment,
        # and the active segment.
        most_local = RETENTION_SEGMENTS + 2
        eventually(lambda: len(local_segment_bases(broker, topic)) <= most_local,
                   lambda: f"local segments: {local_segment_bases(broker, topic)}")
        eventually(lambda: not tier.log_objects(topic),
                   lambda: f"remote segments remain: {tier.log_objects(topic)}")
        eventually(lambda: all(s.states[-1] == DELETE_SEGMENT_FINISHED
                               for s in read_metadata(client, topic).segments.values()),
                   lambda: f"metadata: {read_metadata(client, topic)}")
        local = local_segment_bases(broker, topic)
        assert len(local) <= most_local
        assert sum(segment_size(broker, topic, b) for b in local) <= retention + 2 * seg

        # One contiguous log: from its start to the end, nothing missing.
        earliest = offset_for(client, topic, EARLIEST)
        assert earliest == local[0]
        everything = [r for b in first + second + third for r in b]
        got = [r for _, r in read_all(client, topic, start=earliest)]
        assert got == everything[len(everything) - len(got):]
        assert len(got) >= RETENTION_SEGMENTS * PER_BATCH
        below = fetch(client, {(topic, 0): earliest - 1})[(topic, 0)]
        assert below.error_code == OFFSET_OUT_OF_RANGE, below

        # Producing on keeps the local log bounded.
        produce_batches(client, topic, 0, numbered_batches(6, PER_BATCH, tag="fourth"))
        eventually(lambda: len(local_segment_bases(broker, topic)) <= most_local
                   and offset_for(client, topic, EARLIEST) > earliest,
                   lambda: f"local segments: {local_segment_bases(broker, topic)}")
        assert not tier.log_objects(topic)
