"""Partition reassignment (KIP-455, AlterPartitionReassignments), run by the
controller.

Theory of operation, as Kafka's ZooKeeper-mode controller does it: to move
a partition from its original replicas (ORS) to a target set (TRS), the
controller first widens the replica set to RS = TRS + (ORS - TRS), writes it
to the topic's assignment and tells every replica (LeaderAndIsr): the adding
replicas (TRS - ORS) start as followers, and, on a tiered topic, build from
the remote tier rather than from offset 0 (BuildingRemoteLogAuxState). When
the leader's ISR contains all of TRS (its AlterPartition says so), the
reassignment completes: if the leader is not in TRS a new one is elected from
TRS within the ISR, the ISR is narrowed to TRS, the assignment becomes TRS, and
the removing replicas (ORS - TRS) get StopReplica with delete (their local
copy only: the topic stays, so its remote data stays).

A cancellation (null replicas) puts the original replica set back.

The state of a reassignment in progress lives in the acting controller's
memory (``reassigning``); a controller failover in the middle leaves the
partition on the widened replica set RS, which is safe (more replicas than
asked), and the operator can submit the reassignment again.

Error handling: requests are answered with Kafka's codes per partition
(UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
NO_REASSIGNMENT_IN_PROGRESS); a failed compare-and-set is retried at the
next ISR change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import structlog

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.elections import LeaderAndIsr

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Reassignment:
    original: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def adding(self) -> list[int]:
        return [r for r in self.target if r not in self.original]

    @property
    def removing(self) -> list[int]:
        return [r for r in self.original if r not in self.target]

    @property
    def replicas(self) -> list[int]:
        """The widened set while moving: the target first (its head is preferred)."""
        return [*self.target, *self.removing]


class ReassigningController(Protocol):
    """What a reassignment asks of the controller (``replication.controller``)."""

    @property
    def epoch(self) -> int: ...

    def assignment(self, tp: TopicPartition) -> list[int] | None: ...

    def partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None: ...

    def is_registered(self, broker: int) -> bool: ...

    def is_live(self, broker: int) -> bool: ...

    async def write_state(self, tp: TopicPartition, new: LeaderAndIsr) -> bool: ...

    async def write_assignment(self, tp: TopicPartition, replicas: list[int]) -> None: ...

    def announce_partitions(self, changed: list[TopicPartition]) -> None: ...

    def delete_replicas(self, tp: TopicPartition, brokers: list[int]) -> None: ...


class Reassigner:
    """The controller's reassignments. Call with the controller's lock held."""

    def __init__(self, controller: ReassigningController) -> None:
        self.controller = controller
        self.reassigning: dict[TopicPartition, Reassignment] = {}

    async def alter(self, tp: TopicPartition, target: list[int] | None
                    ) -> tuple[ErrorCode, str | None]:
        """Start (``target``) or cancel (None) the reassignment of ``tp``."""
        ctrl = self.controller
        current = ctrl.assignment(tp)
        if current is None or ctrl.partition_state(tp) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]} does not exist"
        if target is None:
            return await self._cancel(tp, current)
        if not target or len(set(target)) != len(target):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "replicas must be distinct, not empty"
        unknown = [r for r in target if not ctrl.is_registered(r)]
        if unknown:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown or offline brokers {unknown}"
        ongoing = self.reassigning.get(tp)
        original = ongoing.original if ongoing else tuple(current)
        move = Reassignment(original, tuple(target))
        if list(move.target) == list(original) and ongoing is None:
            return ErrorCode.NONE, None
        self.reassigning[tp] = move
        await ctrl.write_assignment(tp, move.replicas)
        log.info("reassignment started", topic=tp[0], partition=tp[1],
                 original=list(original), target=target, adding=move.adding,
                 removing=move.removing)
        ctrl.announce_partitions([tp])
        await self.maybe_complete(tp)
        return ErrorCode.NONE, None

    async def _cancel(self, tp: TopicPartition, current: list[int]
                      ) -> tuple[ErrorCode, str | None]:
        move = self.reassigning.pop(tp, None)
        if move is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
        back = Reassignment(tuple(current), move.original)
        log.info("reassignment cancelled", topic=tp[0], partition=tp[1],
                 replicas=list(move.original))
        await self._finish(tp, back)
        return ErrorCode.NONE, None

    async def maybe_complete(self, tp: TopicPartition) -> None:
        """Complete ``tp``'s reassignment once its ISR holds the whole target."""
        move = self.reassigning.get(tp)
        state = self.controller.partition_state(tp)
        if move is None or state is None or not set(move.target) <= set(state.isr):
            return
        if await self._finish(tp, move):
            del self.reassigning[tp]
            log.info("reassignment completed", topic=tp[0], partition=tp[1],
                     replicas=list(move.target))

    async def _finish(self, tp: TopicPartition, move: Reassignment) -> bool:
        """Narrow ``tp`` to ``move.target``: leader from it, ISR within it,
        StopReplica (delete) to the replicas it drops."""
        ctrl = self.controller
        state = ctrl.partition_state(tp)
        assert state is not None  # the callers saw it, under the controller's lock
        isr = [r for r in state.isr if r in move.target]
        leader = state.leader
        if leader not in move.target or not ctrl.is_live(leader):
            live = [r for r in move.target if r in isr and ctrl.is_live(r)]
            if not live:
                return False  # wait: no replica of the target can lead yet
            leader = live[0]
        new = LeaderAndIsr(leader, state.leader_epoch + 1, tuple(isr) or (leader,),
                           ctrl.epoch, state.version)
        if not await ctrl.write_state(tp, new):
            return False
        dropped = [r for r in ctrl.assignment(tp) or [] if r not in move.target]
        await ctrl.write_assignment(tp, list(move.target))
        ctrl.announce_partitions([tp])
        ctrl.delete_replicas(tp, dropped)
        return True

    def ongoing(self, wanted: set[TopicPartition] | None
                ) -> list[tuple[TopicPartition, Reassignment, list[int]]]:
        """Reassignments in progress (of ``wanted``, or all): (tp, move, replicas now)."""
        ctrl = self.controller
        return [(tp, move, ctrl.assignment(tp) or [])
                for tp, move in sorted(self.reassigning.items())
                if wanted is None or tp in wanted]
