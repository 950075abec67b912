"""Byte-rate quotas of the remote tier (KIP-956).

remote.log.manager.copy.max.bytes.per.second throttles copies: before a
segment is copied the copier waits until the measured rate is back under the
quota. remote.log.manager.fetch.max.bytes.per.second throttles remote reads:
while the rate is over the quota, a fetch skips its remote partitions (they
are answered empty, without error) instead of queueing more reads, as
Kafka's ReplicaManager does.

The rate is measured like Kafka's quota sensors: bytes over a window of
``window_num`` samples of ``window_size_s`` seconds each.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class RateQuota:
    """Bytes per second over a sliding window; thread-safe.

    Args:
        bytes_per_second: the quota (Kafka's default Long.MAX means unlimited).
        window_num / window_size_s: remote.log.manager.*.quota.window.num and
            .window.size.seconds.
        clock: seconds (trio.current_time or time.monotonic).
    """

    def __init__(self, bytes_per_second: int, window_num: int, window_size_s: int,
                 clock: Callable[[], float]) -> None:
        self.limit = bytes_per_second
        self.window_s = float(window_num * window_size_s)
        self._clock = clock
        self._events: deque[tuple[float, int]] = deque()
        self._total = 0
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.limit >= 2**63 - 1

    def record(self, nbytes: int) -> None:
        if self.unlimited or nbytes <= 0:
            return
        with self._lock:
            self._events.append((self._clock(), nbytes))
            self._total += nbytes

    def _expire(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - self.window_s:
            _, nbytes = self._events.popleft()
            self._total -= nbytes

    def throttle_seconds(self) -> float:
        """How long until the windowed rate is back under the quota (0 if it is)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._clock()
            self._expire(now)
            excess = self._total - self.limit * self.window_s
            if excess <= 0:
                return 0.0
            # Oldest bytes leave the window first: wait until enough of them have.
            freed = 0
            for at, nbytes in self._events:
                freed += nbytes
                if freed >= excess:
                    return max(at + self.window_s - now, 0.0)
            return self.window_s

    def exceeded(self) -> bool:
        return self.throttle_seconds() > 0
