"""Remote lookups over a real Log, the filesystem RSM and the topic-based RLMM
(``test_remote_log_manager.Setup``): timestamps and aborted transactions."""

from __future__ import annotations

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
