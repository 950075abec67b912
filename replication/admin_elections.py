"""Leader elections an operator asks for (ElectLeaders, KIP-183/KIP-460):
which partitions, which rule, and the answer for each.

Theory of operation: the acting controller takes the request under its
lock. For each partition named (or every partition of every topic when none
are named) it decides one of:

- UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition;
- ELECTION_NOT_NEEDED: a preferred election for a partition its first
  replica already leads, or an unclean one for a partition whose leader is
  alive;
- PREFERRED_LEADER_NOT_AVAILABLE: the first replica is down or out of sync;
- ELIGIBLE_LEADERS_NOT_AVAILABLE: an unclean election found no live replica;
- NONE: elected. The new states are written together (compare-and-set) and
  announced as every other election is (LeaderAndIsr, UpdateMetadata).

An unclean election prefers a live in-sync replica; failing that, it takes
the first live replica whatever the topic's unclean.leader.election.enable
says (asking is the operator's consent), which may lose records the ISR had.

When no partitions are named, partitions needing no election are left out
of the answer (each topic is still listed), as Kafka does.

Concurrency: called with the controller's lock held.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import structlog

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication import elections
from replication.controller_context import ControllerContext
from replication.controller_elections import Elector
from replication.elections import LeaderAndIsr
from replication.metrics import ControllerStats

log = structlog.get_logger(__name__)


class ElectionType(enum.IntEnum):
    """The request's ElectionType (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectionResult:
    partition: int
    code: ErrorCode
    message: str | None = None


TopicResults = list[tuple[str, list[ElectionResult]]]


def decide(ctx: ControllerContext, tp: TopicPartition, kind: ElectionType
           ) -> tuple[ErrorCode, LeaderAndIsr | None]:
    """What to answer for ``tp``, and its new state when one is elected."""
    replicas = ctx.assignments.get(tp)
    if replicas is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    state = ctx.states.get(tp)
    if kind is ElectionType.PREFERRED:
        if state is not None and replicas and state.leader == replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        new = None if state is None else elections.preferred_election(
            replicas, state, ctx.live, ctx.epoch)
        return (ErrorCode.NONE, new) if new else (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    if state is not None and state.leader in ctx.brokers:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    new = None if state is None else elections.offline_election(
        replicas, state, ctx.live, True, ctx.epoch)
    return (ErrorCode.NONE, new) if new else (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)


async def elect(ctx: ControllerContext, elector: Elector, stats: ControllerStats,
                kind: ElectionType, wanted: list[tuple[str, list[int]]] | None) -> TopicResults:
    """Carry out the elections ``wanted`` asks for (None: every partition).

    Returns:
        Per topic, in the request's order (name order for all topics), the
        result of each partition.
    """
    omit_not_needed = wanted is None
    if wanted is None:
        topics = sorted({tp[0] for tp in ctx.assignments})
        wanted = [(t, [tp[1] for tp in ctx.partitions_of(t)]) for t in topics]
    decided: list[tuple[str, list[tuple[int, ErrorCode, LeaderAndIsr | None]]]] = []
    changes: list[tuple[TopicPartition, LeaderAndIsr]] = []
    unclean: set[TopicPartition] = set()
    for topic, partitions in wanted:
        rows = []
        for p in partitions:
            code, new = decide(ctx, (topic, p), kind)
            if new is not None:
                changes.append(((topic, p), new))
                if new.leader not in ctx.states[(topic, p)].isr:
                    unclean.add((topic, p))
            rows.append((p, code, new))
        decided.append((topic, rows))
    written = set(await elector.write_many(changes))
    elector.announce(sorted(written))
    out: TopicResults = []
    for topic, rows in decided:
        results = []
        for p, code, new in rows:
            if new is not None and (topic, p) not in written:
                # The state changed under us (re-read by the elector): say so, the caller retries.
                code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if kind is ElectionType.PREFERRED
                        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            elif new is not None:
                _log_elected(topic, p, kind, new, (topic, p) in unclean, stats)
            if omit_not_needed and code is ErrorCode.ELECTION_NOT_NEEDED:
                continue
            message = (f"no partition {topic}-{p}"
                       if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
            results.append(ElectionResult(p, code, message))
        out.append((topic, results))
    return out


def _log_elected(topic: str, partition: int, kind: ElectionType, new: LeaderAndIsr,
                 unclean: bool, stats: ControllerStats) -> None:
    if unclean:
        stats.unclean_elections.inc()
        log.warning("unclean leader election", topic=topic, partition=partition,
                    leader=new.leader)
    log.info("leader election requested", topic=topic, partition=partition,
             election=kind.name, leader=new.leader, leader_epoch=new.leader_epoch)
