"""ElectLeaders (v0-v2): preferred and unclean leader elections on demand, as
``kafka-leader-election`` and the admin clients' electLeaders send them.

In cluster mode the active controller decides and answers each partition
(``replication.admin_elections``); another broker answers NOT_CONTROLLER for
each partition, as a ZooKeeper-mode Kafka broker does, and admin clients
then look the controller up again and retry. A single node has one replica
per partition, always its leader: every known partition is answered
ELECTION_NOT_NEEDED (and, when none are named, left out of the answer).
The answer is sent once the new leaders are written and announced; the
request's timeout is not waited on.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from replication.admin_elections import ElectionResult, ElectionType, TopicResults

UNKNOWN_MESSAGE = "no such topic or partition"


async def handle_elect_leaders(ctx: BrokerContext, header: RequestHeader, req: Any,
                               session: Session) -> Any:
    wanted = None if req.topic_partitions is None else [
        (t.topic, list(t.partitions)) for t in req.topic_partitions]
    try:
        kind = ElectionType(getattr(req, "election_type", ElectionType.PREFERRED))
    except ValueError:
        return respond(ctx, header, ErrorCode.INVALID_REQUEST, _each(
            wanted or [], ErrorCode.INVALID_REQUEST, f"unknown election type {req.election_type}"))
    results = None
    if ctx.cluster is not None:
        results = await ctx.cluster.controller.elect_leaders(kind, wanted)
        if results is None:
            results = _each(wanted if wanted is not None else _all_partitions(ctx),
                            ErrorCode.NOT_CONTROLLER, None)
    else:
        results = _single_node(ctx, wanted)
    return respond(ctx, header, ErrorCode.NONE, results)


def _all_partitions(ctx: BrokerContext) -> list[tuple[str, list[int]]]:
    out = []
    for name in sorted(ctx.metadata.topic_names()):
        info = ctx.metadata.topic(name)
        if info is not None:
            out.append((name, list(range(info.partitions))))
    return out


def _single_node(ctx: BrokerContext, wanted: list[tuple[str, list[int]]] | None
                 ) -> TopicResults:
    """The one replica leads: nothing to elect, unknown partitions aside."""
    if wanted is None:
        return [(topic, []) for topic, _ in _all_partitions(ctx)]
    out: TopicResults = []
    for topic, partitions in wanted:
        info = ctx.metadata.topic(topic)
        out.append((topic, [
            ElectionResult(p, ErrorCode.ELECTION_NOT_NEEDED) if info and 0 <= p < info.partitions
            else ElectionResult(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_MESSAGE)
            for p in partitions]))
    return out


def _each(wanted: list[tuple[str, list[int]]], code: ErrorCode, message: str | None
          ) -> TopicResults:
    return [(topic, [ElectionResult(p, code, message) for p in partitions])
            for topic, partitions in wanted]


def respond(ctx: BrokerContext, header: RequestHeader, code: ErrorCode,
            results: TopicResults) -> Any:
    """The response at the request's version (v0 has no top-level error code)."""
    resp = ElectLeadersResponse[header.api_version]
    topic_cls = resp.ReplicaElectionResult
    part_cls = topic_cls.PartitionResult
    for _, rows in results:
        for row in rows:
            if row.code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                ctx.metrics.error("ElectLeaders", row.code)
    topics = [topic_cls(topic=topic, partition_result=[
        part_cls(partition_id=r.partition, error_code=r.code, error_message=r.message)
        for r in rows]) for topic, rows in results]
    if header.api_version == 0:
        return resp(throttle_time_ms=0, replica_election_results=topics)
    return resp(throttle_time_ms=0, error_code=code, replica_election_results=topics)


HANDLERS = {ElectLeadersRequest.API_KEY: handle_elect_leaders}
