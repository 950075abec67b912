"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups and DeleteGroups: requests in, ``broker.coordinator`` calls,
responses out.

FindCoordinator answers, for a group key or a transactional id (key type
1), the leader of the key's partition of ``__consumer_offsets`` or
``__transaction_state`` (COORDINATOR_NOT_AVAILABLE while it has none); other
key types (share groups) get INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker.context import BrokerContext, Session
from broker.coordinator import GroupCoordinator, admin
from broker.coordinator.assignors import TopicMetadata
from broker.coordinator.consumer import TopicView
from broker.coordinator.group import JoinRequest
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.internal_topics import OFFSETS_TOPIC, TRANSACTION_TOPIC, partition_for
from replication.metadata_cache import BrokerEndpoint

log = structlog.get_logger(__name__)

E_NONE = ErrorCode.NONE
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# ACL operations a group supports (READ, DELETE, DESCRIBE); with no
# authorizer Kafka reports all of them as allowed.
GROUP_OPERATIONS = frozenset({3, 6, 8})


def coordinator(ctx: BrokerContext) -> GroupCoordinator:
    """The broker's group coordinator (a wiring bug if missing)."""
    if ctx.groups is None:
        raise RuntimeError("broker context has no group coordinator")
    return ctx.groups


def topic_view(ctx: BrokerContext) -> TopicView:
    """The broker's topics (ids, partition counts, names) from its metadata cache."""
    def lookup(name: str) -> TopicMetadata | None:
        info = ctx.metadata.topic(name)
        return None if info is None else TopicMetadata(info.topic_id, name, info.partitions)

    def is_internal(name: str) -> bool:
        info = ctx.metadata.topic(name)
        return info is not None and info.internal
    return TopicView(lookup, ctx.metadata.topic_names, is_internal)


def _error(ctx: BrokerContext, api: str, code: int) -> int:
    if code:
        ctx.metrics.error(api, code)
    return code


def not_here(ctx: BrokerContext, group_id: str | None) -> ErrorCode:
    """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS if this broker does not
    coordinate ``group_id`` now (an empty or null id is the coordinator's to refuse)."""
    if not group_id:
        return ErrorCode.NONE
    return coordinator(ctx).check(group_id)


# -- FindCoordinator --------------------------------------------------------------


async def handle_find_coordinator(ctx: BrokerContext, header: RequestHeader,
                                  req: Any, session: Session) -> Any:
    v = header.api_version
    resp = FindCoordinatorResponse[v]
    keys = list(req.coordinator_keys) if v >= 4 else [req.key]
    found = [await _find(ctx, req.key_type, key, session.listener) for key in keys]
    if v < 4:
        code, message, node = found[0]
        return resp(throttle_time_ms=0, error_code=code, error_message=message,
                    node_id=node.node_id if node else -1, host=node.host if node else "",
                    port=node.port if node else -1)
    return resp(throttle_time_ms=0, coordinators=[
        resp.Coordinator(key=key, node_id=node.node_id if node else -1,
                         host=node.host if node else "", port=node.port if node else -1,
                         error_code=code, error_message=message)
        for key, (code, message, node) in zip(keys, found, strict=True)])


async def _find(ctx: BrokerContext, key_type: int, key: str, listener: str | None
                ) -> tuple[int, str | None, BrokerEndpoint | None]:
    """The coordinator of ``key``: the leader of its internal-topic partition.

    As Kafka, the internal topic is created on the first lookup when the
    cluster has none yet (this one answers COORDINATOR_NOT_AVAILABLE; the
    client asks again once leaders are elected).
    """
    if key_type == GROUP_KEY_TYPE:
        topic = OFFSETS_TOPIC
        internal = ctx.groups.store.topic if ctx.groups is not None else None
    elif key_type == TRANSACTION_KEY_TYPE:
        topic = TRANSACTION_TOPIC
        internal = ctx.transactions.store.topic if ctx.transactions is not None else None
    else:
        return (_error(ctx, "FindCoordinator", ErrorCode.INVALID_REQUEST),
                f"key type {key_type}", None)
    info = ctx.metadata.topic(topic)
    if info is None and internal is not None:
        try:
            await internal.ensure()
        except KafkaApiError as exc:
            log.info("internal topic not created", topic=topic, error=exc.code.name,
                     detail=exc.message)
        info = ctx.metadata.topic(topic)
    state = (ctx.metadata.partition((topic, partition_for(key, info.partitions)))
             if info is not None else None)
    node = (ctx.metadata.broker(state.leader, listener) if state is not None
            else None)
    if node is None:
        return (_error(ctx, "FindCoordinator", ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "coordinator not available", None)
    return ErrorCode.NONE, None, node


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------


async def handle_join_group(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = JoinGroupResponse[v]
    if code := not_here(ctx, req.group_id):
        return resp(throttle_time_ms=0, error_code=_error(ctx, "JoinGroup", code),
                    generation_id=-1, protocol_type=None,
                    protocol_name=None if v >= 7 else "", leader="", skip_assignment=False,
                    member_id=req.member_id, members=[])
    result = await coordinator(ctx).join_group(JoinRequest(
        group_id=req.group_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        client_id=header.client_id or "", client_host=session.client_host,
        session_timeout_ms=req.session_timeout_ms, rebalance_timeout_ms=req.rebalance_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member_id=v >= 4, supports_skip_assignment=v >= 9), topic_view(ctx))
    _error(ctx, "JoinGroup", result.error)
    return resp(
        throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Non-nullable before v7.
        protocol_name=result.protocol_name if v >= 7 else result.protocol_name or "",
        leader=result.leader_id, skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[resp.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in result.members])


async def handle_sync_group(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    if code := not_here(ctx, req.group_id):
        return SyncGroupResponse[v](throttle_time_ms=0, error_code=_error(ctx, "SyncGroup", code),
                                    protocol_type=None, protocol_name=None, assignment=b"")
    result = await coordinator(ctx).sync_group(
        req.group_id, req.generation_id, req.member_id,
        req.group_instance_id if v >= 3 else None,
        req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in req.assignments})
    _error(ctx, "SyncGroup", result.error)
    return SyncGroupResponse[v](throttle_time_ms=0, error_code=result.error,
                                protocol_type=result.protocol_type,
                                protocol_name=result.protocol_name,
                                assignment=result.assignment)


async def handle_heartbeat(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    code = not_here(ctx, req.group_id) or coordinator(ctx).heartbeat(
        req.group_id, req.generation_id, req.member_id, req.group_instance_id if v >= 3 else None)
    return HeartbeatResponse[v](throttle_time_ms=0, error_code=_error(ctx, "Heartbeat", code))


async def handle_leave_group(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = LeaveGroupResponse[v]
    if v >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        leaving = [(req.member_id, None)]
    if code := not_here(ctx, req.group_id):
        errors: list[ErrorCode] = []
    else:
        code, errors = coordinator(ctx).leave_group(req.group_id, leaving)
        if E_NONE in errors:
            code = await coordinator(ctx).durable(req.group_id, code)
    for err in (code, *errors):
        _error(ctx, "LeaveGroup", err)
    if v < 3:
        # One member: its error is the response's error.
        return resp(throttle_time_ms=0, error_code=code or (errors[0] if errors else code))
    return resp(throttle_time_ms=0, error_code=code, members=[
        resp.MemberResponse(member_id=m, group_instance_id=i, error_code=err)
        for (m, i), err in zip(leaving if errors else [], errors, strict=True)])


# -- ListGroups / DescribeGroups / DeleteGroups -------------------------------------


async def handle_list_groups(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = ListGroupsResponse[v]
    listed = admin.list_groups(coordinator(ctx).groups,
                               req.states_filter if v >= 4 else None,
                               req.types_filter if v >= 5 else None,
                               coordinator(ctx).consumer_groups)
    return resp(throttle_time_ms=0, error_code=0, groups=[
        resp.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                         group_state=g.state, group_type=g.group_type)
        for g in listed])


async def handle_describe_groups(ctx: BrokerContext, header: RequestHeader,
                                 req: Any, session: Session) -> Any:
    v = header.api_version
    resp = DescribeGroupsResponse[v]
    group_cls = resp.DescribedGroup
    member_cls = group_cls.DescribedGroupMember
    ops = GROUP_OPERATIONS if v >= 3 and req.include_authorized_operations else None
    out = []
    for group_id in req.groups:
        if code := not_here(ctx, group_id):
            d = admin.GroupDescription(code, group_id, "")
        else:
            d = admin.describe_group(coordinator(ctx).groups, group_id,
                                     coordinator(ctx).consumer_groups)
        out.append(group_cls(
            error_code=_error(ctx, "DescribeGroups", d.error), group_id=d.group_id,
            group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                client_id=m.client_id, client_host=m.client_host,
                                member_metadata=m.metadata, member_assignment=m.assignment)
                     for m in d.members],
            authorized_operations=ops))
    return resp(throttle_time_ms=0, groups=out)


async def handle_delete_groups(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = DeleteGroupsResponse[v]
    coord = coordinator(ctx)
    names = list(req.groups_names)
    here = [n for n in names if not not_here(ctx, n)]
    deleted = dict(zip(here, admin.delete_groups(coord.groups, coord.offsets, here,
                                                 coord.consumer_groups,
                                                 coord.consumer_records.delete), strict=True))
    errors = [deleted[n] if n in deleted else not_here(ctx, n) for n in names]
    for name in {n for n, err in deleted.items() if err is E_NONE}:
        if (err := await coord.durable(name)) is not E_NONE:
            errors = [err if n == name else e for n, e in zip(names, errors, strict=True)]
    return resp(throttle_time_ms=0, results=[
        resp.DeletableGroupResult(group_id=name, error_code=_error(ctx, "DeleteGroups", err))
        for name, err in zip(names, errors, strict=True)])


HANDLERS = {
    FindCoordinatorRequest.API_KEY: handle_find_coordinator,
    JoinGroupRequest.API_KEY: handle_join_group,
    SyncGroupRequest.API_KEY: handle_sync_group,
    HeartbeatRequest.API_KEY: handle_heartbeat,
    LeaveGroupRequest.API_KEY: handle_leave_group,
    ListGroupsRequest.API_KEY: handle_list_groups,
    DescribeGroupsRequest.API_KEY: handle_describe_groups,
    DeleteGroupsRequest.API_KEY: handle_delete_groups,
}
