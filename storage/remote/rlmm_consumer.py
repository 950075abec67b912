"""The topic-based metadata manager's consumer task: it long-polls
``__remote_log_metadata`` and hands what it reads to the manager to fold.

Theory of operation
-------------------
Kafka's manager consumes its topic with a KafkaConsumer, whose fetches wait
on the leader (fetch.max.wait.ms, fetch.min.bytes) instead of asking again
on a timer. So does this task: the assigned metadata partitions are split
into groups one request can serve (``MetadataLog.poll_groups``: one per
leader broker), and each group has a poller that long-polls it in a loop.
An idle broker thus sends one request per leader per fetch.max.wait.ms, and
a new record is answered, and folded, as soon as it is committed.

A round of the task: catch up (non-waiting reads) every assigned partition
not yet ready, start one poller per group, and wait for a wake-up: the
assignment changed, a poller found its group's leader moved or failed, or
the manager closed. A wake-up cancels the pollers (a cancelled request drops
its connection, see ``replication.peer``) and starts the next round.

Folding is the manager's (``fold_polled``): it takes the partition's lock
and skips what a writer already folded, so a poll racing a write folds
nothing twice; a poll that finds records missing (its position was below the
log start after a compaction: the answer starts at the log start) makes the
partition rebuild from the next complete restatement, as a catch-up read
does (``rlmm_partition``). The manager's interval work (snapshots, then
compaction) runs every ``snapshot_interval_s`` in a task beside the rounds.

Concurrency: everything on the trio thread. Error handling: a failing poll
is logged, the group waits a retry interval and asks for a new round (the
other groups keep polling until then).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog
import trio

from storage.remote.rlmm_api import MetadataLog, PollLimits, TopicRecord

log = structlog.get_logger(__name__)


class Folder(Protocol):
    """What the consumer task needs of the manager."""

    @property
    def closed(self) -> bool: ...

    def positions(self) -> dict[int, int]:
        """Assigned metadata partition -> the next offset to fold."""
        ...

    async def catch_up_pending(self) -> bool:
        """Catch up the assigned partitions not yet ready; False if one failed."""
        ...

    async def fold_polled(self, partition: int, position: int,
                          found: Sequence[TopicRecord]) -> None:
        """Fold ``found``, read from ``position`` of ``partition``."""
        ...


class MetadataConsumer:
    """Long-polls the assigned metadata partitions for ``folder`` (see the module doc).

    Args:
        retry_s: how long a failed catch-up or poll waits before the next round.
    """

    def __init__(self, metadata_log: MetadataLog, folder: Folder, limits: PollLimits,
                 retry_s: float, snapshot_interval_s: float,
                 on_interval: Callable[[], Awaitable[None]]) -> None:
        self._log = metadata_log
        self._folder = folder
        self._limits = limits
        self._retry_s = retry_s
        self._snapshot_interval_s = snapshot_interval_s
        self._on_interval = on_interval
        self._wakeup = trio.Event()
        # Long-polls sent (a test and the idle-cost measurement read it).
        self.polls = 0

    def wake(self) -> None:
        """Start a new round soon (the assignment changed, or closing)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Rounds until the manager closes."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._every_interval)
            while not self._folder.closed:
                self._wakeup = trio.Event()
                caught_up = await self._folder.catch_up_pending()
                groups = self._log.poll_groups(self._folder.positions())
                async with trio.open_nursery() as pollers:
                    for group in groups:
                        pollers.start_soon(self._poll, group)
                    with trio.move_on_after(math.inf if caught_up else self._retry_s):
                        await self._wakeup.wait()
                    pollers.cancel_scope.cancel()
            nursery.cancel_scope.cancel()

    async def _every_interval(self) -> None:
        while True:
            await trio.sleep(self._snapshot_interval_s)
            await self._on_interval()

    async def _poll(self, group: list[int]) -> None:
        while True:
            positions = {p: offset for p, offset in self._folder.positions().items()
                         if p in group}
            if not positions:
                return
            if self._log.poll_groups(positions) != [sorted(positions)]:
                self.wake()  # a leader moved: group again
                return
            try:
                self.polls += 1
                answer = await self._log.poll(positions, self._limits)
            except Exception as exc:  # retriable: the leader moved, restarts, is down
                log.warning("polling remote log metadata failed; retrying",
                            metadata_partitions=sorted(positions), error=repr(exc))
                await trio.sleep(self._retry_s)
                self.wake()
                return
            for p, found in sorted(answer.items()):
                if p in positions and found:
                    await self._folder.fold_polled(p, positions[p], found)
