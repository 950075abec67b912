"""TopicBasedRemoteLogMetadataManager over an in-memory metadata log.

The fake below stands in for the broker's ``__remote_log_metadata`` partitions;
it exists for these unit tests only (the broker adapter is tested end to end).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing
from kafka.partitioner.default import murmur2
from structlog.testing import capture_logs

from storage.log.checkpoint import topic_id_from_str
from storage.remote import rlmm_snapshot
from storage.remote.metadata_cache import (
    IllegalStateTransition,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    UnknownSegmentError,
)
from storage.remote.rlmm import (
    MetadataLog,
    MetadataNotReady,
    RemoteLogMetadataError,
    RemoteLogMetadataManager,
    TopicBasedRemoteLogMetadataManager,
    metadata_partition,
)
from storage.remote.rlmm_api import PollLimits, TopicRecord
from storage.remote.rlmm_config import RlmmSettings
from storage.remote.rlmm_serde import serialize
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
NUM_PARTITIONS = 5


class InMemoryMetadataLog:
    """MetadataLog over Python lists, counting the records it hands out and
    the polls it answers (one group: one broker leads every partition).

    ``partitions[p]`` holds every value ever appended (offset = index);
    ``starts[p]`` is the log start (records below it are gone); ``keys``
    the non-null keys; ``leader`` whether "this broker" leads every partition.
    """

    def __init__(self) -> None:
        self.partitions: list[list[bytes]] = []
        self.starts: list[int] = []
        self.keys: dict[tuple[int, int], bytes] = {}
        self.leader = True
        self.records_read = 0
        self.polls: list[tuple[float, float]] = []  # (asked, answered) on trio's clock
        self._appended = trio.Event()

    async def ensure_topic(self, num_partitions: int) -> int:
        await trio.lowlevel.checkpoint()
        if not self.partitions:
            self.partitions = [[] for _ in range(num_partitions)]
            self.starts = [0] * num_partitions
        return len(self.partitions)

    async def append(self, partition: int, record: bytes) -> int:
        await trio.lowlevel.checkpoint()
        self.partitions[partition].append(record)
        self._appended.set()
        self._appended = trio.Event()
        return len(self.partitions[partition]) - 1

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[TopicRecord]:
        await trio.lowlevel.checkpoint()
        records = self.partitions[partition]
        out: list[TopicRecord] = []
        size = 0
        for offset in range(max(from_offset, self.starts[partition]), len(records)):
            if out and size + len(records[offset]) > max_bytes:
                break
            out.append(TopicRecord(offset, self.keys.get((partition, offset)), records[offset]))
            size += len(records[offset])
        self.records_read += len(out)
        return out

    def end_offset(self, partition: int) -> int:
        return len(self.partitions[partition])

    def poll_groups(self, partitions: Iterable[int]) -> list[list[int]]:
        group = sorted(partitions)
        return [group] if group else []

    def _from(self, partition: int, offset: int) -> list[TopicRecord]:
        records = self.partitions[partition]
        return [TopicRecord(o, self.keys.get((partition, o)), records[o])
                for o in range(max(offset, self.starts[partition]), len(records))]

    async def poll(self, positions: Mapping[int, int], limits: PollLimits
                   ) -> Mapping[int, Sequence[TopicRecord]]:
        asked = trio.current_time()
        with trio.move_on_after(limits.max_wait_ms / 1000):
            while not any(self._from(p, at) for p, at in positions.items()):
                await self._appended.wait()
        self.polls.append((asked, trio.current_time()))
        return {p: self._from(p, at) for p, at in positions.items()}

    def start_offset(self, partition: int) -> int | None:
        return self.starts[partition] if self.leader else None

    def append_at_end(self, partition: int, build: Callable[
            [int], Sequence[tuple[bytes | None, bytes]] | None]) -> int | None:
        records = self.partitions[partition]
        pairs = build(len(records)) if self.leader else None
        if not pairs:
            return None
        first = len(records)
        for key, value in pairs:
            if key is not None:
                self.keys[partition, len(records)] = key
            records.append(value)
        self._appended.set()
        self._appended = trio.Event()
        return first

    async def delete_before(self, partition: int, offset: int) -> None:
        await trio.lowlevel.checkpoint()
        self.starts[partition] = max(self.starts[partition], offset)


def _tip_in(p: int, name: str, partition: int = 0) -> TopicIdPartition:
    """A user partition whose metadata lives in metadata partition ``p``."""
    for n in range(1, 10_000):
        tip = TopicIdPartition(uuid.UUID(int=n << 64 | zlib.crc32(name.encode())), name, partition)
        if metadata_partition(tip, NUM_PARTITIONS) == p:
            return tip
    raise AssertionError("no such tip")


A = _tip_in(0, "alpha")
B = _tip_in(0, "beta")  # shares A's metadata partition
C = _tip_in(3, "gamma")


def segment(tip: TopicIdPartition, n: int, start: int, end: int,
            epochs: dict[int, int] | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.UUID(int=n)), start, end,
                                    max_timestamp_ms=end, broker_id=1, event_timestamp_ms=n,
                                    segment_leader_epochs=epochs or {0: start},
                                    segment_size_in_bytes=10 * (end - start + 1))


def update(md: RemoteLogSegmentMetadata, state: S) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 7, None, state, 1)


def manager(log: MetadataLog, path: Path, **kw: object) -> TopicBasedRemoteLogMetadataManager:
    kw.setdefault("num_partitions", NUM_PARTITIONS)
    return TopicBasedRemoteLogMetadataManager(log, str(path), **kw)  # type: ignore[arg-type]


async def started(log: MetadataLog, path: Path,
                  *tips: TopicIdPartition) -> TopicBasedRemoteLogMetadataManager:
    rlmm = manager(log, path)
    await rlmm.start()
    rlmm.on_partition_leadership_changes(tips, [])
    for tip in tips:
        await rlmm.ensure_ready(tip)
    return rlmm


async def tier(rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition, first: int,
               count: int) -> list[RemoteLogSegmentMetadata]:
    """Copy ``count`` segments of 100 offsets each (two records per segment)."""
    done = []
    for n in range(first, first + count):
        md = segment(tip, n, n * 100, n * 100 + 99)
        await rlmm.add_remote_log_segment_metadata(md)
        await rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
        done.append(md)
    return done


def view(rlmm: TopicBasedRemoteLogMetadataManager, *tips: TopicIdPartition) -> list[object]:
    return [(rlmm.list_remote_log_segments(t), rlmm.highest_offset_for_epoch(t, 0),
             rlmm.partition_delete_state(t)) for t in tips]


# -- partition mapping ------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), [
    # Kafka's UtilsTest.testMurmur2
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"abc", 479470107),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected & 0xFFFFFFFF


# Computed with Kafka's own code (kafka-clients 4.3.0: Uuid.fromString, java.util.Objects.hash,
# Utils.murmur2, Utils.toPositive), as RemoteLogMetadataTopicPartitioner does it:
# (topic id, partition) -> metadata partition with 50 and with 7 partitions.
KAFKA_MAPPING = [
    ("AAAAAAAAAAAAAAAAAAAAAQ", 0, 35, 0), ("AAAAAAAAAAAAAAAAAAAAAQ", 1, 6, 1),
    ("AAAAAAAAAAAAAAAAAAAAAQ", 7, 46, 2), ("AAAAAAAAAAAAAAAAAAAAAQ", 49, 43, 1),
    ("AAAAAAAAAAAAAAAAAAAAAQ", 1000, 27, 6), ("AAAAAAAAAAAAAAAAAAAAAQ", 2147483647, 45, 6),
    ("ZmF1bHR5LXRvcGljLWlkIQ", 0, 33, 5), ("ZmF1bHR5LXRvcGljLWlkIQ", 1, 3, 5),
    ("ZmF1bHR5LXRvcGljLWlkIQ", 7, 24, 0), ("ZmF1bHR5LXRvcGljLWlkIQ", 49, 46, 6),
    ("ZmF1bHR5LXRvcGljLWlkIQ", 1000, 3, 1), ("ZmF1bHR5LXRvcGljLWlkIQ", 2147483647, 0, 5),
    ("_____________________w", 0, 6, 2), ("_____________________w", 1, 30, 2),
    ("_____________________w", 7, 31, 6), ("_____________________w", 49, 8, 0),
    ("_____________________w", 1000, 20, 2), ("_____________________w", 2147483647, 10, 5),
    ("gOvFy4mVQn6zDn2TXA3VxA", 0, 5, 2), ("gOvFy4mVQn6zDn2TXA3VxA", 1, 4, 4),
    ("gOvFy4mVQn6zDn2TXA3VxA", 7, 17, 4), ("gOvFy4mVQn6zDn2TXA3VxA", 49, 43, 5),
    ("gOvFy4mVQn6zDn2TXA3VxA", 1000, 12, 0), ("gOvFy4mVQn6zDn2TXA3VxA", 2147483647, 5, 1),
]


@pytest.mark.parametrize(("topic_id", "partition", "of_50", "of_7"), KAFKA_MAPPING)
def test_metadata_partition_matches_kafka(topic_id, partition, of_50, of_7):
    tip = TopicIdPartition(topic_id_from_str(topic_id), "any-name", partition)
    assert metadata_partition(tip, 50) == of_50
    assert metadata_partition(tip, 7) == of_7
    # The topic name plays no part: a renamed view of the same partition maps alike.
    assert metadata_partition(dataclasses.replace(tip, topic="other"), 50) == of_50


class FlakyMetadataLog(InMemoryMetadataLog):
    """Cannot create the topic for the first ``failures`` tries (a cluster still starting)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def ensure_topic(self, num_partitions: int) -> int:
        if self.failures:
            self.failures -= 1
            raise OSError("not enough brokers yet")
        return await super().ensure_topic(num_partitions)


async def test_run_retries_its_start(tmp_path, autojump_clock):
    log = FlakyMetadataLog(failures=3)
    rlmm = manager(log, tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(rlmm.run)
        assert log.failures == 0 and len(log.partitions) == NUM_PARTITIONS
        nursery.cancel_scope.cancel()
    start = trio.current_time()
    with pytest.raises(OSError):
        await manager(FlakyMetadataLog(failures=10**9), tmp_path).run()
    assert 120 <= trio.current_time() - start <= 120.2  # Kafka's 2 min default


async def test_start_retries_as_configured(tmp_path, autojump_clock):
    settings = RlmmSettings(num_partitions=NUM_PARTITIONS, init_retry_interval_ms=2000,
                            init_retry_max_timeout_ms=5000)
    log = FlakyMetadataLog(failures=10**9)
    start = trio.current_time()
    with pytest.raises(OSError):
        await manager(log, tmp_path, settings=settings).run()
    # Tries at 0, 2, 4 and 6 s: the fourth failure comes after the 5 s timeout.
    assert trio.current_time() - start == pytest.approx(6.0)
    assert log.failures == 10**9 - 4


async def test_topic_with_another_partition_count_is_refused(tmp_path):
    log = InMemoryMetadataLog()
    await log.ensure_topic(NUM_PARTITIONS + 1)
    with pytest.raises(RemoteLogMetadataError, match="partitions"):
        await manager(log, tmp_path).start()


# -- writes and lookups -------------------------------------------------------------


async def test_reads_your_writes_and_satisfies_the_protocol(tmp_path):
    log = InMemoryMetadataLog()
    rlmm: RemoteLogMetadataManager = await started(log, tmp_path, A)
    md = segment(A, 1, 0, 99, {0: 0, 1: 50})
    await rlmm.add_remote_log_segment_metadata(md)
    assert log.partitions[0] == [serialize(md)]
    assert rlmm.list_remote_log_segments(A) == [md]
    assert rlmm.remote_log_segment_metadata(A, 1, 60) is None  # not finished yet
    await rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    found = rlmm.remote_log_segment_metadata(A, 1, 60)
    assert found is not None and found.state == S.COPY_SEGMENT_FINISHED
    assert rlmm.highest_offset_for_epoch(A, 0) == 49
    assert rlmm.list_remote_log_segments(A, 1) == [found]
    assert rlmm.remote_log_size(A) == rlmm.remote_log_size(A, 0) == 1000
    assert rlmm.remote_log_size(A, 5) == 0
    assert rlmm.list_remote_log_segments(B) == []  # same metadata partition, no records


async def test_refused_events_write_nothing(tmp_path):
    log = InMemoryMetadataLog()
    rlmm = await started(log, tmp_path, A)
    md = segment(A, 1, 0, 99)
    with pytest.raises(UnknownSegmentError):
        await rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    await rlmm.add_remote_log_segment_metadata(md)
    with pytest.raises(IllegalStateTransition):
        await rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(ValueError):
        await rlmm.add_remote_log_segment_metadata(
            dataclasses.replace(md, state=S.COPY_SEGMENT_FINISHED))
    with pytest.raises(IllegalStateTransition):
        await rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(A, P.DELETE_PARTITION_FINISHED, 1, 1))
    assert len(log.partitions[0]) == 1


async def test_unassigned_partitions_are_not_ready(tmp_path):
    log = InMemoryMetadataLog()
    rlmm = manager(log, tmp_path)
    await rlmm.start()
    with pytest.raises(MetadataNotReady):
        await rlmm.add_remote_log_segment_metadata(segment(A, 1, 0, 9))
    with pytest.raises(MetadataNotReady):
        rlmm.list_remote_log_segments(A)
    rlmm.on_partition_leadership_changes([], [A])
    with pytest.raises(MetadataNotReady):  # assigned, not caught up yet
        rlmm.remote_log_segment_metadata(A, 0, 0)
    await rlmm.ensure_ready(A)
    assert rlmm.is_ready(A) and rlmm.is_ready(B) and not rlmm.is_ready(C)
    assert rlmm.list_remote_log_segments(A) == []
    rlmm.on_stop_partitions([A])
    with pytest.raises(MetadataNotReady):
        rlmm.list_remote_log_segments(A)


async def test_writes_after_close_are_refused(tmp_path):
    rlmm = await started(InMemoryMetadataLog(), tmp_path, A)
    await rlmm.close()
    with pytest.raises(RemoteLogMetadataError, match="not running"):
        await rlmm.add_remote_log_segment_metadata(segment(A, 1, 0, 9))


async def _until(condition, what: str) -> float:
    """Wait (virtual time, 60 s at most) until ``condition()``; how long it took."""
    start = trio.current_time()
    with trio.fail_after(60):
        while not condition():
            await trio.sleep(0.001)
    return trio.current_time() - start


async def test_consumer_task_follows_another_brokers_writes(tmp_path, autojump_clock):
    log = InMemoryMetadataLog()
    leader = await started(log, tmp_path / "leader", A, C)
    follower = manager(log, tmp_path / "follower")
    async with trio.open_nursery() as nursery:
        await nursery.start(follower.run)
        follower.on_partition_leadership_changes([], [A, C])
        await _until(lambda: follower.is_ready(A) and follower.is_ready(C), "ready")
        assert follower.list_remote_log_segments(A) == []
        await tier(leader, A, 1, 3)
        await tier(leader, C, 1, 1)
        await _until(lambda: view(follower, A, C) == view(leader, A, C), "followed")
        md = leader.list_remote_log_segments(A)[0]
        await leader.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
        await _until(lambda: follower.remote_log_segment_metadata(A, 0, 150) is None, "update")
        await follower.close()  # the consumer loop ends


async def test_idle_consumer_long_polls_and_sees_a_new_record_at_once(tmp_path, autojump_clock):
    log = InMemoryMetadataLog()
    leader = await started(log, tmp_path / "leader", A, C)
    wait_ms = 500
    follower = manager(log, tmp_path / "follower",
                       settings=RlmmSettings(num_partitions=NUM_PARTITIONS,
                                             fetch_max_wait_ms=wait_ms))
    async with trio.open_nursery() as nursery:
        await nursery.start(follower.run)
        follower.on_partition_leadership_changes([], [A, C])
        await _until(lambda: follower.is_ready(A) and log.polls, "polling")
        idle_from, polls_before = trio.current_time(), len(log.polls)
        for _ in range(100):  # news of partitions already followed: no new round
            follower.on_partition_leadership_changes([], [A, C])
            follower.on_metadata_partition_leadership(0, False)
            await trio.sleep(0.1)
        # Idle: one poll (of the one leader, both partitions) per wait period.
        idle_polls = len(log.polls) - polls_before
        assert (10 / (wait_ms / 1000)) - 1 <= idle_polls <= (10 / (wait_ms / 1000)) + 1
        assert all(answered - asked >= wait_ms / 1000 - 1e-9
                   for asked, answered in log.polls if asked >= idle_from)
        await trio.sleep(0.2)  # in the middle of a parked poll
        written = trio.current_time()
        await tier(leader, C, 1, 1)
        await trio.testing.wait_all_tasks_blocked()
        # Folded when written, not at the end of the parked poll's wait.
        assert view(follower, C) == view(leader, C)
        assert trio.current_time() == written
        assert follower.consumer.polls == len(log.polls) + 1  # the one parked now
        nursery.cancel_scope.cancel()


class StuckMetadataLog(InMemoryMetadataLog):
    """Its reads never reach what it appends (a consumer that does not get the record)."""

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[TopicRecord]:
        await trio.lowlevel.checkpoint()
        return []

    def end_offset(self, partition: int) -> int:
        return 2**63 - 1


async def test_a_write_not_read_back_within_consume_wait_fails(tmp_path, autojump_clock):
    log = StuckMetadataLog()
    settings = RlmmSettings(num_partitions=NUM_PARTITIONS, consume_wait_ms=3000)
    rlmm = manager(log, tmp_path, settings=settings)
    await rlmm.start()
    rlmm.on_partition_leadership_changes([A], [])
    await rlmm.ensure_ready(A)
    started_at = trio.current_time()
    with pytest.raises(RemoteLogMetadataError, match="consume.wait.ms"):
        await rlmm.add_remote_log_segment_metadata(segment(A, 1, 0, 9))
    assert len(log.partitions[0]) == 1  # written, never seen
    assert trio.current_time() - started_at <= 3.0 + 1e-6


async def test_bad_records_in_the_topic_are_skipped(tmp_path):
    log = InMemoryMetadataLog()
    writer = await started(log, tmp_path / "w", A)
    md = segment(A, 1, 0, 99)
    await writer.add_remote_log_segment_metadata(md)
    log.partitions[0].append(b"\x01\x09\x00garbage")  # unknown api key
    log.partitions[0].append(serialize(update(md, S.DELETE_SEGMENT_FINISHED)))  # illegal
    log.partitions[0].append(serialize(segment(C, 5, 0, 9)))  # C belongs to partition 3
    await writer.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    with capture_logs() as logs:
        reader = await started(log, tmp_path / "r", A)
    assert [e["event"] for e in logs if e["log_level"] in ("warning", "error")] == [
        "dropping undecodable remote log metadata", "dropping remote log metadata",
        "dropping remote log metadata in the wrong partition"]
    assert view(reader, A) == view(writer, A)
    assert reader.list_remote_log_segments(A)[0].state == S.COPY_SEGMENT_FINISHED


async def test_conflicting_write_from_another_broker_is_reported(tmp_path):
    log = InMemoryMetadataLog()
    old_leader = await started(log, tmp_path / "old", A)
    new_leader = await started(log, tmp_path / "new", A)
    md = segment(A, 1, 0, 99)
    await old_leader.add_remote_log_segment_metadata(md)
    await new_leader.ensure_ready(A)
    await old_leader.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    # The new leader's view is stale, but it folds the topic before checking.
    with pytest.raises(IllegalStateTransition):
        await new_leader.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))


async def test_partition_deletion_forgets_the_partition(tmp_path):
    log = InMemoryMetadataLog()
    rlmm = await started(log, tmp_path, A, B)
    await tier(rlmm, A, 1, 2)
    await tier(rlmm, B, 1, 1)
    await rlmm.sync_snapshots()
    snapshots = tmp_path / rlmm_snapshot.SNAPSHOT_DIR
    assert (snapshots / rlmm_snapshot.snapshot_file_name(A)).exists()
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        await rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(A, state, 1, 1))
        assert rlmm.partition_delete_state(A) == state
        assert len(rlmm.list_remote_log_segments(A)) == 2  # the remover still lists them
    for md in rlmm.list_remote_log_segments(A):
        await rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
        await rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    await rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(A, P.DELETE_PARTITION_FINISHED, 1, 1))
    assert rlmm.partition_delete_state(A) is None
    assert rlmm.list_remote_log_segments(A) == []
    assert len(rlmm.list_remote_log_segments(B)) == 1
    await rlmm.sync_snapshots()
    assert sorted(os.listdir(snapshots)) == [rlmm_snapshot.snapshot_file_name(B)]
    restarted = await started(log, tmp_path, A, B)
    assert view(restarted, A, B) == view(rlmm, A, B)


# -- snapshots and restart ----------------------------------------------------------


async def test_restart_reads_only_the_tail(tmp_path):
    log = InMemoryMetadataLog()
    first = await started(log, tmp_path, A, B, C)
    await tier(first, A, 1, 5)
    await tier(first, B, 1, 2)
    await tier(first, C, 1, 3)
    await first.sync_snapshots()
    assert (tmp_path / rlmm_snapshot.COMMITTED_OFFSETS_FILE).read_text() == "0\n0 13\n3 5\n"
    await tier(first, A, 6, 1)  # 2 records after the snapshot; then a crash (no close)
    log.records_read = 0
    second = await started(log, tmp_path, A, B, C)
    assert log.records_read == 2
    assert view(second, A, B, C) == view(first, A, B, C)
    await second.close()  # a clean stop snapshots everything
    log.records_read = 0
    third = await started(log, tmp_path, A, B, C)
    assert log.records_read == 0
    assert view(third, A, B, C) == view(first, A, B, C)
    await tier(third, A, 7, 1)  # and it goes on writing where the topic is
    assert len(third.list_remote_log_segments(A)) == 7


async def test_snapshot_newer_than_committed_offsets_is_not_folded_twice(tmp_path):
    log = InMemoryMetadataLog()
    first = await started(log, tmp_path, A, B)
    await tier(first, A, 1, 2)
    await first.sync_snapshots()
    committed = (tmp_path / rlmm_snapshot.COMMITTED_OFFSETS_FILE).read_bytes()
    await tier(first, A, 3, 1)
    await tier(first, B, 1, 1)
    await first.sync_snapshots()
    # A crash after the snapshots were written but before the committed offsets were.
    (tmp_path / rlmm_snapshot.COMMITTED_OFFSETS_FILE).write_bytes(committed)
    log.records_read = 0
    with capture_logs() as logs:
        second = await started(log, tmp_path, A, B)
    assert log.records_read == 4
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]
    assert view(second, A, B) == view(first, A, B)


async def test_corrupt_snapshot_rereads_its_metadata_partition(tmp_path):
    log = InMemoryMetadataLog()
    first = await started(log, tmp_path, A, B, C)
    await tier(first, A, 1, 2)
    await tier(first, B, 1, 1)
    await tier(first, C, 1, 1)
    await first.close()
    (tmp_path / rlmm_snapshot.SNAPSHOT_DIR / rlmm_snapshot.snapshot_file_name(B)).write_bytes(
        b"\x00\x00")
    log.records_read = 0
    second = await started(log, tmp_path, A, B, C)
    assert log.records_read == len(log.partitions[0]) == 6  # partition 3 came from its snapshot
    assert view(second, A, B, C) == view(first, A, B, C)


async def test_committed_offsets_beyond_the_topic_are_dropped(tmp_path):
    log = InMemoryMetadataLog()
    first = await started(log, tmp_path, A)
    await tier(first, A, 1, 2)
    await first.close()
    empty = InMemoryMetadataLog()  # the topic lost its records
    second = await started(empty, tmp_path, A)
    assert second.list_remote_log_segments(A) == []
    await tier(second, A, 9, 1)
    await second.close()
    third = await started(empty, tmp_path, A)
    assert [m.start_offset for m in third.list_remote_log_segments(A)] == [900]


async def test_snapshots_of_unknown_partitions_are_removed(tmp_path):
    log = InMemoryMetadataLog()
    first = await started(log, tmp_path, A)
    await tier(first, A, 1, 1)
    await first.close()
    (tmp_path / rlmm_snapshot.COMMITTED_OFFSETS_FILE).write_text("0\n")
    second = await started(log, tmp_path, A)
    snapshot = tmp_path / rlmm_snapshot.SNAPSHOT_DIR / rlmm_snapshot.snapshot_file_name(A)
    assert not snapshot.exists()
    assert view(second, A) == view(first, A)


async def _file_text_once_written(path: Path, expected: str) -> None:
    # The snapshot write runs in a worker thread, which the autojump clock does not wait
    # for: wait in real time (a virtual deadline here would be jumped to at once).
    for _ in range(5000):
        if path.exists() and path.read_text() == expected:
            return
        await trio.to_thread.run_sync(time.sleep, 0.002)
    raise AssertionError(f"{path} never read {expected!r}")


async def test_run_writes_snapshots_on_its_interval(tmp_path, autojump_clock):
    log = InMemoryMetadataLog()
    rlmm = manager(log, tmp_path, snapshot_interval_s=30.0)
    committed = tmp_path / rlmm_snapshot.COMMITTED_OFFSETS_FILE
    async with trio.open_nursery() as nursery:
        await nursery.start(rlmm.run)
        rlmm.on_partition_leadership_changes([A], [])
        await rlmm.ensure_ready(A)
        await tier(rlmm, A, 1, 1)
        await trio.sleep(29)
        assert not committed.exists()
        await trio.sleep(2)
        await _file_text_once_written(committed, "0\n0 1\n")
        await tier(rlmm, A, 2, 1)
        await _file_text_once_written(committed, "0\n0 3\n")
        # Not before the next interval: run() started at virtual time 0, the
        # first sync came at >= 30, so the second cannot come before 60. (Time
        # measured when this test *noticed* the first file may lag the write.)
        assert trio.current_time() >= 2 * 30.0 - 0.01
        nursery.cancel_scope.cancel()


# -- deleted topics: the controller's markers, the metadata partition's owner ------


def marked(tip: TopicIdPartition) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(tip, P.DELETE_PARTITION_MARKED, 1, 9)


async def test_the_controller_marks_a_partition_it_does_not_host_once(tmp_path):
    log = InMemoryMetadataLog()
    controller = manager(log, tmp_path / "controller")
    await controller.start()
    await controller.mark_partition_deleted(marked(A))
    await controller.mark_partition_deleted(marked(A))  # a new controller marks again
    assert log.partitions[0] == [serialize(marked(A))]
    with pytest.raises(MetadataNotReady):  # marking assigned nothing
        controller.list_remote_log_segments(A)


async def test_the_owner_of_a_metadata_partition_lists_its_unfinished_deletions(tmp_path):
    log = InMemoryMetadataLog()
    writer = await started(log, tmp_path / "writer", A, B, C)
    for tip in (A, B, C):
        await tier(writer, tip, 1, 1)
    await writer.mark_partition_deleted(marked(A))
    await writer.mark_partition_deleted(marked(B))
    await writer.mark_partition_deleted(marked(C))
    for state in (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED):
        await writer.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(B, state, 1, 1))
    owner = manager(log, tmp_path / "owner")
    await owner.start()
    owner.on_metadata_partition_leadership(0, True)
    assert owner.owned_deletions() == []  # not caught up yet
    assert await owner.catch_up_pending()
    assert owner.owned_deletions() == [A]  # B finished; C is in metadata partition 3
    assert owner.positions() == {0: len(log.partitions[0])}
    owner.on_metadata_partition_leadership(0, False)
    assert owner.owned_deletions() == [] and owner.positions() == {}
