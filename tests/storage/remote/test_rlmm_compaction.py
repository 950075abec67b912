"""Compaction of ``__remote_log_metadata`` (storage.remote.rlmm_compaction) over the
in-memory metadata log of test_rlmm: what is dropped, what readers in every
position end up holding."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from structlog.testing import capture_logs

from storage.remote import rlmm_compaction
from storage.remote.metadata_cache import RemotePartitionDeleteMetadata
from storage.remote.rlmm import MetadataNotReady, TopicBasedRemoteLogMetadataManager
from storage.remote.rlmm_api import (
    PollLimits,
    Restatement,
    TopicRecord,
    parse_restatement_key,
    restatement_key,
)
from storage.remote.rlmm_config import RlmmSettings
from storage.remote.rlmm_serde import deserialize, serialize
from tests.storage.remote.test_rlmm import (
    NUM_PARTITIONS,
    A,
    B,
    C,
    InMemoryMetadataLog,
    P,
    S,
    _tip_in,
    _until,
    marked,
    segment,
    tier,
    update,
    view,
)


async def compacting(log: InMemoryMetadataLog, path: Path, *tips,
                     min_superseded: int = 0) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager(log, str(path), num_partitions=NUM_PARTITIONS,
                                              min_superseded=min_superseded)
    await rlmm.start()
    rlmm.on_partition_leadership_changes(tips, [])
    for tip in tips:
        await rlmm.ensure_ready(tip)
    return rlmm


async def delete(rlmm, md) -> None:
    await rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    await rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))


async def history(rlmm) -> list:
    """Partition 0: A with 10 segments, 6 deleted, 1 being deleted, 1 copy in
    progress; B with 2 segments, then deleted as a partition. C (partition 3): 2 segments."""
    a = await tier(rlmm, A, 1, 10)
    for md in a[:6]:
        await delete(rlmm, md)
    await rlmm.update_remote_log_segment_metadata(update(a[6], S.DELETE_SEGMENT_STARTED))
    await rlmm.add_remote_log_segment_metadata(segment(A, 11, 1000, 1099))
    b = await tier(rlmm, B, 20, 2)
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        await rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(B, state, 5, 1))
    for md in b:
        await delete(rlmm, md)
    await rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(B, P.DELETE_PARTITION_FINISHED, 6, 1))
    await tier(rlmm, C, 30, 2)
    return a


def segments(rlmm, tip) -> list:
    return rlmm.list_remote_log_segments(tip)


async def test_compaction_drops_every_superseded_record_and_keeps_the_live_state(tmp_path):
    log = InMemoryMetadataLog()
    rlmm = await compacting(log, tmp_path / "leader", A, B, C)
    a = await history(rlmm)
    before = view(rlmm, A, B, C)
    end = len(log.partitions[0])
    assert await rlmm.compact(0)
    assert log.starts[0] == end  # everything before the restatement is gone
    kept = [deserialize(v) for v in log.partitions[0][end:]]
    # 3 finished segments (add + update), 1 being deleted (add + update), 1 copying (add);
    # nothing of the 6 deleted segments, nothing of the deleted partition B.
    assert len(kept) == 3 * 2 + 2 + 1
    ids = {e.remote_log_segment_id for e in kept}
    assert ids == {md.remote_log_segment_id for md in a[6:]} | {
        segment(A, 11, 1000, 1099).remote_log_segment_id}
    assert all(e.topic_id_partition == A for e in kept)
    assert view(rlmm, A, B, C) == before  # the leader skips its own restatement
    # A broker reading the topic from scratch sees the same (but the highest
    # offset of deleted segments, which a restatement does not keep: see restore()).
    fresh = await compacting(log, tmp_path / "fresh", A, B, C)
    assert [segments(fresh, t) for t in (A, B, C)] == [segments(rlmm, t) for t in (A, B, C)]
    assert fresh.partition_delete_state(B) is None
    assert fresh.remote_log_segment_metadata(A, 0, 750) == rlmm.remote_log_segment_metadata(
        A, 0, 750)
    assert fresh.remote_log_segment_metadata(A, 0, 150) is None  # deleted stays deleted
    # C's partition was not worth it (nothing superseded): untouched.
    assert not await rlmm.compact(3) and log.starts[3] == 0


async def test_a_reader_behind_the_log_start_forgets_and_rebuilds(tmp_path):
    """A broker that had read half the history (it holds segments deleted since)
    and comes back after compaction drops them: no orphan is resurrected."""
    log = InMemoryMetadataLog()
    leader = await compacting(log, tmp_path / "leader", A)
    a = await tier(leader, A, 1, 4)
    behind = await compacting(log, tmp_path / "behind", A)
    assert len(segments(behind, A)) == 4
    await behind.sync_snapshots()  # its local snapshot now predates the compaction
    await behind.close()
    for md in a[:3]:
        await delete(leader, md)
    await leader.add_remote_log_segment_metadata(segment(A, 9, 900, 999))
    assert await leader.compact(0)
    with capture_logs() as logs:
        back = await compacting(log, tmp_path / "behind", A)
    assert segments(back, A) == segments(leader, A)
    assert [md.remote_log_segment_id for md in segments(back, A)] == [
        a[3].remote_log_segment_id, segment(A, 9, 900, 999).remote_log_segment_id]
    assert any(e["event"] == "remote log metadata rebuilt from a restatement" for e in logs)
    # Writes after the compaction fold on top of it, here and on a fresh reader.
    await leader.update_remote_log_segment_metadata(
        update(segment(A, 9, 900, 999), S.COPY_SEGMENT_FINISHED))
    await back.ensure_ready(A)
    fresh = await compacting(log, tmp_path / "fresh", A)
    assert view(back, A) == view(fresh, A) == view(leader, A)


async def test_a_caught_up_reader_skips_the_restatement(tmp_path):
    log = InMemoryMetadataLog()
    leader = await compacting(log, tmp_path / "leader", A, B, C)
    await history(leader)
    other = await compacting(log, tmp_path / "other", A, B, C)
    before = view(other, A, B, C)
    assert await leader.compact(0)
    with capture_logs() as logs:
        await other.ensure_ready(A)
    assert view(other, A, B, C) == before
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]


async def test_compaction_happens_only_where_led_and_worth_it(tmp_path):
    log = InMemoryMetadataLog()
    rlmm = await compacting(log, tmp_path, A, min_superseded=5)
    a = await tier(rlmm, A, 1, 3)
    await delete(rlmm, a[0])
    # 8 records, 4 restated: 4 superseded, under the minimum of 5.
    assert not await rlmm.compact(0)
    await delete(rlmm, a[1])
    log.leader = False
    assert not await rlmm.compact(0)
    log.leader = True
    assert await rlmm.compact(0)
    assert log.starts[0] == 10
    # Right after, the restatement itself is all there is: nothing superseded.
    assert not await rlmm.compact(0)
    never = await compacting(log, tmp_path / "never", A, min_superseded=-1)
    await delete(never, a[2])
    assert not await never.compact(0)


async def test_the_leader_compacts_partitions_it_hosts_no_user_partition_of(tmp_path):
    """The leader of a metadata partition compacts it even where none of its user
    partitions is assigned (their leaders are other brokers)."""
    log = InMemoryMetadataLog()
    writer = await compacting(log, tmp_path / "writer", A)
    a = await tier(writer, A, 1, 3)
    await delete(writer, a[0])
    leader = await compacting(log, tmp_path / "leader")  # nothing assigned
    assert not await leader.compact(0)  # nothing folded for partition 0 yet
    await leader._compact_all()
    assert log.starts[0] == 8
    with pytest.raises(MetadataNotReady):  # folded for compaction only, not served
        leader.list_remote_log_segments(A)
    await writer.ensure_ready(A)
    assert [md.remote_log_segment_id for md in segments(writer, A)] == [
        md.remote_log_segment_id for md in a[1:]]


async def test_a_restatement_is_dropped_if_the_log_moved_on_meanwhile(tmp_path):
    """Another broker's record lands while the restatement is being built (in a
    thread): the append is refused, the next interval tries again."""
    log = InMemoryMetadataLog()
    rlmm = await compacting(log, tmp_path, A)
    a = await tier(rlmm, A, 1, 2)
    await delete(rlmm, a[0])
    real = rlmm_compaction.restatement_values

    def racing(states):
        log.partitions[0].append(serialize(segment(B, 7, 0, 9)))  # another writer's record
        return real(states)

    rlmm_compaction.restatement_values = racing  # type: ignore[assignment]
    try:
        assert not await rlmm.compact(0)
    finally:
        rlmm_compaction.restatement_values = real  # type: ignore[assignment]
    assert log.starts[0] == 0 and len(log.partitions[0]) == 7
    assert await rlmm.compact(0)


async def test_partial_restatement_is_never_trusted(tmp_path):
    """A leader died with only part of a restatement replicated, and a stale log
    start (after a crash) lands a new reader before it: the reader skips the
    partial one and rebuilds from the next complete one."""
    log = InMemoryMetadataLog()
    rlmm = await compacting(log, tmp_path / "leader", A)
    a = await tier(rlmm, A, 1, 3)
    await delete(rlmm, a[0])
    # A partial restatement: claims 4 records, has 2 (a[1] only), then life goes on.
    partial = rlmm_compaction.restatement_values([([a[1], a[2]], None)])
    first = len(log.partitions[0])
    for value in partial[:2]:
        log.keys[0, len(log.partitions[0])] = restatement_key(first, 4)
        log.partitions[0].append(value)
    await rlmm.ensure_ready(A)
    await delete(rlmm, a[1])
    assert await rlmm.compact(0)
    log.starts[0] = 2  # the crash: the log start fell back below both restatements
    with capture_logs() as logs:
        fresh = await compacting(log, tmp_path / "fresh", A)
    assert segments(fresh, A) == segments(rlmm, A) == [
        rlmm.list_remote_log_segments(A)[0]]
    assert [s.remote_log_segment_id for s in segments(fresh, A)] == [a[2].remote_log_segment_id]
    assert any(e["event"] == "partial remote log metadata restatement skipped" for e in logs)


@pytest.mark.parametrize("configured", [
    {"snapshot_interval_s": 1.0, "min_superseded": 0},
    # The same through the rlmm.config.* keys (rlmm_config).
    {"settings": RlmmSettings(num_partitions=NUM_PARTITIONS, snapshot_interval_ms=1000,
                              compaction_min_superseded_records=0)},
])
async def test_run_compacts_on_its_interval(tmp_path, autojump_clock, configured):
    log = InMemoryMetadataLog()
    rlmm = TopicBasedRemoteLogMetadataManager(log, str(tmp_path), num_partitions=NUM_PARTITIONS,
                                              **configured)
    async with trio.open_nursery() as nursery:
        await nursery.start(rlmm.run)
        rlmm.on_partition_leadership_changes([A], [])
        await rlmm.ensure_ready(A)
        a = await tier(rlmm, A, 1, 2)
        await delete(rlmm, a[0])
        await trio.sleep(0.5)
        assert log.starts[0] == 0
        # The interval's work goes through threads (snapshot files, the
        # restatement), during which the mock clock jumps: wait in real time.
        for _ in range(5000):
            if log.starts[0]:
                break
            await trio.to_thread.run_sync(time.sleep, 0.002)
        assert log.starts[0] == 6
        assert trio.current_time() >= 1.0
        await rlmm.close()
        nursery.cancel_scope.cancel()


def test_restatement_keys():
    assert parse_restatement_key(restatement_key(12, 3)) == Restatement(12, 3)
    assert Restatement(12, 3).end == 15
    for bad in (None, b"", b"other", b"tierd.rlmm.restatement:", b"tierd.rlmm.restatement:1",
                b"tierd.rlmm.restatement:1:0", b"tierd.rlmm.restatement:x:1",
                b"tierd.rlmm.restatement:-1:2"):
        assert parse_restatement_key(bad) is None


@pytest.mark.parametrize(("records", "restated", "minimum", "worth"), [
    (10, 4, 0, True),     # 6 superseded >= 4 restated
    (10, 6, 0, False),    # 4 superseded < 6 restated: the log is not yet twice its live size
    (10, 0, 0, True),
    (4, 4, 0, False),     # nothing superseded
    (30, 4, 26, True), (30, 4, 27, False),
    (30, 4, -1, False),   # disabled
])
def test_worth_compacting(records, restated, minimum, worth):
    assert rlmm_compaction.worth_compacting(records, restated, minimum) is worth


def test_restatement_of_a_partition_being_deleted_is_the_chain_to_its_state():
    md = segment(A, 1, 0, 99)
    states = [([md], RemotePartitionDeleteMetadata(A, P.DELETE_PARTITION_STARTED, 5, 1))]
    events = [deserialize(v) for v in rlmm_compaction.restatement_values(states)]
    assert [e.state for e in events] == [
        S.COPY_SEGMENT_STARTED, P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED]
    assert rlmm_compaction.restatement_size(states) == len(events)
    assert C  # imported for symmetry with test_rlmm's partitions


class LaggingMetadataLog(InMemoryMetadataLog):
    """Its long-polls wait for ``gate`` before they look: a follower whose
    next poll comes only after the leader compacted."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = trio.Event()
        self.gate.set()

    async def poll(self, positions, limits: PollLimits) -> dict[int, list[TopicRecord]]:
        await self.gate.wait()
        return dict(await super().poll(positions, limits))


async def test_a_long_polling_follower_left_below_the_log_start_rebuilds(tmp_path, autojump_clock):
    """The follower's next long-poll asks below the new log start: the answer
    starts at the log start, and the follower forgets and rebuilds from the
    restatement as a catch-up read would (no orphan kept, nothing re-read)."""
    log = LaggingMetadataLog()
    leader = await compacting(log, tmp_path / "leader", A, B)
    a = await tier(leader, A, 1, 4)
    follower = TopicBasedRemoteLogMetadataManager(log, str(tmp_path / "follower"),
                                                  num_partitions=NUM_PARTITIONS, min_superseded=-1)
    async with trio.open_nursery() as nursery:
        await nursery.start(follower.run)
        follower.on_partition_leadership_changes([], [A, B])
        await _until(lambda: follower.is_ready(A) and view(follower, A) == view(leader, A), "")
        log.gate = trio.Event()  # the poll parked now answers; the next one lags
        await delete(leader, a[0])
        await trio.testing.wait_all_tasks_blocked()
        for md in a[1:3]:
            await delete(leader, md)
        await tier(leader, B, 7, 1)
        assert await leader.compact(0)
        read_before = log.records_read
        with capture_logs() as logs:
            log.gate.set()
            await _until(lambda: view(follower, A, B) == view(leader, A, B), "rebuilt")
        assert log.records_read == read_before  # by the long-poll alone
        assert [md.remote_log_segment_id for md in segments(follower, A)] == [
            a[3].remote_log_segment_id]
        events = [e["event"] for e in logs]
        assert "remote log metadata missing (compacted); rebuilding" in events
        assert "remote log metadata rebuilt from a restatement" in events
        # It goes on long-polling from there.
        await tier(leader, A, 9, 1)
        await _until(lambda: view(follower, A) == view(leader, A), "followed")
        nursery.cancel_scope.cancel()


async def test_compaction_keeps_marked_deletions_and_drops_finished_ones(tmp_path):
    """Controller-driven deletion: a partition the controller marked and its
    owner has not finished removing is restated (a new owner must resume it);
    one whose DELETE_PARTITION_FINISHED is written is gone."""
    log = InMemoryMetadataLog()
    owner = await compacting(log, tmp_path / "owner", A, B)
    owner.on_metadata_partition_leadership(0, True)
    await tier(owner, A, 1, 2)
    b = await tier(owner, B, 1, 2)
    never_tiered = _tip_in(0, "never-tiered")
    controller = TopicBasedRemoteLogMetadataManager(log, str(tmp_path / "controller"),
                                                    num_partitions=NUM_PARTITIONS)
    await controller.start()
    for tip in (A, B, never_tiered):
        await controller.mark_partition_deleted(marked(tip))
    # The owner removes B: STARTED, its segments, FINISHED.
    await owner.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(B, P.DELETE_PARTITION_STARTED, 5, 1))
    for md in b:
        await delete(owner, md)
    await owner.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(B, P.DELETE_PARTITION_FINISHED, 6, 1))
    unfinished = sorted([A, never_tiered], key=str)
    assert sorted(owner.owned_deletions(), key=str) == unfinished
    end = len(log.partitions[0])
    assert await owner.compact(0)
    kept = [deserialize(v) for v in log.partitions[0][end:]]
    assert {e.topic_id_partition for e in kept} == {A, never_tiered}
    assert [e.state for e in kept if e.topic_id_partition == never_tiered] == [
        P.DELETE_PARTITION_MARKED]
    # The metadata partition's next leader resumes from the restatement alone.
    successor = TopicBasedRemoteLogMetadataManager(log, str(tmp_path / "successor"),
                                                   num_partitions=NUM_PARTITIONS)
    await successor.start()
    successor.on_metadata_partition_leadership(0, True)
    assert await successor.catch_up_pending()
    assert sorted(successor.owned_deletions(), key=str) == unfinished
    assert successor.partition_delete_state(A) == P.DELETE_PARTITION_MARKED
    assert successor.partition_delete_state(B) is None
    assert successor.list_remote_log_segments(A) == segments(owner, A)
    # A new controller marking again writes nothing: the restatement holds the marks.
    again = TopicBasedRemoteLogMetadataManager(log, str(tmp_path / "again"),
                                               num_partitions=NUM_PARTITIONS)
    await again.start()
    for tip in (A, never_tiered):
        await again.mark_partition_deleted(marked(tip))
    assert len(log.partitions[0]) == end + len(kept)
