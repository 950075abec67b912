"""DescribeTopicPartitions (KIP-966, API key 75): one page of topics and
their partitions, as the Java 4.x Admin's describeTopics and
``kafka-topics --describe`` read them.

Theory of operation: the topics asked for (all topics when the list is
empty) are taken in name order from the request's cursor on (its topic,
from its partition index), and their partitions added until the page holds
``ResponsePartitionLimit`` of them (never more than the broker's
``max.request.partition.size.limit``, never fewer than one). A page that
stops inside a topic, or before one, says where the next starts
(``NextCursor``); a page that ends with the last partition has none.
Partitions are counted, topics are not: an unknown topic named explicitly
is answered UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a name
no topic can have) without taking room; in the all-topics listing there are
no unknown topics. ZooKeeper-mode partitions have no eligible leader
replicas (ELR is KRaft's), so both ELR lists are empty.

Authorization: the caller passes which topics the principal may DESCRIBE
(the ACL guard) and its authorized operations; the handler, without an
authorizer, allows every topic and every topic operation, as Kafka does.
A topic refused DESCRIBE is left out of the all-topics listing silently,
and answered TOPIC_AUTHORIZATION_FAILED (with no topic id) after the page
when it was named, whatever the cursor and the limit.

Error handling: a cursor whose topic is not among the named topics, or
whose partition index is negative, makes the whole request invalid:
every named topic is answered INVALID_REQUEST, as Kafka answers it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsResponse

from protocol.errors import ErrorCode, KafkaApiError
from replication.metadata import validate_topic_name
from replication.metadata_cache import MetadataCache

# The topics Kafka's Topic.isInternal names (Metadata marks only these).
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Kafka's "authorized operations not requested" value of the int32 field.
OPERATIONS_UNKNOWN = -2**31

ZERO_UUID = uuid.UUID(int=0)

MayDescribe = Callable[[str], bool]
Operations = Callable[[str], int]

_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = _Topic.DescribeTopicPartitionsResponsePartition


def operations_bitfield(operations: frozenset[int] | set[int]) -> int:
    """The protocol's 32-bit field of authorized operations (bit n: operation n)."""
    return sum(1 << op for op in operations)


def describe_page(metadata: MetadataCache, req: Any, listener: str | None, broker_limit: int,
                  may_describe: MayDescribe, operations: Operations) -> Any:
    """The DescribeTopicPartitions v0 response to ``req``.

    Args:
        broker_limit: max.request.partition.size.limit.
        may_describe: whether the principal may DESCRIBE a topic; called once
            per topic considered.
        operations: a topic's authorized operations, as the protocol's bitfield.
    """
    fetch_all = not req.topics
    cursor = req.cursor
    start_name = cursor.topic_name if cursor is not None else ""
    if fetch_all:
        names = {n for n in metadata.topic_names() if n >= start_name}
    else:
        names = {t.name for t in req.topics if t.name >= start_name}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(req)
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(req)
    limit = max(min(broker_limit, req.response_partition_limit), 1)
    topics: list[Any] = []
    refused: list[Any] = []
    next_cursor = None
    remaining = limit
    for name in sorted(names):
        if not may_describe(name):
            if not fetch_all:
                refused.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                      topic_id=ZERO_UUID, is_internal=False, partitions=[],
                                      topic_authorized_operations=OPERATIONS_UNKNOWN))
            continue
        if remaining == 0:
            next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name,
                                                                 partition_index=0)
            break
        start = cursor.partition_index if cursor is not None and name == start_name else 0
        info = metadata.topic(name)
        if info is None:
            if not fetch_all:
                topics.append(_Topic(error_code=_unknown_code(name), name=name,
                                     topic_id=ZERO_UUID, is_internal=name in KAFKA_INTERNAL_TOPICS,
                                     partitions=[], topic_authorized_operations=operations(name)))
            continue
        upper = min(info.partitions, start + remaining)
        partitions = [_partition(metadata, name, i, listener) for i in range(start, upper)]
        topics.append(_Topic(error_code=0, name=name, topic_id=info.topic_id,
                             is_internal=name in KAFKA_INTERNAL_TOPICS, partitions=partitions,
                             topic_authorized_operations=operations(name)))
        if upper < info.partitions:
            next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name,
                                                                 partition_index=upper)
            break
        remaining -= len(partitions)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics + refused,
                                           next_cursor=next_cursor)


def _unknown_code(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaApiError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _partition(metadata: MetadataCache, topic: str, index: int, listener: str | None) -> Any:
    state = metadata.partition((topic, index))
    if state is None:  # created, not yet given a leader by the controller
        return _Partition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
                          leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                          eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
    # Kafka names the leader only while it is alive with the client's listener.
    leader = state.leader if metadata.broker(state.leader, listener) is not None else -1
    return _Partition(error_code=0, partition_index=index, leader_id=leader,
                      leader_epoch=state.leader_epoch, replica_nodes=list(state.replicas),
                      isr_nodes=list(state.isr), eligible_leader_replicas=[],
                      last_known_elr=[], offline_replicas=list(state.offline))


def _invalid(req: Any) -> Any:
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, next_cursor=None, topics=[
        _Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID,
               is_internal=False, partitions=[], topic_authorized_operations=OPERATIONS_UNKNOWN)
        for t in req.topics])
