"""Full garbage collections that walk only what is new since the last one.

Theory of operation: CPython's full collection walks every tracked object,
and runs once the objects promoted to the oldest generation since the last
one exceed a quarter of those it kept (the 25% rule). A broker hosting
thousands of partitions holds a few hundred thousand long-lived objects
(logs, segments, replica and fetch state, the controller's view), so each
full collection pauses the event loop for 20-100 ms, and new partitions or
a burst of new producers make one due at an arbitrary moment: it turns up
as a stall of whatever task step was allocating.

Start-up already freezes what it built (``broker.app``). After that, a full
collection that paused the loop for ``FREEZE_AFTER_S`` or more has just
proven everything left in the generations alive: the ``stop`` callback moves
it to the permanent generation (``gc.freeze``), so the next full collection
walks only objects created since. Frozen objects are still freed by
reference counting; only a reference cycle among objects that die after
being frozen escapes the collector. So every ``THAW_EVERY_S`` the next full
collection starts by unfreezing (``gc.unfreeze``): it walks everything once,
frees such cycles, and (being long) freezes the survivors again.

Concurrency: the callbacks run inside the collection, on whichever thread
allocated; ``freeze``/``unfreeze`` there only move the generations' lists,
with the collection not running (before ``start`` returns, after ``stop``).
"""

from __future__ import annotations

import gc
import time

import structlog
from prometheus_client import CollectorRegistry, Counter

log = structlog.get_logger(__name__)

# A full collection at least this long is worth not repeating: about half the
# 20 ms a stall may take (issue 22's target at 2,000 partitions per broker).
FREEZE_AFTER_S = 0.010

# How often a full collection walks the frozen objects too, freeing cycles
# among those that died since: rarely enough that its pause (the cost of one
# full collection, as without freezing) is an hourly event, not a recurring one.
THAW_EVERY_S = 3600.0


class GcFreezer:
    def __init__(self, registry: CollectorRegistry, freeze_after_s: float = FREEZE_AFTER_S,
                 thaw_every_s: float = THAW_EVERY_S) -> None:
        self.freeze_after_s = freeze_after_s
        self.thaw_every_s = thaw_every_s
        self.freezes = Counter("tierd_gc_freezes", "Full garbage collections after which "
                               "the survivors were frozen", registry=registry)
        self.thaws = Counter("tierd_gc_thaws", "Full garbage collections that walked the "
                             "frozen objects too", registry=registry)
        self._started = 0.0
        self._thawed = time.monotonic()

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            now = time.monotonic()
            if now - self._thawed >= self.thaw_every_s and gc.get_freeze_count():
                self._thawed = now
                gc.unfreeze()
                self.thaws.inc()
            return
        if time.perf_counter() - self._started >= self.freeze_after_s:
            gc.freeze()
            self.freezes.inc()
            log.debug("full garbage collection's survivors frozen",
                      frozen=gc.get_freeze_count(), collected=info.get("collected", 0))


def install(registry: CollectorRegistry) -> GcFreezer:
    """Freeze the survivors of long full collections from now on."""
    freezer = GcFreezer(registry)
    gc.callbacks.append(freezer.on_gc)
    return freezer


def uninstall(freezer: GcFreezer) -> None:
    if freezer.on_gc in gc.callbacks:
        gc.callbacks.remove(freezer.on_gc)
