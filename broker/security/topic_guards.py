"""Guards of the APIs that name topics (and config resources): the refused
ones are taken out of the request before its handler runs, and answered
with TOPIC_AUTHORIZATION_FAILED next to the handler's answers; listings are
filtered after it. See ``broker.security.guards`` for the whole picture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.deferred import Deferred
from broker.security.access import Access, body_of, item_class, response_class
from broker.security.acl import CLUSTER_NAME
from broker.security.acl import Operation as Op
from broker.security.acl import ResourceType as R
from broker.topic_partitions_page import describe_page, operations_bitfield
from protocol import tierd_apis
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.fetch_fields import replica_id

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
DESCRIBE_TIERING_KEY = tierd_apis.DescribeTieringRequest.API_KEY

Handler = Callable[..., Any]


async def _split(access: Access, header: RequestHeader, req: Any, handler: Handler, *,
                 field: str, allowed: Callable[[Any], bool], answer_field: str,
                 denied: Callable[[Any, Any], Any]) -> Any:
    """Handle the items of ``req.<field>`` that ``allowed`` lets through; answer
    the others with ``denied(response class, item)`` in ``<answer_field>``.

    With nothing allowed the handler does not run (a response with only the
    refusals); a handler answering nothing (Produce acks=0) stays unanswered.
    """
    resp = response_class(header)
    kept: list[Any] = []
    refused: list[Any] = []
    for item in getattr(req, field) or ():
        (kept if allowed(item) else refused).append(item)
    if not refused:
        return await handler(access.ctx, header, req, access.session)
    setattr(req, field, kept)
    if kept:
        response = await handler(access.ctx, header, req, access.session)
    elif getattr(req, "acks", None) == 0:
        response = None
    else:
        response = resp(throttle_time_ms=0, **{answer_field: []})
    if response is None:
        return None

    def with_refused(answer: Any) -> Any:
        getattr(body_of(answer), answer_field).extend(denied(resp, item) for item in refused)
        return answer

    if isinstance(response, Deferred):
        return response.map(with_refused)
    return with_refused(response)


def _topic_name(access: Access, name: str | None, topic_id: Any) -> str | None:
    """A request's topic by name, or by id (None if the id is unknown: the
    handler answers UNKNOWN_TOPIC_ID, no authorization is involved)."""
    if name is not None or topic_id is None:
        return name
    info = access.ctx.metadata.topic_by_id(topic_id)
    return info.name if info is not None else None


def _partitions(resp: Any, path: tuple[str, ...], indexes: Iterable[int], code: ErrorCode,
                index_field: str = "partition_index", **values: Any) -> list[Any]:
    cls = item_class(resp, *path)
    return [cls(**{index_field: i}, error_code=code, **values) for i in indexes]


def _all_denied(header: RequestHeader, req: Any, field: str, answer_field: str,
                denied: Callable[[Any, Any], Any]) -> Any:
    resp = response_class(header)
    return resp(throttle_time_ms=0, **{answer_field: [denied(resp, t) for t in
                                                      getattr(req, field)]})


# -- produce and consume ----------------------------------------------------------------


async def produce(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
    """WRITE on the transactional id (if any) and on each topic."""
    txn_ok = req.transactional_id is None or access.allows(
        Op.WRITE, R.TRANSACTIONAL_ID, req.transactional_id)

    def denied_with(code: ErrorCode) -> Callable[[Any, Any], Any]:
        return lambda resp, t: item_class(resp, "responses")(
            name=t.name, partition_responses=_partitions(
                resp, ("responses", "partition_responses"), (p.index for p in t.partition_data),
                code, "index", base_offset=-1, error_message=code.name))

    if not txn_ok:
        return (None if req.acks == 0 else
                _all_denied(header, req, "topic_data", "responses", denied_with(TXN_DENIED)))
    return await _split(access, header, req, handler, field="topic_data",
                        allowed=lambda t: access.allows(Op.WRITE, R.TOPIC, t.name),
                        answer_field="responses", denied=denied_with(TOPIC_DENIED))


def _fetch_denied(code: ErrorCode) -> Callable[[Any, Any], Any]:
    def denied(resp: Any, t: Any) -> Any:
        return item_class(resp, "responses")(
            topic=t.topic, topic_id=t.topic_id, partitions=_partitions(
                resp, ("responses", "partitions"), (p.partition for p in t.partitions), code,
                high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b""))
    return denied


async def fetch(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
    """READ on each topic; a follower's fetch needs CLUSTER_ACTION."""
    v = header.api_version
    if replica_id(req, v) >= 0:
        if access.allows(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
            return await handler(access.ctx, header, req, access.session)
        response = _all_denied(header, req, "topics", "responses", _fetch_denied(CLUSTER_DENIED))
        response.error_code = CLUSTER_DENIED
        return response
    def allowed(t: Any) -> bool:
        name = _topic_name(access, t.topic if v < 13 else None, t.topic_id)
        return name is None or access.allows(Op.READ, R.TOPIC, name)

    return await _split(access, header, req, handler, field="topics", allowed=allowed,
                        answer_field="responses", denied=_fetch_denied(TOPIC_DENIED))


async def list_offsets(access: Access, header: RequestHeader, req: Any, handler: Handler
                       ) -> Any:
    return await _split(
        access, header, req, handler, field="topics",
        allowed=lambda t: access.allows(Op.DESCRIBE, R.TOPIC, t.name), answer_field="topics",
        denied=lambda resp, t: item_class(resp, "topics")(name=t.name, partitions=_partitions(
            resp, ("topics", "partitions"), (p.partition_index for p in t.partitions),
            TOPIC_DENIED, timestamp=-1, offset=-1)))


async def offset_for_leader_epoch(access: Access, header: RequestHeader, req: Any,
                                  handler: Handler) -> Any:
    """DESCRIBE on each topic; a follower (replica id ≥ 0) needs CLUSTER_ACTION."""
    follower = getattr(req, "replica_id", -1) >= 0

    def denied_with(code: ErrorCode) -> Callable[[Any, Any], Any]:
        return lambda resp, t: item_class(resp, "topics")(topic=t.topic, partitions=_partitions(
            resp, ("topics", "partitions"), (p.partition for p in t.partitions), code,
            "partition", leader_epoch=-1, end_offset=-1))

    if follower:
        if access.allows(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME):
            return await handler(access.ctx, header, req, access.session)
        return _all_denied(header, req, "topics", "topics", denied_with(CLUSTER_DENIED))
    return await _split(access, header, req, handler, field="topics",
                        allowed=lambda t: access.allows(Op.DESCRIBE, R.TOPIC, t.topic),
                        answer_field="topics", denied=denied_with(TOPIC_DENIED))


# -- metadata -------------------------------------------------------------------------


async def metadata(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
    """DESCRIBE on each topic (all topics: the describable ones, silently);
    auto-creation needs CREATE on the cluster or the topic."""
    ctx = access.ctx
    refused: list[str] = []
    if req.topics is not None:
        auto = (getattr(req, "allow_auto_topic_creation", True)
                and ctx.config["auto.create.topics.enable"])
        kept = []
        for t in req.topics:
            name = _topic_name(access, t.name, getattr(t, "topic_id", None))
            if name and (not access.allows(Op.DESCRIBE, R.TOPIC, name) or (
                    auto and ctx.metadata.topic(name) is None and not _may_create(access, name))):
                refused.append(name)
            else:
                kept.append(t)
        req.topics = kept
    response = await handler(ctx, header, req, access.session)
    if req.topics is None:
        response.topics = [t for t in response.topics
                           if access.allows(Op.DESCRIBE, R.TOPIC, t.name, quiet=True)]
    topic_cls = item_class(response_class(header), "topics")
    response.topics.extend(topic_cls(error_code=TOPIC_DENIED, name=name, is_internal=False,
                                     partitions=[]) for name in refused)
    if getattr(req, "include_topic_authorized_operations", False):
        for t in response.topics:
            if t.error_code == 0:
                t.authorized_operations = access.operations(R.TOPIC, t.name)
    if getattr(req, "include_cluster_authorized_operations", False):
        body_of(response).authorized_operations = access.operations(R.CLUSTER, CLUSTER_NAME)
    return response


async def describe_topic_partitions(access: Access, header: RequestHeader, req: Any,
                                    handler: Handler) -> Any:
    """DESCRIBE on each topic: named ones refused are answered
    TOPIC_AUTHORIZATION_FAILED, the all-topics listing skips them silently;
    each topic carries the principal's authorized operations. The page is
    built here, from what the principal may see (the handler is the same
    page for a broker without an authorizer)."""
    quiet = not req.topics
    return describe_page(
        access.ctx.metadata, req, access.session.listener,
        access.ctx.config["max.request.partition.size.limit"],
        lambda name: access.allows(Op.DESCRIBE, R.TOPIC, name, quiet=quiet),
        lambda name: operations_bitfield(access.operations(R.TOPIC, name)))


def _may_create(access: Access, name: str) -> bool:
    return (access.authorizer.authorize(access.principal, access.host, Op.CREATE, R.CLUSTER,
                                        CLUSTER_NAME)
            or access.allows(Op.CREATE, R.TOPIC, name))


# -- topic administration -------------------------------------------------------------


async def create_topics(access: Access, header: RequestHeader, req: Any, handler: Handler
                        ) -> Any:
    """CREATE on the cluster or on each topic; the created topics' configs
    are shown only with DESCRIBE_CONFIGS on them."""
    response = await _split(
        access, header, req, handler, field="topics",
        allowed=lambda t: _may_create(access, t.name), answer_field="topics",
        denied=lambda resp, t: item_class(resp, "topics")(
            name=t.name, error_code=TOPIC_DENIED, error_message=TOPIC_DENIED.name,
            num_partitions=-1, replication_factor=-1, configs=[]))
    if header.api_version >= 5:
        for t in response.topics:
            if t.error_code == 0 and not access.allows(Op.DESCRIBE_CONFIGS, R.TOPIC, t.name,
                                                       quiet=True):
                t.topic_config_error_code, t.configs = TOPIC_DENIED, []
    return response


async def delete_topics(access: Access, header: RequestHeader, req: Any, handler: Handler
                        ) -> Any:
    """DELETE on each topic (named, or by id from v6)."""
    answer = item_class(response_class(header), "responses")
    if header.api_version < 6:
        return await _split(
            access, header, req, handler, field="topic_names",
            allowed=lambda name: access.allows(Op.DELETE, R.TOPIC, name),
            answer_field="responses",
            denied=lambda resp, name: answer(name=name, error_code=TOPIC_DENIED,
                                             error_message=TOPIC_DENIED.name))

    def name_of(t: Any) -> str | None:
        return _topic_name(access, t.name, t.topic_id)

    def allowed(t: Any) -> bool:
        name = name_of(t)
        return name is None or access.allows(Op.DELETE, R.TOPIC, name)

    return await _split(access, header, req, handler, field="topics", allowed=allowed,
                        answer_field="responses",
                        denied=lambda resp, t: answer(name=name_of(t), topic_id=t.topic_id,
                                                      error_code=TOPIC_DENIED,
                                                      error_message=TOPIC_DENIED.name))


async def delete_records(access: Access, header: RequestHeader, req: Any, handler: Handler
                         ) -> Any:
    return await _split(
        access, header, req, handler, field="topics",
        allowed=lambda t: access.allows(Op.DELETE, R.TOPIC, t.name), answer_field="topics",
        denied=lambda resp, t: item_class(resp, "topics")(name=t.name, partitions=_partitions(
            resp, ("topics", "partitions"), (p.partition_index for p in t.partitions),
            TOPIC_DENIED, low_watermark=-1)))


async def create_partitions(access: Access, header: RequestHeader, req: Any,
                            handler: Handler) -> Any:
    return await _split(
        access, header, req, handler, field="topics",
        allowed=lambda t: access.allows(Op.ALTER, R.TOPIC, t.name), answer_field="results",
        denied=lambda resp, t: item_class(resp, "results")(
            name=t.name, error_code=TOPIC_DENIED, error_message=TOPIC_DENIED.name))


# Config resource types: 2 topic, 4 broker, 8 broker logger, 32 group.
_CONFIG_RESOURCES = {2: (R.TOPIC, TOPIC_DENIED), 32: (R.GROUP, GROUP_DENIED)}


def _config_guard(op: Op, answer_field: str) -> Handler:
    async def guard(access: Access, header: RequestHeader, req: Any, handler: Handler) -> Any:
        def allowed(r: Any) -> bool:
            rtype, _ = _CONFIG_RESOURCES.get(r.resource_type, (R.CLUSTER, CLUSTER_DENIED))
            name = CLUSTER_NAME if rtype is R.CLUSTER else r.resource_name
            return access.allows(op, rtype, name)

        def denied(resp: Any, r: Any) -> Any:
            _, code = _CONFIG_RESOURCES.get(r.resource_type, (R.CLUSTER, CLUSTER_DENIED))
            return item_class(resp, answer_field)(
                error_code=code, error_message=code.name, resource_type=r.resource_type,
                resource_name=r.resource_name, configs=[])

        return await _split(access, header, req, handler, field="resources", allowed=allowed,
                            answer_field=answer_field, denied=denied)

    return guard


describe_configs = _config_guard(Op.DESCRIBE_CONFIGS, "results")
alter_configs = _config_guard(Op.ALTER_CONFIGS, "responses")


async def describe_tiering(access: Access, header: RequestHeader, req: Any,
                           handler: Handler) -> Any:
    """DESCRIBE on each topic; all topics: the describable ones."""
    response = await handler(access.ctx, header, req, access.session)
    if req.topics is None:
        response.topics = [t for t in response.topics
                           if access.allows(Op.DESCRIBE, R.TOPIC, t.name, quiet=True)]
        return response
    for t in response.topics:
        if not access.allows(Op.DESCRIBE, R.TOPIC, t.name):
            response.topics[response.topics.index(t)] = item_class(
                response_class(header), "topics")(name=t.name, partitions=_partitions(
                    response_class(header), ("topics", "partitions"),
                    (p.partition_index for p in t.partitions), TOPIC_DENIED))
    return response
