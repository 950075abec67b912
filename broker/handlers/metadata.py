"""Metadata: brokers, cluster id, topics and partitions (with auto-creation).

Theory of operation: at thousands of partitions, building and encoding a full
Metadata response takes tens of milliseconds, longer than one event-loop
step may last. Between two changes, though, each topic's part of the answer
is the same bytes. ``TopicEncodings`` keeps every described topic encoded,
per version and listener, with the metadata cache's stamp for that topic and
the live brokers; the answer (``MetadataAnswer``) is the rest of the message
with those parts spliced in (``protocol.encoded_items``). A topic whose stamp
moved is encoded again, and the handler lets other tasks run between topics
once it has encoded for a few milliseconds (``storage.pace``). Topics with an error, and answers
with the topics' authorized operations (set per principal by the ACL guard),
are built as messages and encoded with the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from broker.context import BrokerContext, Session
from broker.topic_encodings import EncodedTopic
from protocol import encoded_items
from protocol.api import SUPPORTED, RequestHeader, WrappedResponse
from protocol.errors import ErrorCode, KafkaApiError
from replication.metadata import TopicInfo, validate_topic_name
from storage.pace import Pacer

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class MetadataAnswer(WrappedResponse):
    """The response message with its topics empty, and the topics (messages
    or ``EncodedTopic``) beside it, spliced in by ``layout``."""

    response: Any
    layout: encoded_items.ArrayLayout
    topics: list[Any] = field(default_factory=list)

    def encode(self, header: RequestHeader, flexible_body: bool) -> bytes:
        items = [t.data if isinstance(t, EncodedTopic) else self.layout.item_bytes(t)
                 for t in self.topics]
        return self.layout.encode(header, self.response, items)


async def handle_metadata(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = MetadataResponse[v]
    listener = session.listener
    names = _requested_topics(ctx, req)
    allow_auto = getattr(req, "allow_auto_topic_creation", True) and req.topics is not None
    # Authorized operations are set per principal on each topic message.
    keep = not getattr(req, "include_topic_authorized_operations", False)
    flexible = SUPPORTED[header.api_key].is_flexible(v)
    layout = encoded_items.layout(resp, "topics", v, flexible)
    topics: list[Any] = []
    pacer = Pacer()
    for name in names:
        info = ctx.metadata.topic(name)
        if info is None or not keep:
            topics.append(await _describe_topic(ctx, resp, name, allow_auto, listener))
            continue
        key, stamp = (name, v, listener), ctx.metadata.topic_stamp(name)
        found = ctx.topic_encodings.get(key, stamp)
        if found is None:
            data = layout.item_bytes(_topic(ctx, resp.MetadataResponseTopic, info, listener))
            found = EncodedTopic(name, 0, data)
            ctx.topic_encodings.put(key, stamp, found, ctx.metadata)
        topics.append(found)
        await pacer.tick()
    return MetadataAnswer(resp(
        throttle_time_ms=0,
        brokers=[resp.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port,
                                             rack=b.rack) for b in ctx.metadata.brokers(listener)],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.metadata.controller_id,
        topics=[],
    ), layout, topics)


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
    return _topic(ctx, topic_cls, info, listener)


def _topic(ctx: BrokerContext, topic_cls: Any, info: TopicInfo, listener: str | None) -> Any:
    return topic_cls(error_code=0, name=info.name, topic_id=info.topic_id,
                     is_internal=info.internal,
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
