"""Named one-shot timers on trio's clock, for the group coordinator.

A timer is a task in the owner's nursery sleeping until its deadline, then
calling its callback. Scheduling a key that already has a timer replaces it;
cancelling is idempotent. Because the tasks sleep on ``trio.current_time``,
tests run them under ``trio.testing.MockClock``.

Error handling: an exception from a callback is a coordinator bug; it is
logged with its traceback and does not stop the other timers.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

log = structlog.get_logger(__name__)

TimerKey = tuple[str, ...]


class Timers:
    def __init__(self) -> None:
        self._scopes: dict[TimerKey, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        """Run timers in ``nursery`` from now on."""
        self._nursery = nursery

    def schedule(self, key: TimerKey, deadline: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` at trio time ``deadline`` unless cancelled or replaced first."""
        self.cancel(key)
        scope = trio.CancelScope()
        self._scopes[key] = scope
        assert self._nursery is not None, "timers used before the coordinator runs"
        self._nursery.start_soon(self._fire, key, scope, deadline, callback)

    def scheduled(self, key: TimerKey) -> bool:
        """Whether ``key`` has a timer that has not fired or been cancelled."""
        return key in self._scopes

    def cancel(self, key: TimerKey) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def _fire(self, key: TimerKey, scope: trio.CancelScope, deadline: float,
                    callback: Callable[[], None]) -> None:
        with scope:
            await trio.sleep_until(deadline)
        if scope.cancel_called:
            return
        if self._scopes.get(key) is scope:
            del self._scopes[key]
        try:
            callback()
        except Exception:
            log.exception("group coordinator timer failed", timer=key)
