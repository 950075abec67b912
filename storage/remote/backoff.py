"""Retry timing of the periodic remote tasks (Kafka's remote.log.manager.task.retry.*)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with jitter: initial * 2^failures, capped, +/- jitter.

    Args:
        initial_ms: remote.log.manager.task.retry.backoff.ms.
        max_ms: remote.log.manager.task.retry.backoff.max.ms.
        jitter: remote.log.manager.task.retry.jitter (fraction, e.g. 0.2).
    """

    initial_ms: int
    max_ms: int
    jitter: float
    failures: int = 0
    next_attempt_ms: int = 0

    def ready(self, now_ms: int) -> bool:
        return now_ms >= self.next_attempt_ms

    def failed(self, now_ms: int) -> int:
        """Record a failure; returns the delay before the next attempt."""
        base = min(self.initial_ms * (2 ** min(self.failures, 30)), self.max_ms)
        self.failures += 1
        delay = int(base * (1 + random.uniform(-self.jitter, self.jitter)))
        self.next_attempt_ms = now_ms + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.next_attempt_ms = 0
