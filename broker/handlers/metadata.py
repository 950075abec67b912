"""Metadata: brokers, cluster id, topics and partitions (with auto-creation)."""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from broker.context import BrokerContext, current_listener
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.metadata import TopicInfo, validate_topic_name

log = structlog.get_logger(__name__)


async def handle_metadata(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
    v = header.api_version
    resp = MetadataResponse[v]
    listener = current_listener()
    names = _requested_topics(ctx, req)
    allow_auto = getattr(req, "allow_auto_topic_creation", True) and req.topics is not None
    topics = []
    for name in names:
        topics.append(await _describe_topic(ctx, resp, name, allow_auto, listener))
    return resp(
        throttle_time_ms=0,
        brokers=[resp.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port,
                                             rack=b.rack) for b in ctx.metadata.brokers(listener)],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.metadata.controller_id,
        topics=topics,
    )


def _requested_topics(ctx: BrokerContext, req: Any) -> list[str]:
    if req.topics is None:
        return ctx.metadata.topic_names()
    names = []
    for t in req.topics:
        name = t.name
        if name is None and getattr(t, "topic_id", None) is not None:
            info = ctx.metadata.topic_by_id(t.topic_id)
            name = info.name if info else None
        names.append(name or "")
    return names


async def _describe_topic(ctx: BrokerContext, resp: Any, name: str, allow_auto: bool,
                          listener: str | None) -> Any:
    topic_cls = resp.MetadataResponseTopic
    info = ctx.metadata.topic(name)
    if info is None:
        try:
            validate_topic_name(name)
        except KafkaApiError as exc:
            return topic_cls(error_code=exc.code, name=name, is_internal=False, partitions=[],
                             authorized_operations=None)
        if allow_auto and ctx.config["auto.create.topics.enable"]:
            info = await _auto_create(ctx, name)
        if info is None:
            return topic_cls(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                             is_internal=False, partitions=[],
                             authorized_operations=None)
    return topic_cls(error_code=0, name=name, topic_id=info.topic_id, is_internal=info.internal,
                     partitions=_partitions(ctx, topic_cls, info, listener),
                     authorized_operations=None)


async def _auto_create(ctx: BrokerContext, name: str) -> TopicInfo | None:
    try:
        return await ctx.admin.create_topic(name, ctx.config["num.partitions"],
                                            ctx.config["default.replication.factor"], {})
    except KafkaApiError as exc:
        if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return ctx.metadata.topic(name)
        log.info("auto-create refused", topic=name, error=exc.code.name)
        return None


def _partitions(ctx: BrokerContext, topic_cls: Any, info: TopicInfo,
                listener: str | None) -> list[Any]:
    part_cls = topic_cls.MetadataResponsePartition
    out = []
    for i in range(info.partitions):
        state = ctx.metadata.partition((info.name, i))
        if state is None:
            out.append(part_cls(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i,
                                leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                                offline_replicas=[]))
            continue
        leader, code = state.leader, ErrorCode.NONE
        if leader < 0:
            code = ErrorCode.LEADER_NOT_AVAILABLE
        elif ctx.metadata.broker(leader, listener) is None:
            # Kafka: a live leader without the client's listener is a
            # misconfiguration the client should hear about.
            live = ctx.metadata.broker(leader) is not None
            leader, code = -1, (ErrorCode.LISTENER_NOT_FOUND if live
                                else ErrorCode.LEADER_NOT_AVAILABLE)
        out.append(part_cls(error_code=code, partition_index=i, leader_id=leader,
                            leader_epoch=state.leader_epoch, replica_nodes=list(state.replicas),
                            isr_nodes=list(state.isr), offline_replicas=list(state.offline)))
    return out


HANDLERS = {MetadataRequest.API_KEY: handle_metadata}
