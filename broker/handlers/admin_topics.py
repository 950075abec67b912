"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords.

Validation follows Kafka's broker: -1 partitions or replication factor means
the broker default; a replication factor above the live broker count is
INVALID_REPLICATION_FACTOR; configs are checked with the topic config
definitions (INVALID_CONFIG naming the key); validate_only checks everything
and creates nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from broker.context import BrokerContext, Session
from broker.handlers.describe import describe_topic_configs
from config import ConfigError, TopicConfigs
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication import partition_queries
from replication.metadata import validate_topic_name


def _validate_create(ctx: BrokerContext, t: Any) -> tuple[int, int, dict[str, str]]:
    """Partitions, replication factor and configs of one CreatableTopic.

    Raises:
        KafkaApiError: the code Kafka answers for the first problem found.
    """
    validate_topic_name(t.name)
    live = {b.node_id for b in ctx.metadata.brokers()}
    if ctx.metadata.topic(t.name) is not None:
        raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
    partitions, rf = t.num_partitions, t.replication_factor
    if t.assignments:
        if partitions != -1 or rf != -1:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                "Both numPartitions or replicationFactor and replicasAssignments "
                                "were set. Both cannot be used at the same time.")
        for a in t.assignments:
            if any(b not in live for b in a.broker_ids) or not a.broker_ids:
                raise KafkaApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unknown broker in assignment {list(a.broker_ids)}")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                "Partitions must be numbered consecutively from 0")
        partitions, rf = len(indexes), len(t.assignments[0].broker_ids)
        if any(len(a.broker_ids) != rf or len(set(a.broker_ids)) != rf
               for a in t.assignments):
            raise KafkaApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                "All partitions need the same number of distinct replicas")
    if partitions == -1:
        partitions = ctx.config["num.partitions"]
    if rf == -1:
        rf = ctx.config["default.replication.factor"]
    if partitions <= 0:
        raise KafkaApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger "
                                                          "than 0.")
    if rf <= 0:
        raise KafkaApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            "Replication factor must be larger than 0.")
    if rf > len(live):
        raise KafkaApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Replication factor: {rf} larger than available brokers: "
                            f"{len(live)}.")
    configs = {c.name: c.value for c in t.configs}
    if len(configs) != len(t.configs):
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Duplicate config keys")
    try:
        TopicConfigs(ctx.config, configs)
    except ConfigError as exc:
        raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return partitions, rf, configs


async def handle_create_topics(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = CreateTopicsResponse[v]
    result_cls = resp.CreatableTopicResult
    dupes = {n for n, c in Counter(t.name for t in req.topics).items() if c > 1}
    results = []
    for t in req.topics:
        try:
            if t.name in dupes:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                    f"Create topics request from client contains multiple "
                                    f"entries for the topic '{t.name}'")
            partitions, rf, configs = _validate_create(ctx, t)
            topic_id = None
            if not req.validate_only:
                assignment = ({a.partition_index: list(a.broker_ids) for a in t.assignments}
                              if t.assignments else None)
                topic_id = (await ctx.admin.create_topic(t.name, partitions, rf, configs,
                                                         assignment=assignment)).topic_id
            described = describe_topic_configs(ctx, TopicConfigs(ctx.config, configs), None)
            results.append(result_cls(
                name=t.name, topic_id=topic_id, error_code=0, error_message=None,
                num_partitions=partitions, replication_factor=rf,
                configs=[result_cls.CreatableTopicConfigs(
                    name=d.name, value=d.value, read_only=d.read_only, config_source=d.source,
                    is_sensitive=d.sensitive) for d in described]))
        except KafkaApiError as exc:
            ctx.metrics.error("CreateTopics", exc.code)
            results.append(result_cls(name=t.name, error_code=exc.code,
                                      error_message=exc.message, num_partitions=-1,
                                      replication_factor=-1, configs=[]))
    return resp(throttle_time_ms=0, topics=results)


async def handle_delete_topics(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = DeleteTopicsResponse[v]
    result_cls = resp.DeletableTopicResult
    if v >= 6:
        targets = [(t.name, t.topic_id) for t in req.topics]
    else:
        targets = [(name, None) for name in req.topic_names]
    results = []
    for name, topic_id in targets:
        code, message = ErrorCode.NONE, None
        info = ctx.metadata.topic(name) if name else ctx.metadata.topic_by_id(topic_id)
        if not ctx.config["delete.topic.enable"]:
            code, message = ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
        elif info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
            message = "This server does not host this topic."
        else:
            await ctx.admin.delete_topic(info.name)
        if code:
            ctx.metrics.error("DeleteTopics", code)
        results.append(result_cls(name=info.name if info else name,
                                  topic_id=info.topic_id if info else topic_id,
                                  error_code=code, error_message=message))
    return resp(throttle_time_ms=0, responses=results)


async def handle_create_partitions(ctx: BrokerContext, header: RequestHeader,
                                   req: Any, session: Session) -> Any:
    resp = CreatePartitionsResponse[header.api_version]
    result_cls = resp.CreatePartitionsTopicResult
    results = []
    for t in req.topics:
        try:
            info = ctx.metadata.topic(t.name)
            if info is None:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"The topic '{t.name}' does not exist.")
            if t.count <= info.partitions:
                raise KafkaApiError(ErrorCode.INVALID_PARTITIONS,
                                    f"Topic currently has {info.partitions} partitions, which is "
                                    f"higher than or equal to the requested {t.count}.")
            live = {b.node_id for b in ctx.metadata.brokers()}
            if t.assignments is not None and (
                    len(t.assignments) != t.count - info.partitions
                    or any(not a.broker_ids or set(a.broker_ids) - live
                           or len(set(a.broker_ids)) != len(a.broker_ids)
                           for a in t.assignments)):
                raise KafkaApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    "Assignments must name live brokers, once each, for each "
                                    "new partition.")
            if not req.validate_only:
                await ctx.admin.create_partitions(t.name, t.count)
            results.append(result_cls(name=t.name, error_code=0, error_message=None))
        except KafkaApiError as exc:
            ctx.metrics.error("CreatePartitions", exc.code)
            results.append(result_cls(name=t.name, error_code=exc.code, error_message=exc.message))
    return resp(throttle_time_ms=0, results=results)


async def handle_delete_records(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = DeleteRecordsResponse[header.api_version]
    topic_cls = resp.DeleteRecordsTopicResult
    part_cls = topic_cls.DeleteRecordsPartitionResult
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            try:
                low = partition_queries.delete_records(ctx.replicas, (t.name, p.partition_index),
                                                       p.offset)
                parts.append(part_cls(partition_index=p.partition_index, low_watermark=low,
                                      error_code=0))
            except KafkaApiError as exc:
                ctx.metrics.error("DeleteRecords", exc.code)
                parts.append(part_cls(partition_index=p.partition_index, low_watermark=-1,
                                      error_code=exc.code))
        topics.append(topic_cls(name=t.name, partitions=parts))
    await ctx.replicas.write_checkpoints()
    return resp(throttle_time_ms=0, topics=topics)


HANDLERS = {
    CreateTopicsRequest.API_KEY: handle_create_topics,
    DeleteTopicsRequest.API_KEY: handle_delete_topics,
    CreatePartitionsRequest.API_KEY: handle_create_partitions,
    DeleteRecordsRequest.API_KEY: handle_delete_records,
}
