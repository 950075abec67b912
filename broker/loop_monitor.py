"""Event-loop stalls: task steps that keep every other task waiting.

One trio event loop serves every connection, so any task step that runs
long (a synchronous file write, a big loop over partitions, a wait for the
GIL held by a worker thread) delays every produce and fetch in flight by
that much: it is what turns up in produce p99. ``LoopMonitor`` is a trio
instrument timing each task step (two clock reads per step); a step longer
than tierd.event.loop.stall.ms counts in ``tierd_event_loop_stalls`` (by
task name) and ``tierd_event_loop_stall_seconds``, and is logged (at most
once a second per task, and whenever it is the task's longest yet) with its
duration, so the task to fix is named. A task serving many kinds of work
(a connection) can say what it last took up (``doing``); the warning shows it.
The time includes waiting for the GIL while another thread holds it.

Garbage collection runs inside whichever step allocates when a threshold is
crossed, so a long collection shows up as a stall of an arbitrary task. The
monitor also times every collection (``gc.callbacks``): one longer than the
threshold counts in ``tierd_gc_pauses`` by generation and is logged, so such
a stall is not blamed on the task it happened in.
"""

from __future__ import annotations

import gc
import time
import weakref

import structlog
import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

log = structlog.get_logger(__name__)

# At most one warning a second for each task name.
_LOG_EVERY_S = 1.0

# What each task said it last took up (diagnostics only: read in warnings).
_DOING: weakref.WeakKeyDictionary[trio.lowlevel.Task, str] = weakref.WeakKeyDictionary()


def doing(what: str) -> None:
    """Name what the current task is taking up (e.g. a request's API), for the
    stall warnings of its next steps."""
    _DOING[trio.lowlevel.current_task()] = what


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
        self._longest: dict[str, float] = {}
        self.gc_pauses = Counter("tierd_gc_pauses", "Garbage collections longer than "
                                 "tierd.event.loop.stall.ms", ["generation"], registry=registry)
        self._gc_started = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._gc_started
        if elapsed >= self.threshold_s:
            generation = info.get("generation", -1)
            self.gc_pauses.labels(str(generation)).inc()
            log.warning("garbage collection paused the event loop", generation=generation,
                        ms=round(elapsed * 1000, 1), collected=info.get("collected", 0))

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
        longest = elapsed > self._longest.get(name, 0.0)
        if longest or now - self._logged.get(name, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._logged[name] = now
            self._longest[name] = max(elapsed, self._longest.get(name, 0.0))
            log.warning("event loop stalled by one task step", task=name,
                        ms=round(elapsed * 1000, 1), last=_DOING.get(task))


def install(threshold_ms: int, registry: CollectorRegistry) -> LoopMonitor | None:
    """Add a monitor to the running trio loop (None when ``threshold_ms`` < 0)."""
    if threshold_ms < 0:
        return None
    monitor = LoopMonitor(threshold_ms / 1000, registry)
    trio.lowlevel.add_instrument(monitor)
    gc.callbacks.append(monitor.on_gc)
    return monitor


def uninstall(monitor: LoopMonitor) -> None:
    """Take ``monitor`` off the running trio loop and the garbage collector."""
    trio.lowlevel.remove_instrument(monitor)
    if monitor.on_gc in gc.callbacks:
        gc.callbacks.remove(monitor.on_gc)
