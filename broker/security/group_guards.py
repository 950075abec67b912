"""Guards of the APIs that touch a group's (or transaction's) offsets and
topics at once: the group (and transactional id) first, then each topic.
See ``broker.security.guards`` for the whole picture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.security.access import Access, item_class, response_class
from broker.security.acl import Operation as Op
from broker.security.acl import ResourceType as R
from broker.security.topic_guards import _all_denied, _partitions, _split
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

Handler = Callable[..., Any]


def _commit_denied(code: ErrorCode) -> Callable[[Any, Any], Any]:
    """OffsetCommit / TxnOffsetCommit answer for a refused topic."""
    return lambda resp, t: item_class(resp, "topics")(name=t.name, partitions=_partitions(
        resp, ("topics", "partitions"), (p.partition_index for p in t.partitions), code))


async def offset_commit(access: Access, header: RequestHeader, req: Any, handler: Handler
                        ) -> Any:
    """READ on the group, then READ on each topic."""
    if not access.allows(Op.READ, R.GROUP, req.group_id):
        return _all_denied(header, req, "topics", "topics", _commit_denied(GROUP_DENIED))
    return await _split(access, header, req, handler, field="topics",
                        allowed=lambda t: access.allows(Op.READ, R.TOPIC, t.name),
                        answer_field="topics", denied=_commit_denied(TOPIC_DENIED))


async def txn_offset_commit(access: Access, header: RequestHeader, req: Any,
                            handler: Handler) -> Any:
    """WRITE on the transactional id, READ on the group, READ on each topic."""
    if not access.allows(Op.WRITE, R.TRANSACTIONAL_ID, req.transactional_id):
        return _all_denied(header, req, "topics", "topics", _commit_denied(TXN_DENIED))
    return await offset_commit(access, header, req, handler)


async def offset_delete(access: Access, header: RequestHeader, req: Any, handler: Handler
                        ) -> Any:
    """DELETE on the group, then READ on each topic."""
    if not access.allows(Op.DELETE, R.GROUP, req.group_id):
        return response_class(header)(error_code=GROUP_DENIED, throttle_time_ms=0, topics=[])
    return await _split(access, header, req, handler, field="topics",
                        allowed=lambda t: access.allows(Op.READ, R.TOPIC, t.name),
                        answer_field="topics", denied=_commit_denied(TOPIC_DENIED))


async def add_partitions_to_txn(access: Access, header: RequestHeader, req: Any,
                                handler: Handler) -> Any:
    """v0-3 (clients): WRITE on the transactional id and on every topic; if a
    topic is refused nothing is added (the others: OPERATION_NOT_ATTEMPTED).
    v4 (brokers verifying for produce): CLUSTER_ACTION."""
    resp = response_class(header)
    if header.api_version >= 4:
        if access.allows(Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster"):
            return await handler(access.ctx, header, req, access.session)
        return resp(throttle_time_ms=0, error_code=CLUSTER_DENIED, results_by_transaction=[])
    topics = req.v3_and_below_topics
    if not access.allows(Op.WRITE, R.TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
        codes = {t.name: TXN_DENIED for t in topics}
    else:
        codes = {t.name: (ErrorCode.NONE if access.allows(Op.WRITE, R.TOPIC, t.name)
                          else TOPIC_DENIED) for t in topics}
        if all(c == ErrorCode.NONE for c in codes.values()):
            return await handler(access.ctx, header, req, access.session)
        codes = {n: c or ErrorCode.OPERATION_NOT_ATTEMPTED for n, c in codes.items()}
    topic_cls = item_class(resp, "results_by_topic_v3_and_below")
    part_cls = item_class(topic_cls, "results_by_partition")
    return resp(throttle_time_ms=0, results_by_topic_v3_and_below=[topic_cls(
        name=t.name, results_by_partition=[part_cls(partition_index=p,
                                                    partition_error_code=codes[t.name])
                                           for p in t.partitions]) for t in topics])


async def offset_fetch(access: Access, header: RequestHeader, req: Any, handler: Handler
                       ) -> Any:
    """DESCRIBE on the group(s); each topic named needs DESCRIBE (refused:
    TOPIC_AUTHORIZATION_FAILED); all topics: the describable ones."""
    resp = response_class(header)
    if header.api_version >= 8:
        group_cls = item_class(resp, "groups")
        allowed = [g for g in req.groups if access.allows(Op.DESCRIBE, R.GROUP, g.group_id)]
        refused = [group_cls(group_id=g.group_id, error_code=GROUP_DENIED, topics=[])
                   for g in req.groups if g not in allowed]
        named = {g.group_id: g.topics is not None for g in allowed}
        req.groups = allowed
        response = (await handler(access.ctx, header, req, access.session) if allowed
                    else resp(throttle_time_ms=0, groups=[]))
        for g in response.groups:
            g.topics = _filter_topics(access, g.topics, named.get(g.group_id, False))
        response.groups.extend(refused)
        return response
    if not access.allows(Op.DESCRIBE, R.GROUP, req.group_id):
        if header.api_version >= 2:
            return resp(throttle_time_ms=0, error_code=GROUP_DENIED, topics=[])
        return _all_denied(header, req, "topics", "topics", lambda r, t: item_class(
            r, "topics")(name=t.name, partitions=_partitions(
                r, ("topics", "partitions"), t.partition_indexes, GROUP_DENIED,
                committed_offset=-1)))
    response = await handler(access.ctx, header, req, access.session)
    response.topics = _filter_topics(access, response.topics, req.topics is not None)
    return response


def _filter_topics(access: Access, topics: list[Any], named: bool) -> list[Any]:
    """Refused topics of an OffsetFetch answer: dropped from a listing, or
    their partitions answered TOPIC_AUTHORIZATION_FAILED when named."""
    out = []
    for t in topics:
        if access.allows(Op.DESCRIBE, R.TOPIC, t.name, quiet=not named):
            out.append(t)
        elif named:
            for p in t.partitions:
                p.error_code, p.committed_offset, p.metadata = TOPIC_DENIED, -1, None
            out.append(t)
    return out


async def consumer_group_heartbeat(access: Access, header: RequestHeader, req: Any,
                                   handler: Handler) -> Any:
    """READ on the group, then DESCRIBE on every subscribed topic (KIP-848)."""
    code = ErrorCode.NONE
    if not access.allows(Op.READ, R.GROUP, req.group_id):
        code = GROUP_DENIED
    elif req.subscribed_topic_names is not None and not all(
            access.allows(Op.DESCRIBE, R.TOPIC, name) for name in req.subscribed_topic_names):
        code = TOPIC_DENIED
    if code is not ErrorCode.NONE:
        return response_class(header)(throttle_time_ms=0, error_code=code, error_message=None,
                                      member_id=None, member_epoch=0, heartbeat_interval_ms=0,
                                      assignment=None)
    return await handler(access.ctx, header, req, access.session)


async def consumer_group_describe(access: Access, header: RequestHeader, req: Any,
                                  handler: Handler) -> Any:
    """DESCRIBE on each group; authorized_operations filled in when asked."""
    resp = response_class(header)
    allowed = [g for g in req.group_ids if access.allows(Op.DESCRIBE, R.GROUP, g)]
    denied = [item_class(resp, "groups")(
        error_code=GROUP_DENIED, error_message=None, group_id=g, group_state="", group_epoch=0,
        assignment_epoch=0, assignor_name="", members=[], authorized_operations=None)
        for g in req.group_ids if g not in allowed]
    req.group_ids = allowed
    response = (await handler(access.ctx, header, req, access.session) if allowed
                else resp(throttle_time_ms=0, groups=[]))
    if req.include_authorized_operations:
        for group in response.groups:
            group.authorized_operations = access.operations(R.GROUP, group.group_id)
    response.groups.extend(denied)
    return response
