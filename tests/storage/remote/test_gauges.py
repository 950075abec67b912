"""Tiered-storage gauges: snapshots taken on the event loop, served as they
were taken; pool idle percentages over a fixed window, whatever the scrapes."""

from __future__ import annotations

import pytest
import trio
from prometheus_client import CollectorRegistry

from storage.remote.gauges import RemoteGaugeCollector
from storage.remote.metrics import BusyTracker
from tests.storage.remote.test_remote_log_manager import Setup


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.values()): s.value for family in registry.collect()
            for s in family.samples if s.name == name}


async def test_the_exporter_reads_the_snapshot_not_the_live_state(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    registry = CollectorRegistry()
    gauges = RemoteGaugeCollector(s.rlm.partitions, s.svc)
    registry.register(gauges)
    assert samples(registry, "RemoteLogMetadataCount") == {}  # no snapshot yet
    await gauges.snapshot()
    tiered = s.rlmm.list_remote_log_segments(s.tip)
    assert samples(registry, "RemoteLogMetadataCount") == {("t", "0"): len(tiered)}
    assert samples(registry, "RemoteLogSizeBytes") == {
        ("t", "0"): sum(m.segment_size_in_bytes for m in tiered)}
    assert samples(registry, "RemoteCopyLagSegments") == {("t", "0"): 0}
    s.produce(20)  # new closed segments: copy lag, once the next snapshot sees it
    assert samples(registry, "RemoteCopyLagSegments") == {("t", "0"): 0}
    await gauges.snapshot()
    assert samples(registry, "RemoteCopyLagSegments")[("t", "0")] > 0
    assert samples(registry, "RemoteLogReaderAvgIdlePercent") == {(): 100.0}


async def test_delete_lag_counts_segments_to_delete_until_the_expirer_deletes_them(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    registry = CollectorRegistry()
    gauges = RemoteGaugeCollector(s.rlm.partitions, s.svc)
    registry.register(gauges)
    await gauges.snapshot()
    assert samples(registry, "RemoteDeleteLagSegments") == {("t", "0"): 0}
    assert samples(registry, "RemoteLogSizeComputationTime")[("t", "0")] >= 0
    tiered = sorted(s.rlmm.list_remote_log_segments(s.tip), key=lambda m: m.start_offset)
    assert len(tiered) >= 3
    # DeleteRecords moves the log start past the first two remote segments.
    s.log.advance_log_start_offset(tiered[1].end_offset + 1)
    await gauges.snapshot()
    assert samples(registry, "RemoteDeleteLagSegments") == {("t", "0"): 2}
    assert samples(registry, "RemoteDeleteLagBytes") == {
        ("t", "0"): sum(m.segment_size_in_bytes for m in tiered[:2])}
    await s.cycle()  # the expirer deletes them
    await gauges.snapshot()
    assert samples(registry, "RemoteDeleteLagSegments") == {("t", "0"): 0}
    assert samples(registry, "RemoteDeleteLagBytes") == {("t", "0"): 0}


async def test_the_snapshot_task_refreshes_every_interval(tmp_path, autojump_clock):
    s = Setup(tmp_path)
    await s.start()
    gauges = RemoteGaugeCollector(s.rlm.partitions, s.svc)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gauges.run, 1.0)
        await trio.sleep(0.5)
        first = gauges.latest
        await trio.sleep(1)
        assert gauges.latest is not first
        nursery.cancel_scope.cancel()


def test_idle_percent_is_over_a_fixed_window_not_since_the_last_scrape():
    clock = FakeClock()
    tracker = BusyTracker(1, window_s=30, clock=clock)
    token = tracker.start()
    clock.now = 15
    tracker.stop(token)  # busy 0..15 s
    seen = []
    for second in range(16, 61):
        clock.now = second
        seen.append(tracker.idle_percent())  # the snapshot task, once a second
    assert seen[30 - 16] == pytest.approx(50.0)  # t=30: 15 s busy of the last 30
    assert seen[-1] == pytest.approx(100.0)  # t=60: nothing busy since t=30
    # Reading it more often (or twice at once) gives the same figure.
    assert tracker.idle_percent() == pytest.approx(100.0)


def test_a_task_still_running_counts_as_busy():
    clock = FakeClock()
    tracker = BusyTracker(2, window_s=30, clock=clock)
    tracker.start()
    clock.now = 30
    assert tracker.idle_percent() == pytest.approx(50.0)  # one of two workers busy
    clock.now = 60
    assert tracker.idle_percent() == pytest.approx(50.0)
