"""Remote retention (Kafka's DeleteSegmentsByRetentionTimeTest,
DeleteSegmentsByRetentionSizeTest, DeleteSegmentsDueToLogStartOffsetBreachTest)
and topic deletion (DeleteTopicTest) against a live broker.

Each test tiers a few one-batch segments, triggers one kind of deletion, and
checks all three places it must show: the objects in the remote tier, the
metadata in ``__remote_log_metadata`` (every deleted segment reaches
DELETE_SEGMENT_FINISHED), and the log start offset (ListOffsets -2, and a
fetch below it answers OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from system_tests._proc import TierdProc
from system_tests.tiered_helpers import (
    DELETE_PARTITION_FINISHED,
    DELETE_PARTITION_MARKED,
    DELETE_SEGMENT_FINISHED,
    EARLIEST,
    OFFSET_OUT_OF_RANGE,
    FsTier,
    RemoteTier,
    alter_topic,
    create_tiered_topic,
    delete_records,
    delete_topic,
    eventually,
    fetch,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

BATCHES = 6
PER_BATCH = 2
HOUR_MS = 3_600_000


def check_deleted_below(broker: TierdProc, tier: RemoteTier, topic: str, start: int, end: int,
                        remaining: list[int]) -> None:
    """Remote segments wholly below `start` are gone (objects and metadata) and
    those starting at `remaining` are left; the log starts at `start`, reads
    below it are out of range and reads from it are complete up to `end`."""
    def remote_starts() -> list[int]:
        return [tier.start_offset_of(n) for n in tier.log_objects(topic)]

    eventually(lambda: remote_starts() == remaining,
               lambda: f"remote segments start at {remote_starts()}, want {remaining}")
    with raw(broker) as client:
        assert offset_for(client, topic, EARLIEST) == start
        below = fetch(client, {(topic, 0): 0})[(topic, 0)]
        assert below.error_code == OFFSET_OUT_OF_RANGE, below
        assert below.log_start_offset == start
        assert [o for o, _ in read_all(client, topic, start=start)] == list(range(start, end))

        def metadata_settled() -> bool:
            # Deletions finished, and the copies of the remaining segments too:
            # a copy's .log object appears before its COPY_SEGMENT_FINISHED.
            history = read_metadata(client, topic)
            return (all(s.states[-1] == DELETE_SEGMENT_FINISHED
                        for s in history.segments.values() if s.start_offset not in remaining)
                    and {s.start_offset for s in history.live()} == set(remaining))

        eventually(metadata_settled, lambda: f"metadata: {read_metadata(client, topic)}")
        live = {s.start_offset for s in read_metadata(client, topic).live()}
    remote = {tier.start_offset_of(n) for n in tier.log_objects(topic)}
    assert live == remote, (live, remote)
    eventually(lambda: metric(broker, "RemoteLogMetadataCount", topic=topic) == len(remaining),
               lambda: f"RemoteLogMetadataCount "
                       f"{metric(broker, 'RemoteLogMetadataCount', topic=topic)}, "
                       f"want {len(remaining)}")
    sizes = sum(len(tier.read(n)) for n in tier.log_objects(topic))
    eventually(lambda: metric(broker, "RemoteLogSizeBytes", topic=topic) == sizes,
               lambda: f"RemoteLogSizeBytes {metric(broker, 'RemoteLogSizeBytes', topic=topic)}"
                       f", want {sizes}")


def test_retention_by_time(request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier,
                           topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    old = numbered_batches(BATCHES, PER_BATCH, first_ts=int(time.time() * 1000) - 2 * HOUR_MS)
    with raw(broker) as client:
        produce_batches(client, topic, 0, old)
        wait_tiered(broker, tier, topic, BATCHES - 1)
        # Two fresh batches: the old active segment closes (and tiers), and
        # one fresh closed segment must survive the retention.
        fresh = numbered_batches(2, PER_BATCH, tag="fresh")
        fresh_bases = produce_batches(client, topic, 0, fresh)
    alter_topic(broker, topic, retention_ms=str(HOUR_MS))
    check_deleted_below(broker, tier, topic, fresh_bases[0], (BATCHES + 2) * PER_BATCH,
                        fresh_bases[:1])


def test_retention_by_size(request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier,
                           topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(BATCHES, PER_BATCH)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
    wait_tiered(broker, tier, topic, BATCHES - 1)
    segment_size = len(tier.read(tier.log_objects(topic)[0]))
    # Room for 3.5 segments: the active (local) one and the 3 newest remote ones stay.
    alter_topic(broker, topic, retention_bytes=str(segment_size * 7 // 2))
    keep_from = bases[BATCHES - 4]
    check_deleted_below(broker, tier, topic, keep_from, BATCHES * PER_BATCH,
                        bases[BATCHES - 4:-1])


def test_delete_records_removes_remote_segments(request: pytest.FixtureRequest, tmp_path: Path,
                                                tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, numbered_batches(BATCHES, PER_BATCH))
    wait_tiered(broker, tier, topic, BATCHES - 1)
    # Mid-segment: the segment holding the new start stays, those before it go.
    cut = bases[3] + 1
    assert delete_records(broker, topic, 0, cut) == cut
    check_deleted_below(broker, tier, topic, cut, BATCHES * PER_BATCH, bases[3:-1])


def test_delete_topic_empties_the_remote_tier_and_the_name_is_reusable(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    partitions = 2
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic, partitions)
    with raw(broker) as client:
        for p in range(partitions):
            produce_batches(client, topic, p, numbered_batches(4, PER_BATCH, tag=f"old{p}"))
    for p in range(partitions):
        wait_tiered(broker, tier, topic, 3, partition=p)
    old_objects = set(tier.objects(topic))

    delete_topic(broker, topic)
    # The same name at once: a new topic id, so new data never mixes with the old.
    create_tiered_topic(broker, topic, partitions)
    with raw(broker) as client:
        fresh = numbered_batches(3, PER_BATCH, tag="new")
        produce_batches(client, topic, 0, fresh)
        wait_tiered(broker, tier, topic, 2)
        eventually(lambda: not old_objects & set(tier.objects(topic)),
                   lambda: f"objects of the deleted topic remain: "
                           f"{sorted(old_objects & set(tier.objects(topic)))}")
        # The new topic's segments are tiered under its own topic id.
        assert len(tier.log_objects(topic, 0)) == 2 and not tier.log_objects(topic, 1)
        assert [r for _, r in read_all(client, topic)] == [r for b in fresh for r in b]
        assert offset_for(client, topic, EARLIEST) == 0

        def partitions_deleted() -> bool:
            events = read_metadata(client, topic).partition_deletes
            return all((p, DELETE_PARTITION_FINISHED) in events for p in range(partitions))

        eventually(partitions_deleted,
                   lambda: f"partition deletes: {read_metadata(client, topic).partition_deletes}")
        events = read_metadata(client, topic).partition_deletes
        for p in range(partitions):
            assert events.index((p, DELETE_PARTITION_MARKED)) < events.index(
                (p, DELETE_PARTITION_FINISHED))

    delete_topic(broker, topic)
    eventually(lambda: not tier.objects(topic),
               lambda: f"remote objects remain after delete: {tier.objects(topic)}")
    if isinstance(tier, FsTier):
        eventually(lambda: not tier.topic_dirs(topic),
                   lambda: f"remote directories remain: {tier.topic_dirs(topic)}")
