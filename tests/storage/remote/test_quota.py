"""KIP-956 byte-rate quotas: the windowed rate, the copier waiting, reads skipped."""

from __future__ import annotations

import trio

from storage.remote.quota import RateQuota
from storage.remote.read_pool import ReadKey
from tests.storage.remote.test_remote_log_manager import Completion, Setup, read


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_unlimited_by_default():
    q = RateQuota(2**63 - 1, 11, 1, FakeClock())
    q.record(10**12)
    assert q.throttle_seconds() == 0 and not q.exceeded()


def test_throttles_until_the_excess_leaves_the_window():
    clock = FakeClock()
    q = RateQuota(100, 10, 1, clock)  # 100 B/s over 10 s: 1000 bytes allowed
    q.record(600)
    clock.now = 2.0
    q.record(600)  # 1200 in the window: 200 too many
    assert q.exceeded()
    assert q.throttle_seconds() == 10.0 - 2.0  # until the first 600 expire at t=10
    clock.now = 10.0
    assert q.throttle_seconds() == 0


async def test_copier_waits_for_the_copy_quota(tmp_path, autojump_clock):
    s = Setup(tmp_path)
    s.produce(20)
    seg_size = s.log.segments[0].size
    # One segment per 2 s at most: the quota allows seg_size / 2 bytes per second.
    s.svc.copy_quota = RateQuota(seg_size // 2, 1, 1, trio.current_time)
    await s.start()
    closed = len(s.log.segments) - 1
    started = trio.current_time()
    await s.cycle()
    assert s.log.highest_tiered_offset == s.log.segments[-2].last_offset
    # Every copy after the first waited for the previous one to leave the window.
    assert trio.current_time() - started >= (closed - 1) * 1.0
    waits = s.svc.metrics.copy_throttle.collect()[0].samples
    count = next(x.value for x in waits if x.name.endswith("_count"))
    total = next(x.value for x in waits if x.name.endswith("_sum"))
    assert count == closed - 1 and total >= (closed - 1) * 1.0


async def test_reads_are_skipped_while_over_the_fetch_quota(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    s.svc.fetch_quota = RateQuota(1, 60, 1, trio.current_time)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        first = await read(s, 0, 10_000)
        assert first, "under quota the first read is served"
        p = await s.reads.partition(("t", 0))
        started = s.reads.start(p, ReadKey(("t", 0), 3, 10_000, True), Completion())
        nursery.cancel_scope.cancel()
    # Over quota: no remote read (the purgatory answers the partition empty).
    assert not started and s.reads.in_flight == 0
    refused = s.svc.metrics.fetch_throttle.collect()[0].samples
    assert next(x.value for x in refused if x.name.endswith("_count")) == 1
    assert next(x.value for x in refused if x.name.endswith("_sum")) > 0
