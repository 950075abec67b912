"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455):
requests in, the controller's ``reassignment`` calls, responses out.

As in Kafka's ZooKeeper mode, only the active controller takes them; any
other broker (and a single node, which has no controller) answers
NOT_CONTROLLER, and admin clients send them to the controller named in
Metadata. AllowReplicationFactorChange (v1) is not offered: changing the
replication factor is what reassignment is for here.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

NOT_CONTROLLER_MESSAGE = "this broker is not the controller"


async def handle_alter_reassignments(ctx: BrokerContext, header: RequestHeader,
                                     req: Any, session: Session) -> Any:
    resp = AlterPartitionReassignmentsResponse[header.api_version]
    topic_cls = resp.ReassignableTopicResponse
    part_cls = topic_cls.ReassignablePartitionResponse
    wanted = [((t.name, p.partition_index), None if p.replicas is None else list(p.replicas))
              for t in req.topics for p in t.partitions]
    results = None
    if ctx.cluster is not None:
        results = await ctx.cluster.controller.alter_reassignments(wanted)
    if results is None:
        ctx.metrics.error("AlterPartitionReassignments", ErrorCode.NOT_CONTROLLER)
        return resp(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                    error_message=NOT_CONTROLLER_MESSAGE, responses=[])
    by_topic: dict[str, list[Any]] = {}
    for (tp, _), (code, message) in zip(wanted, results, strict=True):
        if code:
            ctx.metrics.error("AlterPartitionReassignments", code)
        by_topic.setdefault(tp[0], []).append(part_cls(partition_index=tp[1], error_code=code,
                                                       error_message=message))
    return resp(throttle_time_ms=0, error_code=0, error_message=None,
                responses=[topic_cls(name=n, partitions=ps) for n, ps in by_topic.items()])


async def handle_list_reassignments(ctx: BrokerContext, header: RequestHeader,
                                    req: Any, session: Session) -> Any:
    resp = ListPartitionReassignmentsResponse[header.api_version]
    topic_cls = resp.OngoingTopicReassignment
    part_cls = topic_cls.OngoingPartitionReassignment
    wanted = None if req.topics is None else {
        (t.name, p) for t in req.topics for p in t.partition_indexes}
    ongoing = None
    if ctx.cluster is not None:
        ongoing = await ctx.cluster.controller.list_reassignments(wanted)
    if ongoing is None:
        ctx.metrics.error("ListPartitionReassignments", ErrorCode.NOT_CONTROLLER)
        return resp(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                    error_message=NOT_CONTROLLER_MESSAGE, topics=[])
    by_topic: dict[str, list[Any]] = {}
    for tp, move, replicas in ongoing:
        by_topic.setdefault(tp[0], []).append(part_cls(
            partition_index=tp[1], replicas=replicas, adding_replicas=move.adding,
            removing_replicas=move.removing))
    return resp(throttle_time_ms=0, error_code=0, error_message=None,
                topics=[topic_cls(name=n, partitions=ps) for n, ps in by_topic.items()])


HANDLERS = {
    AlterPartitionReassignmentsRequest.API_KEY: handle_alter_reassignments,
    ListPartitionReassignmentsRequest.API_KEY: handle_list_reassignments,
}
