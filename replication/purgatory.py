"""Purgatories: requests parked until something happens on their partitions.

Theory of operation: Kafka parks a request that cannot be answered yet (a
fetch with too little data, an acks=all produce whose record the ISR does
not have) in a purgatory keyed by partition, and completes it when an event
on one of its keys makes its condition true, or when it times out. Here a
parked request is a task waiting on a ``trio.Event`` registered under its
keys; ``notify(key)`` sets the events watching that key and the woken tasks
re-check their own condition (cheap, and it keeps the purgatory ignorant of
what the condition is).

Four purgatories, all owned by the ReplicaManager; three are a ``Purgatory``:
- delayed fetch for consumers: woken when a partition's high watermark (or
  last stable offset) advances — a consumer can only read below it;
- delayed fetch for followers: woken when the leader's log end advances;
- delayed produce (acks=all): woken when the high watermark advances or the
  ISR changes (a shrink can satisfy min.insync or make it unreachable).

Bounds: a parked request holds one event and one set entry per key, and only
while its task waits; keys with no watcher are dropped, so memory follows
the number of waiting requests, never the traffic.

The fourth, remote fetch, is a ``RemoteFetchPurgatory`` of
``DelayedRemoteFetch`` entries: a consumer's read below the local log start
parks under its read key (partition, offset, max bytes, min one batch) until
the reader pool (``storage.remote.read_pool``) completes the entry with a
result value, or until remote.fetch.max.wait.ms expires the wait. Fetches of
the same key join one entry, so one read serves them all. An expired wait
leaves the read running and its result parked under the key, so the client's
retry is answered at once; a result is delivered once, then dropped, and
parked results are bounded in age (``RESULT_TTL_S``) and bytes
(``PARKED_MAX_BYTES``); entries in flight by the pool's
remote.log.reader.max.pending.tasks. An error result answers only the fetches that were
waiting for it: the next fetch reads again (the store may have recovered).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager

import trio

from protocol.partition import TopicPartition
from storage.remote.read_pool import ReadKey, RemoteReadPool, RemoteReadResult

# How long a finished remote read waits for the client's retry after
# remote.fetch.max.wait.ms expired on the first attempt (a result is parked
# only until one fetch takes it), and how many bytes such results may hold in
# all: beyond it the oldest are dropped (their fetch reads again).
RESULT_TTL_S = 30.0
PARKED_MAX_BYTES = 64 * 1024 * 1024


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


class DelayedRemoteFetch:
    """One remote read, parked under its key until the reader pool completes it.

    Implements storage's ``ReadCompletion``: ``complete`` is the reader
    pool's only way back into the fetch path.
    """

    def __init__(self, key: ReadKey, on_complete: Callable[[], None]) -> None:
        self.key = key
        self.result: RemoteReadResult | None = None
        self.completed_at = 0.0
        self._done = trio.Event()
        self._on_complete = on_complete

    @property
    def completed(self) -> bool:
        return self.result is not None

    @property
    def failed(self) -> bool:
        return self.result is not None and self.result.error is not None

    def complete(self, result: RemoteReadResult) -> None:
        """The read's outcome (event loop only); wakes every fetch waiting on it."""
        if self.result is not None:
            return
        self.result = result
        self.completed_at = trio.current_time()
        self._done.set()
        self._on_complete()

    async def wait(self, deadline: float) -> RemoteReadResult | None:
        """The result, or None if trio's clock reaches ``deadline`` first (expired)."""
        with trio.move_on_at(deadline):
            await self._done.wait()
        return self.result


class RemoteFetchPurgatory:
    """Remote reads in flight or parked for a retry, by read key.

    Concurrency: event loop only.
    """

    def __init__(self, result_ttl_s: float = RESULT_TTL_S,
                 parked_max_bytes: int = PARKED_MAX_BYTES) -> None:
        self.result_ttl_s = result_ttl_s
        self.parked_max_bytes = parked_max_bytes
        self._entries: dict[ReadKey, DelayedRemoteFetch] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def fetch(self, key: ReadKey, deadline: float,
                    start: Callable[[DelayedRemoteFetch], bool]) -> RemoteReadResult | None:
        """Wait for the read of ``key`` until ``deadline``, joining the entry
        already parked under it, or parking a new one and calling ``start``
        with it (the reader pool completes it).

        Returns:
            The result; None if ``start`` declined (it returned False) or the
            wait expired (the read goes on; a retry of ``key`` joins it).

        Raises:
            Whatever ``start`` raises (nothing is parked then).
        """
        entry = self._entries.get(key)
        if entry is not None and entry.failed:
            del self._entries[key]  # answered the fetches that waited for it
            entry = None
        if entry is None:
            entry = self._park(key, start)
            if entry is None:
                return None
        result = await entry.wait(deadline)
        if result is not None and self._entries.get(key) is entry:
            del self._entries[key]  # delivered: fetches waiting on it hold the entry
        return result

    async def read(self, reads: RemoteReadPool, tp: TopicPartition, offset: int,
                   max_bytes: int, min_one_batch: bool, deadline: float) -> bytes | None:
        """A consumer's records from the remote tier, read by ``reads``.

        Returns:
            The records; None if there are none by ``deadline``, or no read
            may start now (a zero byte share, the KIP-956 quota).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE (no such remote data),
                KAFKA_STORAGE_ERROR (store down, object missing, queue full),
                CORRUPT_MESSAGE (remote bytes fail validation).
        """
        p = await reads.partition(tp)
        if max_bytes <= 0 and not min_one_batch:
            return None  # no byte share for this partition: a read could return nothing
        key = ReadKey(tp, offset, max_bytes, min_one_batch)
        result = await self.fetch(key, deadline, lambda entry: reads.start(p, key, entry))
        if result is None:
            return None
        if result.error is not None:
            raise result.error
        return result.records

    def _park(self, key: ReadKey,
              start: Callable[[DelayedRemoteFetch], bool]) -> DelayedRemoteFetch | None:
        entry = DelayedRemoteFetch(key, self.expire_parked)
        self._entries[key] = entry
        try:
            started = start(entry)
        except BaseException:
            self._discard(entry)
            raise
        if not started:
            self._discard(entry)
            return None
        return entry

    def _discard(self, entry: DelayedRemoteFetch) -> None:
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]

    def expire_parked(self) -> None:
        """Drop parked results older than ``result_ttl_s``, then the oldest
        beyond ``parked_max_bytes`` (reads in flight stay)."""
        cutoff = trio.current_time() - self.result_ttl_s
        parked = sorted((e for e in self._entries.values() if e.completed),
                        key=lambda e: e.completed_at)
        total = sum(_size(e) for e in parked)
        for entry in parked:
            if entry.completed_at >= cutoff and total <= self.parked_max_bytes:
                break
            total -= _size(entry)
            self._discard(entry)

    async def run(self) -> None:
        """Expire parked results that no read completion came to clear, until cancelled."""
        while True:
            await trio.sleep(self.result_ttl_s)
            self.expire_parked()


def _size(entry: DelayedRemoteFetch) -> int:
    return len(entry.result.records) if entry.result is not None else 0
