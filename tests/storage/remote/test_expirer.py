"""Remote expiration (storage/remote/expirer.py): the leader-epoch lineage rule
and the log start offset it keeps in step with the remote tier.

The lineage cases are Kafka's RemoteLogManager.isRemoteSegmentWithinLeaderEpochs
rule; the others run the RemoteLogManager over a real Log, the filesystem RSM
and the topic-based RLMM (the harness of test_remote_log_manager.py).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from storage.log.log import Log
from storage.remote.expirer import choose_expired, expire_segments
from storage.remote.lineage import in_lineage
from storage.remote.manager import RemoteLogManager
from storage.remote.rlmm import TopicBasedRemoteLogMetadataManager
from storage.remote.types import RemoteLogSegmentState
from tests.storage.remote.test_remote_log_manager import (
    T0,
    Setup,
    _md,
    log_config,
    read_all_remote,
)

# Large enough that the tests decide where segments roll.
NO_AUTO_ROLL = str(1 << 20)


# -- the lineage rule --------------------------------------------------------------


def test_lineage_skips_segment_epochs_older_than_the_cache():
    # DeleteRecords at 6 truncated the cache from the start: epoch 0 is gone
    # from it, but offsets 6..7 of the segment are still live (epoch 1).
    assert in_lineage(_md({0: 3, 1: 5}, 3, 7), [(1, 6)], 10)
    # Kafka's own example: segment 14..150 written by a later leader overlaps
    # one already deleted; the cache now starts at (7, 51).
    assert in_lineage(_md({5: 14, 7: 15, 9: 100}, 14, 150), [(7, 51), (9, 100)], 200)


def test_lineage_rejects_segments_wholly_before_the_cache():
    # Every epoch of the segment predates the log's history: unreferenced.
    assert not in_lineage(_md({0: 0}, 0, 2), [(1, 6)], 10)
    assert not in_lineage(_md({0: 0, 1: 3}, 0, 5), [(2, 6)], 10)


def test_lineage_checks_the_first_epoch_after_the_skipped_ones():
    # Epoch 2 began at 8 in this log, at 5 in the segment: a diverged leader.
    assert not in_lineage(_md({0: 3, 2: 5}, 3, 9), [(1, 6), (2, 8)], 12)
    # The segment skips epoch 1, which holds 6..7 here: not this history.
    assert not in_lineage(_md({0: 3, 2: 8}, 3, 9), [(0, 3), (1, 6), (2, 8)], 12)


def test_lineage_ignores_epochs_without_records():
    # Epoch 2 holds no record (epoch 3 starts where it does), on either side.
    assert in_lineage(_md({1: 100, 2: 200, 3: 200}, 100, 250), [(1, 100), (3, 200)], 300)
    assert in_lineage(_md({1: 100, 3: 200}, 100, 250), [(1, 100), (2, 200), (3, 200)], 300)


def test_lineage_rejects_segments_past_the_log_end():
    assert not in_lineage(_md({1: 100}, 100, 300), [(1, 100)], 300)


# -- DeleteRecords inside a segment whose epochs changed ---------------------------


async def test_delete_records_inside_a_segment_keeps_it_once_its_first_epoch_is_gone(tmp_path):
    s = Setup(tmp_path, **{"segment.bytes": NO_AUTO_ROLL})
    s.produce(3, epoch=0)
    s.log.roll()  # 0..2, epoch 0
    s.produce(2, epoch=0)
    s.produce(3, epoch=1)
    s.log.roll()  # 3..7, epochs {0: 3, 1: 5}
    s.produce(2, epoch=1)  # active: 8..9
    await s.start()
    await s.cycle()
    assert s.log.highest_tiered_offset == 7
    assert s.log.apply_retention(s.log.end_offset) == 2  # only the remote copies are left
    assert s.log.delete_records(6, s.log.end_offset) == 6
    assert s.log.epochs.entries == [(1, 6)]

    await s.cycle()

    left = [(m.start_offset, m.end_offset, m.state)
            for m in s.rlmm.list_remote_log_segments(s.tip)]
    assert left == [(3, 7, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)]
    assert s.log.log_start_offset == 6
    assert await read_all_remote(s, 6, 8) == [6, 7]


# -- the log start offset after a crash --------------------------------------------


async def _expired_then_restarted(tmp_path: Path, stale_start: int) -> tuple[Setup, int]:
    """Remote retention moves the log start, then the broker "crashes" before
    the log-start checkpoint is written: the log reopens at ``stale_start``
    over the same metadata topic and remote tier, under a new manager whose
    partition is started but not yet ready.

    Returns:
        (the harness, now holding the reopened log and new manager; the start
        of the earliest remote segment left).
    """
    topic = {"retention.bytes": "1500"}
    s = Setup(tmp_path, **topic)
    s.produce(30)
    await s.start()
    await s.cycle()  # copies, and expiration runs in the same cycle
    await s.cycle()
    earliest = min(m.start_offset for m in s.rlmm.list_remote_log_segments(s.tip))
    assert s.log.log_start_offset == earliest > stale_start > 0
    s.log.apply_retention(s.log.end_offset)  # local copies of tiered segments go
    s.log.close()

    s.log = Log.open(s.log.directory, "t", 0, log_config(s.broker, **topic), s.clock,
                     log_start_offset=stale_start)
    assert s.log.log_start_offset == stale_start
    s.rlmm = TopicBasedRemoteLogMetadataManager(s.rlmm._log, str(tmp_path / "after-restart"),
                                                num_partitions=s.rlmm.num_partitions)
    s.svc.rlmm = s.rlmm
    s.rlm = RemoteLogManager(s.broker, s.svc)
    await s.start()
    return s, earliest


async def test_log_start_comes_back_from_the_remote_tier_when_tiering_resumes(tmp_path):
    s, earliest = await _expired_then_restarted(tmp_path, stale_start=1)

    await s.rlm._ensure_ready(s.p)

    assert s.log.log_start_offset == earliest
    assert await read_all_remote(s, earliest, s.log.local_log_start_offset) == list(
        range(earliest, s.log.local_log_start_offset))


async def test_every_expiration_run_moves_a_stale_log_start_to_the_remote_tier(tmp_path):
    s, earliest = await _expired_then_restarted(tmp_path, stale_start=1)
    await s.rlmm.ensure_ready(s.tip)  # the metadata, without the manager's restore

    assert await expire_segments(s.p, s.svc) == 0

    assert s.log.log_start_offset == earliest


# -- orphans of another lineage (KIP-405 scenarios 3-5) -----------------------------


def _partition(entries: list[tuple[int, int]], log_start: int, log_end: int) -> SimpleNamespace:
    """The parts of a TieredPartition ``choose_expired`` reads: no retention,
    everything tiered, nothing being copied."""
    lg = SimpleNamespace(epochs=SimpleNamespace(entries=entries), log_start_offset=log_start,
                         end_offset=log_end, local_log_start_offset=log_end, segments=[],
                         highest_tiered_offset=log_end - 1,
                         config=SimpleNamespace(retention_ms=-1, retention_bytes=-1))
    return SimpleNamespace(log=lg, copying=set())


def test_orphans_of_another_lineage_stay_while_their_epochs_are_in_the_cache():
    # KIP-405 scenario 5, step 2: B (LE-1 from 2, after an unclean election)
    # leads over A's LE-0 copies of 2-3. They are not B's history, but A's:
    # A may lead again (step 3) and serve them; nothing else holds them.
    mine = [_md({0: 0}, 0, 0), _md({0: 1}, 1, 1), _md({1: 2}, 2, 2), _md({1: 3}, 3, 3)]
    theirs = [_md({0: 2}, 2, 2), _md({0: 3}, 3, 3)]
    doomed, start = choose_expired(_partition([(0, 0), (1, 2)], 0, 5), mine + theirs, T0)
    assert doomed == [] and start == 0


def test_orphans_go_once_their_epochs_leave_the_cache_or_the_log_start_passes_them():
    below_start = _md({0: 2}, 2, 2)
    older_epoch = _md({1: 6}, 6, 6)  # past the log start, in an epoch the cache dropped
    mine = [_md({2: 4}, 4, 7)]
    doomed, _ = choose_expired(_partition([(2, 4)], 4, 9), mine + [below_start, older_epoch],
                               T0)
    assert doomed == [below_start, older_epoch]
    # The cache still holds epochs 0-2 from 3 on: only the one below the start goes.
    doomed, _ = choose_expired(_partition([(0, 3), (2, 4)], 3, 9),
                               mine + [below_start, older_epoch], T0)
    assert doomed == [below_start]


# -- superseded copies -------------------------------------------------------------


def test_a_copy_replaced_by_a_later_copy_of_the_same_offsets_is_superseded():
    """A leader died just after appending COPY_SEGMENT_FINISHED for 100..104;
    the record was committed only after the new leader had copied 100..104
    again. Reads go to the newer copy; the older one is superseded."""
    import dataclasses
    import uuid

    from storage.remote.expirer import superseded
    from storage.remote.metadata_cache import (
        RemoteLogMetadataCache,
        RemoteLogSegmentMetadataUpdate,
    )
    from storage.remote.types import RemoteLogSegmentId, TopicIdPartition

    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    cache = RemoteLogMetadataCache(tip)

    def copied(start: int, end: int, epochs: dict[int, int]):
        md = dataclasses.replace(_md(epochs, start, end),
                                 remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
                                 state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        cache.apply(md)
        cache.apply(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, T0, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        return cache.segment(md.remote_log_segment_id)

    copied(95, 99, {0: 95})
    old = copied(100, 104, {0: 100})
    copied(100, 104, {0: 100})
    copied(105, 112, {0: 105, 1: 110})
    rlmm = SimpleNamespace(remote_log_segment_metadata=lambda _tip, epoch, offset:
                           cache.remote_log_segment_metadata(epoch, offset))
    segments = cache.list_remote_log_segments()
    assert superseded(rlmm, tip, segments) == {old.remote_log_segment_id}
