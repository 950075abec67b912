"""Event-loop stalls: task steps that keep every other task waiting.

One trio event loop serves every connection, so any task step that runs
long (a synchronous file write, a big loop over partitions, a wait for the
GIL held by a worker thread) delays every produce and fetch in flight by
that much: it is what turns up in produce p99. ``LoopMonitor`` is a trio
instrument timing each task step (two clock reads per step); a step longer
than tierd.event.loop.stall.ms counts in ``tierd_event_loop_stalls`` (by
task name) and ``tierd_event_loop_stall_seconds``, and is logged (at most
once a second per task) with its duration, so the task to fix is named.
The time includes waiting for the GIL while another thread holds it.
"""

from __future__ import annotations

import time

import structlog
import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

log = structlog.get_logger(__name__)

# At most one warning a second for each task name.
_LOG_EVERY_S = 1.0


class LoopMonitor(trio.abc.Instrument):
    def __init__(self, threshold_s: float, registry: CollectorRegistry) -> None:
        self.threshold_s = threshold_s
        self.stalls = Counter("tierd_event_loop_stalls",
                              "Event-loop task steps longer than tierd.event.loop.stall.ms",
                              ["task"], registry=registry)
        self.durations = Histogram(
            "tierd_event_loop_stall_seconds", "Duration of those long task steps",
            registry=registry, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        # None until a step starts under the monitor: the step that installs it
        # began before it was there and has no start time to measure from.
        self._started: float | None = None
        self._logged: dict[str, float] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is None:
            return
        elapsed = time.perf_counter() - self._started
        self._started = None
        if elapsed < self.threshold_s:
            return
        name = task.name
        self.stalls.labels(name).inc()
        self.durations.observe(elapsed)
        now = time.monotonic()
        if now - self._logged.get(name, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._logged[name] = now
            log.warning("event loop stalled by one task step", task=name,
                        ms=round(elapsed * 1000, 1))


def install(threshold_ms: int, registry: CollectorRegistry) -> LoopMonitor | None:
    """Add a monitor to the running trio loop (None when ``threshold_ms`` < 0)."""
    if threshold_ms < 0:
        return None
    monitor = LoopMonitor(threshold_ms / 1000, registry)
    trio.lowlevel.add_instrument(monitor)
    return monitor
