"""Remote lookups over a real Log, the filesystem RSM and the topic-based RLMM
(``test_remote_log_manager.Setup``): timestamps and aborted transactions."""

from __future__ import annotations

from protocol import control, records
from storage.log.producer_state import AppendOrigin
from storage.remote.lookups import RemoteLookups
from tests.storage.remote.test_read_pool import IndexFetches
from tests.storage.remote.test_remote_log_manager import T0, Setup


async def tiered(tmp_path) -> tuple[Setup, RemoteLookups]:
    s = Setup(tmp_path)
    s.produce(20)  # one record per batch, timestamps T0, T0 + 1, ...
    await s.start()
    await s.cycle()
    s.log.apply_retention(s.log.end_offset)
    return s, RemoteLookups(s.svc, s.rlm)


async def test_offset_for_timestamp_reads_the_remote_time_indexes(tmp_path):
    s, lookups = await tiered(tmp_path)
    tiered_end = s.log.highest_tiered_offset
    assert tiered_end >= 3
    assert await lookups.offset_for_timestamp(("t", 0), T0 + 3) == (3, T0 + 3)
    # Past the tier: the local log answers.
    assert await lookups.offset_for_timestamp(("t", 0), T0 + tiered_end + 1) is None
    assert await lookups.offset_for_timestamp(("u", 0), T0) is None  # not tiered here


async def test_remote_max_timestamp_is_the_newest_tiered_record(tmp_path):
    s, lookups = await tiered(tmp_path)
    assert lookups.remote_max_timestamp(("t", 0)) == T0 + s.log.highest_tiered_offset
    assert lookups.remote_max_timestamp(("u", 0)) is None


async def test_no_aborted_transactions_and_no_index_fetch_without_transactions(tmp_path):
    s, lookups = await tiered(tmp_path)
    counting = IndexFetches(s.rsm)
    s.svc.rsm = counting  # type: ignore[assignment]
    assert await lookups.collect_aborted(("t", 0), 0, s.log.end_offset) == []
    assert counting.calls == []  # the manifests say there is no transaction index
    assert await lookups.collect_aborted(("u", 0), 0, 10) == []  # not tiered here


async def test_a_deposed_leaders_diverged_copy_answers_no_lookup(tmp_path):
    """An unclean election at offset 10: the old leader had tiered offsets 10..19
    under epoch 0 (with an aborted transaction); this log holds other records
    there under epoch 1, tiered too. Timestamps and aborted transactions come
    from this log's lineage only, as reads do."""
    s = Setup(tmp_path, **{"segment.bytes": str(1 << 20)})
    s.produce(10)  # offsets 0..9, T0..T0+9, epoch 0
    s.log.roll()
    ts = s.clock.now
    s.log.append_as_leader(bytearray(records.build_batch(
        [(None, b"t")], timestamp=ts, producer_id=77, producer_epoch=0, base_sequence=0,
        attributes=records.ATTR_TRANSACTIONAL)), 0)
    s.log.append_as_leader(bytearray(control.marker_batch(77, 0, False, 0, ts)), 0,
                           AppendOrigin.COORDINATOR)
    s.produce(8)
    s.log.roll()
    s.produce(1)
    await s.start()
    await s.cycle()
    assert s.log.highest_tiered_offset == 19  # both closed segments, epoch 0
    old_copy = await lookups_of(s).collect_aborted(("t", 0), 10, 20)
    assert [t.producer_id for t in old_copy] == [77]  # the old leader's own abort

    # This replica's log leaves the old one at offset 10 (truncated, as a
    # follower is), then leads under epoch 1 and tiers its own records.
    s.log.truncate_to(10)
    s.log.highest_tiered_offset = 9
    s.clock.now = T0 + 5  # its records: T0 + 5 .. T0 + 14 (the old copy's went to T0 + 17)
    s.produce(10, epoch=1)
    s.log.roll()
    s.produce(1, epoch=1)
    await s.cycle()
    assert s.log.highest_tiered_offset == 19
    lookups = lookups_of(s)
    assert lookups.remote_max_timestamp(("t", 0)) == T0 + 14
    assert await lookups.offset_for_timestamp(("t", 0), T0 + 14) == (19, T0 + 14)
    # Only the old copy has a record this late (T0 + 15 at its offset 17).
    assert await lookups.offset_for_timestamp(("t", 0), T0 + 15) is None
    assert await lookups.collect_aborted(("t", 0), 10, 20) == []


def lookups_of(s: Setup) -> RemoteLookups:
    return RemoteLookups(s.svc, s.rlm)
