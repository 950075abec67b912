"""LoopMonitor: a task step that blocks the event loop is counted, by task, and
steps that yield in time are not."""

from __future__ import annotations

import time

import trio
from prometheus_client import CollectorRegistry

from broker import loop_monitor


async def blocking_step() -> None:
    time.sleep(0.06)  # a synchronous call on the event loop
    await trio.sleep(0)


async def polite_steps() -> None:
    for _ in range(20):
        time.sleep(0.001)
        await trio.sleep(0)


def stalls(registry: CollectorRegistry, task: str) -> float:
    return registry.get_sample_value("tierd_event_loop_stalls_total", {"task": task}) or 0.0


def test_a_long_step_is_a_stall_of_its_task() -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        monitor = loop_monitor.install(30, registry)
        assert monitor is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocking_step)
            nursery.start_soon(polite_steps)
        loop_monitor.uninstall(monitor)

    trio.run(main)
    name = f"{__name__}.blocking_step"
    assert stalls(registry, name) == 1
    assert stalls(registry, f"{__name__}.polite_steps") == 0
    assert registry.get_sample_value("tierd_event_loop_stall_seconds_count") >= 1
    assert registry.get_sample_value("tierd_event_loop_stall_seconds_sum") >= 0.06


def test_off_installs_nothing() -> None:
    async def main() -> None:
        assert loop_monitor.install(-1, CollectorRegistry()) is None

    trio.run(main)


def test_the_installing_step_is_not_a_stall() -> None:
    """The step that installs the monitor started before it: it has no start
    time, and once reported the whole time since the process started."""
    registry = CollectorRegistry()

    async def main() -> None:
        time.sleep(0.05)  # long before the install, in the same step
        monitor = loop_monitor.install(30, registry)
        assert monitor is not None
        await trio.sleep(0)
        loop_monitor.uninstall(monitor)

    trio.run(main)
    assert registry.get_sample_value("tierd_event_loop_stall_seconds_count") == 0


def test_a_longer_stall_is_logged_within_the_second() -> None:
    """Warnings are rate-limited per task, but a step longer than any the task
    had before is always logged: the longest stall is never hidden."""
    from structlog.testing import capture_logs

    async def stalls_growing() -> None:
        for seconds in (0.03, 0.011, 0.08):
            time.sleep(seconds)
            await trio.sleep(0)

    async def main() -> None:
        monitor = loop_monitor.install(10, CollectorRegistry())
        assert monitor is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stalls_growing)
        loop_monitor.uninstall(monitor)

    with capture_logs() as logs:
        trio.run(main)
    logged = [e["ms"] for e in logs if e["event"] == "event loop stalled by one task step"]
    assert len(logged) == 2 and logged[0] >= 30 and logged[1] >= 80, logged


def test_a_long_garbage_collection_is_counted_by_generation() -> None:
    import gc

    registry = CollectorRegistry()

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    async def main() -> None:
        monitor = loop_monitor.install(0, registry)  # every collection counts
        assert monitor is not None
        for _ in range(200_000):
            Node()
        gc.collect(2)
        loop_monitor.uninstall(monitor)
        assert monitor.on_gc not in gc.callbacks

    trio.run(main)
    assert (registry.get_sample_value("tierd_gc_pauses_total", {"generation": "2"}) or 0) >= 1
