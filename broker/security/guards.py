"""Authorization of every API: Kafka's operation/resource table, one guard
per API key.

Theory of operation: with an authorizer configured, the server hands each
request to ``authorize_and_handle`` instead of straight to its handler. The
API's guard checks what Kafka checks for it (the table in Kafka's
documentation, "Operations and Resources on Protocols"), then:

- a request wholly refused (a group, a transactional id, the cluster) is
  answered by the guard with the API's authorization error, and the handler
  never runs;
- a request naming several topics (groups, config resources) has the
  refused ones taken out before the handler runs and answered with
  TOPIC_AUTHORIZATION_FAILED (or the resource's code); the handler sees only
  what the principal may touch;
- a listing (Metadata of all topics, ListGroups, OffsetFetch of all topics,
  DescribeTiering) is filtered after the handler, silently, as Kafka does.

An API key without a guard is refused (fails closed): a new API gets a
guard before it can be used with an authorizer on. ``tests`` check that
every supported API has one.

Codes: TOPIC_ (29), GROUP_ (30), CLUSTER_ (31) and TRANSACTIONAL_ID_ (53)
AUTHORIZATION_FAILED, as Kafka answers them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.context import BrokerContext, Session
from broker.security import group_guards as gg
from broker.security import topic_guards as tg
from broker.security import txn_guards
from broker.security.access import Access, item_class, response_class
from broker.security.acl import CLUSTER_NAME, Authorizer
from broker.security.acl import Operation as Op
from broker.security.acl import ResourceType as R
from protocol import api, broker_apis
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

Handler = Callable[[BrokerContext, RequestHeader, Any, Session], Awaitable[Any]]
Guard = Callable[[Access, RequestHeader, Any, Handler], Awaitable[Any]]

GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


async def authorize_and_handle(ctx: BrokerContext, authorizer: Authorizer,
                               header: RequestHeader, req: Any, session: Session, handler: Handler
                               ) -> Any:
    """The response to a request, as its guard lets it be handled."""
    access = Access.of(ctx, authorizer, header, session)
    guard = GUARDS.get(header.api_key)
    if guard is None:
        access.allows(Op.CLUSTER_ACTION, R.CLUSTER, f"unguarded API {access.api}")
        return _top_level(header, CLUSTER_DENIED)
    return await guard(access, header, req, handler)


def _top_level(header: RequestHeader, code: ErrorCode) -> Any:
    """A response carrying only a top-level error code."""
    return response_class(header)(throttle_time_ms=0, error_code=code)


async def _call(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
    return await handler(access.ctx, header, req, access.session)


# -- guards of a whole request ------------------------------------------------------


def open_to_all(access: Access, header: RequestHeader, req: Any, handler: Handler
                ) -> Awaitable[Any]:
    """No check (ApiVersions, SASL)."""
    return _call(access, header, req, handler)


def on_cluster(op: Op, deny: Callable[[RequestHeader, Any], Any] | None = None) -> Guard:
    """``op`` on the cluster, else the API's CLUSTER_AUTHORIZATION_FAILED answer."""

    async def guard(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
        if access.allows(op, R.CLUSTER, CLUSTER_NAME):
            return await handler(access.ctx, header, req, access.session)
        if deny is not None:
            return deny(header, req)
        return _top_level(header, CLUSTER_DENIED)

    return guard


def on_group(op: Op) -> Guard:
    """``op`` on the request's group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)."""

    async def guard(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
        if access.allows(op, R.GROUP, req.group_id):
            return await handler(access.ctx, header, req, access.session)
        return _top_level(header, GROUP_DENIED)

    return guard


async def init_producer_id(access: Access, header: RequestHeader, req: Any,
                           handler: Handler) -> Any:
    """WRITE on the transactional id; an idempotent producer needs
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if req.transactional_id is not None:
        if not access.allows(Op.WRITE, R.TRANSACTIONAL_ID, req.transactional_id):
            return _init_pid_denied(header, TXN_DENIED)
    elif not (access.authorizer.authorize(access.principal, access.host, Op.IDEMPOTENT_WRITE,
                                          R.CLUSTER, CLUSTER_NAME)
              or access.allows_any(Op.WRITE, R.TOPIC)):
        return _init_pid_denied(header, CLUSTER_DENIED)
    return await handler(access.ctx, header, req, access.session)


def _init_pid_denied(header: RequestHeader, code: ErrorCode) -> Any:
    return response_class(header)(throttle_time_ms=0, error_code=code, producer_id=-1,
                                  producer_epoch=-1)


async def add_offsets_to_txn(access: Access, header: RequestHeader, req: Any,
                             handler: Handler) -> Any:
    if not access.allows(Op.WRITE, R.TRANSACTIONAL_ID, req.transactional_id):
        return _top_level(header, TXN_DENIED)
    if not access.allows(Op.READ, R.GROUP, req.group_id):
        return _top_level(header, GROUP_DENIED)
    return await handler(access.ctx, header, req, access.session)


async def end_txn(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
    if not access.allows(Op.WRITE, R.TRANSACTIONAL_ID, req.transactional_id):
        return response_class(header)(throttle_time_ms=0, error_code=TXN_DENIED,
                                      producer_id=-1, producer_epoch=-1)
    return await handler(access.ctx, header, req, access.session)


# -- coordinators and groups --------------------------------------------------------


_KEY_TYPES = {0: (R.GROUP, GROUP_DENIED), 1: (R.TRANSACTIONAL_ID, TXN_DENIED)}


async def find_coordinator(access: Access, header: RequestHeader, req: Any,
                           handler: Handler) -> Any:
    """DESCRIBE on the group or transactional id named (each key from v4)."""
    rtype, code = _KEY_TYPES.get(req.key_type, (R.GROUP, GROUP_DENIED))
    resp = response_class(header)
    if header.api_version < 4:
        if access.allows(Op.DESCRIBE, rtype, req.key):
            return await handler(access.ctx, header, req, access.session)
        return resp(throttle_time_ms=0, error_code=code, error_message=code.name, node_id=-1,
                    host="", port=-1)
    keys = list(req.coordinator_keys)
    allowed = [k for k in keys if access.allows(Op.DESCRIBE, rtype, k)]
    denied = [item_class(resp, "coordinators")(key=k, node_id=-1, host="", port=-1,
                                                 error_code=code, error_message=code.name)
              for k in keys if k not in allowed]
    if not allowed:
        return resp(throttle_time_ms=0, coordinators=denied)
    req.coordinator_keys = allowed
    response = await handler(access.ctx, header, req, access.session)
    response.coordinators.extend(denied)
    return response


async def describe_groups(access: Access, header: RequestHeader, req: Any,
                          handler: Handler) -> Any:
    """DESCRIBE on each group; authorized_operations filled in when asked."""
    resp = response_class(header)
    allowed = [g for g in req.groups if access.allows(Op.DESCRIBE, R.GROUP, g)]
    denied = [item_class(resp, "groups")(error_code=GROUP_DENIED, group_id=g, group_state="",
                                         protocol_type="", protocol_data="", members=[])
              for g in req.groups if g not in allowed]
    req.groups = allowed
    response = (await handler(access.ctx, header, req, access.session) if allowed
                else resp(throttle_time_ms=0, groups=[]))
    if getattr(req, "include_authorized_operations", False):
        for group in response.groups:
            group.authorized_operations = access.operations(R.GROUP, group.group_id)
    response.groups.extend(denied)
    return response


async def list_groups(access: Access, header: RequestHeader, req: Any, handler: Handler
                      ) -> Any:
    """Every group with DESCRIBE on the cluster, else those the principal may describe."""
    response = await handler(access.ctx, header, req, access.session)
    if not access.authorizer.authorize(access.principal, access.host, Op.DESCRIBE, R.CLUSTER,
                                       CLUSTER_NAME):
        response.groups = [g for g in response.groups
                           if access.allows(Op.DESCRIBE, R.GROUP, g.group_id, quiet=True)]
    return response


async def delete_groups(access: Access, header: RequestHeader, req: Any, handler: Handler
                        ) -> Any:
    resp = response_class(header)
    allowed = [g for g in req.groups_names if access.allows(Op.DELETE, R.GROUP, g)]
    denied = [item_class(resp, "results")(group_id=g, error_code=GROUP_DENIED)
              for g in req.groups_names if g not in allowed]
    req.groups_names = allowed
    response = (await handler(access.ctx, header, req, access.session) if allowed
                else resp(throttle_time_ms=0, results=[]))
    response.results.extend(denied)
    return response


async def describe_cluster(access: Access, header: RequestHeader, req: Any,
                           handler: Handler) -> Any:
    """Open to all (as in Kafka); the cluster's authorized operations when asked."""
    response = await handler(access.ctx, header, req, access.session)
    if req.include_cluster_authorized_operations:
        response.authorized_operations = access.operations(R.CLUSTER, CLUSTER_NAME)
    return response


# -- cluster-wide administration with per-item answers ------------------------------


def _each(field: str, **values: Any) -> Callable[[RequestHeader, Any], Any]:
    """A refusal answering each item of a request list with CLUSTER_AUTHORIZATION_FAILED."""

    def deny(header: RequestHeader, req: Any) -> Any:
        resp = response_class(header)
        item = item_class(resp, _RESULT_FIELD[field])
        count = len(getattr(req, field))
        return resp(throttle_time_ms=0, **{_RESULT_FIELD[field]: [
            item(error_code=CLUSTER_DENIED, error_message=CLUSTER_DENIED.name, **values)
            for _ in range(count)]})

    return deny


_RESULT_FIELD = {"creations": "results", "filters": "filter_results"}


def _client_quotas_denied(header: RequestHeader, req: Any) -> Any:
    resp = response_class(header)
    entry = item_class(resp, "entries")
    entity = item_class(entry, "entity")
    return resp(throttle_time_ms=0, entries=[entry(
        error_code=CLUSTER_DENIED, error_message=CLUSTER_DENIED.name,
        entity=[entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in item.entity])
        for item in req.entries])


def _scram_denied(header: RequestHeader, req: Any) -> Any:
    resp = response_class(header)
    users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
    return resp(throttle_time_ms=0, results=[item_class(resp, "results")(
        user=u, error_code=CLUSTER_DENIED, error_message=CLUSTER_DENIED.name) for u in users])


def _describe_acls_denied(header: RequestHeader, req: Any) -> Any:
    return response_class(header)(throttle_time_ms=0, error_code=CLUSTER_DENIED,
                                  error_message=CLUSTER_DENIED.name, resources=[])


def _elect_leaders_denied(header: RequestHeader, req: Any) -> Any:
    """Every partition named, and the request (v1+), refused (none named: none listed)."""
    resp = response_class(header)
    topic = item_class(resp, "replica_election_results")
    part = item_class(topic, "partition_result")
    return resp(throttle_time_ms=0, error_code=CLUSTER_DENIED, replica_election_results=[
        topic(topic=t.topic, partition_result=[
            part(partition_id=p, error_code=CLUSTER_DENIED, error_message=CLUSTER_DENIED.name)
            for p in t.partitions]) for t in req.topic_partitions or []])


GUARDS: dict[int, Guard] = {
    0: tg.produce,
    1: tg.fetch,
    2: tg.list_offsets,
    3: tg.metadata,
    8: gg.offset_commit,
    9: gg.offset_fetch,
    10: find_coordinator,
    11: on_group(Op.READ),  # JoinGroup
    12: on_group(Op.READ),  # Heartbeat
    13: on_group(Op.READ),  # LeaveGroup
    14: on_group(Op.READ),  # SyncGroup
    15: describe_groups,
    16: list_groups,
    17: open_to_all,  # SaslHandshake
    18: open_to_all,  # ApiVersions
    19: tg.create_topics,
    20: tg.delete_topics,
    21: tg.delete_records,
    22: init_producer_id,
    23: tg.offset_for_leader_epoch,
    24: gg.add_partitions_to_txn,
    25: add_offsets_to_txn,
    26: end_txn,
    28: gg.txn_offset_commit,
    29: on_cluster(Op.DESCRIBE, _describe_acls_denied),  # DescribeAcls
    30: on_cluster(Op.ALTER, _each("creations")),  # CreateAcls
    31: on_cluster(Op.ALTER, _each("filters", matching_acls=[])),  # DeleteAcls
    32: tg.describe_configs,
    33: tg.alter_configs,
    35: on_cluster(Op.DESCRIBE),  # DescribeLogDirs
    36: open_to_all,  # SaslAuthenticate
    37: tg.create_partitions,
    42: delete_groups,
    43: on_cluster(Op.ALTER, _elect_leaders_denied),  # ElectLeaders
    44: tg.alter_configs,  # IncrementalAlterConfigs
    45: on_cluster(Op.ALTER),  # AlterPartitionReassignments
    46: on_cluster(Op.DESCRIBE),  # ListPartitionReassignments
    47: gg.offset_delete,
    48: on_cluster(Op.DESCRIBE_CONFIGS),  # DescribeClientQuotas
    49: on_cluster(Op.ALTER_CONFIGS, _client_quotas_denied),  # AlterClientQuotas
    50: on_cluster(Op.DESCRIBE),  # DescribeUserScramCredentials
    51: on_cluster(Op.ALTER, _scram_denied),  # AlterUserScramCredentials
    57: on_cluster(Op.ALTER),  # UpdateFeatures
    60: describe_cluster,
    68: gg.consumer_group_heartbeat,
    69: gg.consumer_group_describe,
    75: tg.describe_topic_partitions,
    # KIP-714 client telemetry: Kafka checks no ACL (any authenticated client).
    71: open_to_all,  # GetTelemetrySubscriptions
    72: open_to_all,  # PushTelemetry
    tg.DESCRIBE_TIERING_KEY: tg.describe_tiering,
    # WriteTxnMarkers and the KIP-664 transaction tooling.
    **txn_guards.GUARDS,
    # Between brokers (ZooKeeper-mode controller and ISR changes).
    **{key: on_cluster(Op.CLUSTER_ACTION) for key in broker_apis.INTER_BROKER},
}

assert set(GUARDS) <= set(api.SUPPORTED), "a guard for an API tierd does not serve"
