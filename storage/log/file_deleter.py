"""Segment files removed off the event loop.

Why: unlinking a segment frees its page-cache pages and its blocks, which
costs the kernel about a millisecond per 8 MiB segment; retention after a
tiered backlog is copied, or a log start moved by DeleteRecords, removes
tens of segments in one pass, and done on the event loop that held every
produce and fetch for 20-30 ms (measured with ``bench --scenario isolation``).
Kafka likewise renames a deleted segment's files ``*.deleted`` and removes
them later, from a scheduler thread.

How: a log drops a segment from memory and renames its files to
``<name>.deleted`` on the loop (a rename is a metadata change, and the
name is free at once for a new segment with the same base offset), then
hands the renamed paths to ``FileDeleter.discard``; ``FileDeleter.run``
unlinks them in a worker thread soon after. A broker that stops before
they are gone removes any ``*.deleted`` left in a log directory when it
opens the log (``storage.log.swap.recover``, which does the same for the
files of cleaned segments' swaps).

The unlinking thread is the deleter's own, in the idle scheduling class
(``storage.worker_priority``): freeing pages is kernel work done in that
thread's name, and on a busy core it waits for the event loop rather than
the other way round (trio's shared worker threads keep the broker's
priority).

Concurrency: ``discard`` is called on the event loop; the unlinks run in the
deleter's one thread. Nothing is ever read from a renamed file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import trio

from storage.worker_priority import run_in_pool, started_pool

DELETED_SUFFIX = ".deleted"

# What a log does with the paths of a segment it deleted: unlink them now
# (the default, for tools and tests) or later (``FileDeleter.discard``).
Discard = Callable[[list[str]], None]


def unlink_all(paths: Iterable[str]) -> None:
    """Remove ``paths``; one already gone is not an error."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class FileDeleter:
    """Paths waiting to be unlinked, and the task that does it."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._wake = trio.Event()

    def discard(self, paths: list[str]) -> None:
        """Unlink ``paths`` soon, in a worker thread (event loop only)."""
        self._paths.extend(paths)
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._paths)

    async def run(self) -> None:
        """Unlink what is discarded, batch by batch, until cancelled."""
        pool = started_pool(1, "segment-deleter", background=True)
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                paths, self._paths = self._paths, []
                await run_in_pool(pool, unlink_all, paths)
        finally:
            pool.shutdown(wait=False)
