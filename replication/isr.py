"""ISR maintenance by partition leaders (Kafka's Partition.maybeShrinkIsr / maybeExpandIsr).

Theory of operation: a leader watches its followers. One that has not been
at the log end for replica.lag.time.max.ms leaves the ISR; one outside the
ISR whose fetch reached the high watermark joins it. The leader does not
write the change itself: it asks the controller with AlterPartition (the
controller is the only writer of partition state, so a leader and the
controller never race on the znode), and applies the ISR the controller
answers. At most one change per partition is in flight; a refused or
failed one is retried by the next check.

Batching (Kafka's AlterPartitionManager): changes wait in a queue and go to
the controller together, one AlterPartition request in flight at a time, so
a broker rejoining a few thousand ISRs costs a few requests, not a
connection and a ZooKeeper round trip per partition.

Why AlterPartition rather than the leader's own compare-and-set (Kafka's
older ZooKeeper path): with one writer the controller's copy of the ISR is
always current, so its elections never act on a stale ISR and no
isr-change notifications are needed to refresh it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import structlog
import trio

from config import BrokerConfig
from protocol.partition import TopicPartition
from replication.controller_requests import IsrChange
from replication.elections import LeaderAndIsr
from replication.partition import Partition
from replication.replica_manager import ReplicaManager
from storage.pace import Pacer

log = structlog.get_logger(__name__)

# Most changes one AlterPartition request carries.
MAX_BATCH = 2000
# Pause after a request that failed outright (no controller, connection lost).
FAILURE_BACKOFF_S = 0.1


# The changes -> per change, in order: (error name or "", the state now)
AlterIsr = Callable[[list[IsrChange]], Awaitable[list[tuple[str, LeaderAndIsr | None]]]]


class IsrManager:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, alter: AlterIsr) -> None:
        self.replicas = replicas
        self.alter = alter
        self.node_id: int = config["node.id"]
        self.lag_max_s = config["replica.lag.time.max.ms"] / 1000
        # Partitions with a change queued or being sent.
        self._inflight: set[TopicPartition] = set()
        self._queue: dict[TopicPartition, IsrChange] = {}
        self._queued = trio.Event()
        replicas.followers.isr_listener = self.maybe_expand
        self.stats = replicas.stats

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sender)
            task_status.started()
            while True:
                await trio.sleep(self.lag_max_s / 2)
                await self.check_all()

    async def check_all(self) -> None:
        pacer = Pacer()
        for part in self.replicas.hosted():
            self._check(part.tp)
            await pacer.tick()

    def maybe_expand(self, tp: TopicPartition) -> None:
        self._check(tp)

    def _check(self, tp: TopicPartition) -> None:
        part = self.replicas.get(tp)
        if part is None or not part.is_leader(self.node_id) or tp in self._inflight:
            return
        if part.proposed_isr is not None:
            # A request that failed outright: the controller may have committed
            # it, so the same change goes again until it is answered.
            self._propose(part, part.proposed_isr)
            return
        now = trio.current_time()
        for r in part.isr:
            part.follower_caught_up_at.setdefault(r, now)
        # Seconds since each replica was last caught up (an ISR member always
        # has a time, set just above; inf: never).
        behind = {r: now - at if (at := self.replicas.followers.caught_up_at(part, r, now)) is not None
                  else math.inf for r in {*part.replicas, *part.isr}}
        lagging = {r for r in part.isr if r != self.node_id and behind[r] > self.lag_max_s}
        # Joining takes a follower that is fetching now (caught up within the lag
        # limit) and has reached the high watermark in the current epoch.
        joining = [r for r in part.replicas if r not in part.isr
                   and behind[r] <= self.lag_max_s
                   and part.follower_end_offsets.get(r, -1) >= part.high_watermark
                   and part.follower_end_offsets.get(r, -1) >= self._epoch_start(part)]
        if not lagging and not joining:
            return
        new_isr = [r for r in part.replicas if (r in part.isr and r not in lagging)
                   or r in joining]
        if lagging:
            log.info("shrinking isr", topic=tp[0], partition=tp[1], lagging=sorted(lagging),
                     lag_max_ms=int(self.lag_max_s * 1000))
        if joining:
            log.info("expanding isr", topic=tp[0], partition=tp[1], joining=joining)
        self._propose(part, new_isr)

    def _propose(self, part: Partition, new_isr: list[int]) -> None:
        """Queue ``new_isr`` for the controller. From now until it is answered
        the high watermark waits for it too (``Partition.maximal_isr``): a
        joining follower may be elected as soon as the controller commits it."""
        self._inflight.add(part.tp)
        part.proposed_isr = new_isr
        self._queue[part.tp] = IsrChange(part.tp, part.leader_epoch, part.partition_epoch,
                                         new_isr)
        self._queued.set()

    @staticmethod
    def _epoch_start(part: object) -> int:
        """A follower may join only once it has the leader's current epoch (KIP-101)."""
        entries = part.log.epochs.entries  # type: ignore[attr-defined]
        return entries[-1][1] if entries else 0

    async def _sender(self) -> None:
        while True:
            await self._queued.wait()
            batch = list(self._queue.values())[:MAX_BATCH]
            for change in batch:
                del self._queue[change.tp]
            if not self._queue:
                self._queued = trio.Event()
            if not await self._send(batch):
                await trio.sleep(FAILURE_BACKOFF_S)

    async def _send(self, batch: list[IsrChange]) -> bool:
        """One request; False if it failed as a whole (each change is retried by
        a later check)."""
        try:
            answers = await self.alter(batch)
        except Exception as exc:  # unreachable controller: the next check retries
            log.info("AlterPartition failed; will retry", partitions=len(batch),
                     error=str(exc))
            return False
        finally:
            self._inflight.difference_update(c.tp for c in batch)
        refused: dict[str, int] = {}
        first = ""
        for change, (error, state) in zip(batch, answers, strict=True):
            self._apply(change, error, state)
            self._settled(change)
            if error:
                refused[error] = refused.get(error, 0) + 1
                first = first or f"{change.tp[0]}-{change.tp[1]}"
        if refused:
            log.info("AlterPartition refused", partitions=len(batch), refused=refused,
                     first=first)
        return True

    def _settled(self, change: IsrChange) -> None:
        """The change is answered (``_apply`` has installed the ISR the
        controller returned, if any): the high watermark waits for the ISR
        alone again, and may move if a proposed member held it back."""
        part = self.replicas.get(change.tp)
        if part is None or part.leader_epoch != change.leader_epoch:
            return
        part.proposed_isr = None
        self.replicas.followers.advance_high_watermark(part)

    def _apply(self, change: IsrChange, error: str, state: LeaderAndIsr | None) -> None:
        part = self.replicas.get(change.tp)
        if part is None or part.leader_epoch != change.leader_epoch:
            return
        if state is not None and state.leader_epoch == change.leader_epoch:
            before = set(part.isr)
            part.partition_epoch = state.version
            self.replicas.followers.update_isr(change.tp, list(state.isr))
            if not error:
                self._count(before, set(state.isr))

    def _count(self, before: set[int], after: set[int]) -> None:
        """Kafka's IsrShrinksPerSec / IsrExpandsPerSec: one per committed change
        (a change that both drops and adds replicas counts as both)."""
        if before - after:
            self.stats.isr_shrinks.inc()
        if after - before:
            self.stats.isr_expands.inc()
