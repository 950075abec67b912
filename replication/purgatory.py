"""Purgatories: requests parked until something happens on their partitions.

Theory of operation: Kafka parks a request that cannot be answered yet (a
fetch with too little data, an acks=all produce whose record the ISR does
not have) in a purgatory keyed by partition, and completes it when an event
on one of its keys makes its condition true, or when it times out. Here a
parked request is a task waiting on a ``trio.Event`` registered under its
keys; ``notify(key)`` sets the events watching that key and the woken tasks
re-check their own condition (cheap, and it keeps the purgatory ignorant of
what the condition is).

Three purgatories, one ``Purgatory`` each, all owned by the ReplicaManager:
- delayed fetch for consumers: woken when a partition's high watermark (or
  last stable offset) advances — a consumer can only read below it;
- delayed fetch for followers: woken when the leader's log end advances;
- delayed produce (acks=all): woken when the high watermark advances or the
  ISR changes (a shrink can satisfy min.insync or make it unreachable).

Bounds: a parked request holds one event and one set entry per key, and only
while its task waits; keys with no watcher are dropped, so memory follows
the number of waiting requests, never the traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager

import trio


class Purgatory:
    """Wake-ups keyed by partition (or any hashable key)."""

    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[trio.Event]] = {}

    def notify(self, key: Hashable) -> None:
        """Wake every request watching ``key``."""
        for event in self._watchers.pop(key, ()):
            event.set()

    def notify_all(self) -> None:
        """Wake everyone (shutdown, or a change that affects every key)."""
        watchers, self._watchers = self._watchers, {}
        for events in watchers.values():
            for event in events:
                event.set()

    @property
    def waiting(self) -> int:
        """Distinct keys being watched (a gauge)."""
        return len(self._watchers)

    @contextmanager
    def watch(self, keys: Iterable[Hashable]) -> Iterator[trio.Event]:
        """An event set by the first notify of one of ``keys`` from now on, for
        a reader that lets other tasks run while it reads and may wait after
        (an event during its read must not be missed)."""
        keys = list(keys)
        event = trio.Event()
        for key in keys:
            self._watchers.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            self._unwatch(keys, event)

    async def wait(self, keys: Iterable[Hashable], deadline: float) -> None:
        """Park until one of ``keys`` is notified or trio's clock reaches ``deadline``."""
        with self.watch(keys) as event, trio.move_on_at(deadline):
            await event.wait()

    async def wait_until(self, keys: Iterable[Hashable], deadline: float,
                         satisfied: Callable[[], bool]) -> bool:
        """Park until ``satisfied()`` is true or trio's clock reaches ``deadline``;
        the condition is checked first and after every wake-up on ``keys``.

        Returns:
            Whether the condition held before the deadline.
        """
        keys = list(keys)
        while not satisfied():
            if trio.current_time() >= deadline:
                return False
            await self.wait(keys, deadline)
        return True

    def _unwatch(self, keys: list[Hashable], event: trio.Event) -> None:
        for key in keys:
            waiting = self._watchers.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._watchers[key]
