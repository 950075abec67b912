"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): requests in,
``broker.coordinator`` calls, responses out.

Partitions travel by topic id; the coordinator reads topic metadata from the
broker's metadata cache through ``topic_lookup``. Requests for a group this
broker does not coordinate get NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
before anything else is checked, as Kafka's coordinator runtime answers.
With ``group.version`` finalized at 0 both APIs answer UNSUPPORTED_VERSION
(the consumer protocol is off), as Kafka's brokers do.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, Session
from broker.coordinator.assignors import Partitions
from broker.coordinator.consumer import HeartbeatRequest
from broker.coordinator.consumer_group import ConsumerGroup
from broker.features import finalized_now
from broker.handlers.groups import GROUP_OPERATIONS, coordinator, not_here, topic_view
from protocol.api import RequestHeader
from protocol.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.errors import ErrorCode
from protocol.features import GROUP_VERSION


def _protocol_off(ctx: BrokerContext) -> bool:
    """The consumer rebalance protocol is disabled (group.version 0)."""
    return finalized_now(ctx.features, ctx.config).level(GROUP_VERSION) < 1


def _owned(topics: Any | None) -> Partitions | None:
    if topics is None:
        return None
    owned: Partitions = {}
    for t in topics:
        owned.setdefault(t.topic_id, set()).update(t.partitions)
    return owned


async def handle_consumer_group_heartbeat(ctx: BrokerContext, header: RequestHeader, req: Any,
                                          session: Session) -> Any:
    resp = ConsumerGroupHeartbeatResponse[header.api_version]
    if code := ErrorCode.UNSUPPORTED_VERSION if _protocol_off(ctx) else not_here(ctx, req.group_id):
        ctx.metrics.error("ConsumerGroupHeartbeat", code)
        return resp(throttle_time_ms=0, error_code=code, error_message=None, member_id=None,
                    member_epoch=0, heartbeat_interval_ms=0, assignment=None)
    result = await coordinator(ctx).consumer_heartbeat(HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed=None if req.subscribed_topic_names is None
        else list(req.subscribed_topic_names),
        server_assignor=req.server_assignor, owned=_owned(req.topic_partitions),
        client_id=header.client_id or "", client_host=session.client_host,
        regex=req.subscribed_topic_regex if header.api_version >= 1 else None,
        version=header.api_version), topic_view(ctx))
    if result.error:
        ctx.metrics.error("ConsumerGroupHeartbeat", result.error)
    assignment = None
    if result.assignment is not None:
        tp_cls = resp.Assignment.TopicPartitions
        assignment = resp.Assignment(topic_partitions=[
            tp_cls(topic_id=topic_id, partitions=sorted(parts))
            for topic_id, parts in sorted(result.assignment.items(), key=lambda i: str(i[0]))])
    return resp(throttle_time_ms=0, error_code=result.error, error_message=result.message,
                member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


async def handle_consumer_group_describe(ctx: BrokerContext, header: RequestHeader, req: Any,
                                         session: Session) -> Any:
    resp = ConsumerGroupDescribeResponse[header.api_version]
    group_cls = resp.DescribedGroup
    out = []
    for group_id in req.group_ids:
        code = (ErrorCode.UNSUPPORTED_VERSION if _protocol_off(ctx)
                else ErrorCode.INVALID_GROUP_ID if not group_id else not_here(ctx, group_id))
        group = coordinator(ctx).consumer_groups.get(group_id) if not code else None
        if group is None:
            code = code or ErrorCode.GROUP_ID_NOT_FOUND
            ctx.metrics.error("ConsumerGroupDescribe", code)
            out.append(group_cls(error_code=code, error_message=None, group_id=group_id,
                                 group_state="", group_epoch=0, assignment_epoch=0,
                                 assignor_name="", members=[], authorized_operations=None))
            continue
        described = _describe(ctx, group_cls, group)
        if req.include_authorized_operations:
            described.authorized_operations = GROUP_OPERATIONS
        out.append(described)
    return resp(throttle_time_ms=0, groups=out)


# ConsumerGroupDescribe v1's MemberType: which protocol a member speaks.
CLASSIC_MEMBER = 0
CONSUMER_MEMBER = 1


def _describe(ctx: BrokerContext, group_cls: Any, group: ConsumerGroup) -> Any:
    member_cls = group_cls.Member
    assignment_cls = member_cls.Assignment

    def assignment(parts: Partitions) -> Any:
        named = [(info.name, topic_id, sorted(ps)) for topic_id, ps in parts.items()
                 if (info := ctx.metadata.topic_by_id(topic_id)) is not None]
        return assignment_cls(topic_partitions=[
            assignment_cls.TopicPartitions(topic_id=topic_id, topic_name=name, partitions=ps)
            for name, topic_id, ps in sorted(named)])

    members = [member_cls(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
        member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=sorted(m.subscribed), subscribed_topic_regex=m.regex,
        assignment=assignment(m.assigned),
        target_assignment=assignment(group.target.get(m.member_id, {})),
        member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER)
        for m in group.members.values()]
    return group_cls(error_code=0, error_message=None, group_id=group.group_id,
                     group_state=group.state.value, group_epoch=group.group_epoch,
                     assignment_epoch=group.assignment_epoch,
                     assignor_name=coordinator(ctx).consumer.preferred_assignor(group),
                     members=members, authorized_operations=None)


HANDLERS = {
    ConsumerGroupHeartbeatRequest.API_KEY: handle_consumer_group_heartbeat,
    ConsumerGroupDescribeRequest.API_KEY: handle_consumer_group_describe,
}
