"""OffsetCommit, OffsetFetch (incl. the multi-group v8+ form) and OffsetDelete.

Partitions of topics this broker does not have are answered
UNKNOWN_TOPIC_OR_PARTITION here, before the coordinator sees the request,
as Kafka's request layer does. An offset never committed is answered as
offset -1 with empty metadata and no error.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from broker.context import BrokerContext, Session
from broker.coordinator.offsets import PartitionCommit
from broker.handlers.groups import coordinator, not_here
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition

NO_OFFSET = -1
NO_EPOCH = -1


def _exists(ctx: BrokerContext, tp: TopicPartition) -> bool:
    return ctx.metadata.has_partition(tp)


async def handle_offset_commit(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = OffsetCommitResponse[v]
    topic_cls = resp.OffsetCommitResponseTopic
    part_cls = topic_cls.OffsetCommitResponsePartition
    wanted = [(t.name, p) for t in req.topics for p in t.partitions]
    known = [_exists(ctx, (name, p.partition_index)) for name, p in wanted]
    commits = [PartitionCommit(name, p.partition_index, p.committed_offset,
                               p.committed_leader_epoch if v >= 6 else NO_EPOCH,
                               p.committed_metadata)
               for (name, p), ok in zip(wanted, known, strict=True) if ok]
    if code := not_here(ctx, req.group_id):
        errors = iter([code] * len(commits))
    else:
        errors = iter(await coordinator(ctx).commit_offsets(
            req.group_id, req.generation_id_or_member_epoch, req.member_id,
            req.group_instance_id if v >= 7 else None,
            req.retention_time_ms if v <= 4 else -1, commits, version=v))
    by_topic: dict[str, list[Any]] = {}
    for (name, p), ok in zip(wanted, known, strict=True):
        code = next(errors) if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if code:
            ctx.metrics.error("OffsetCommit", code)
        by_topic.setdefault(name, []).append(
            part_cls(partition_index=p.partition_index, error_code=code))
    return resp(throttle_time_ms=0,
                topics=[topic_cls(name=n, partitions=ps) for n, ps in by_topic.items()])


async def handle_offset_fetch(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = OffsetFetchResponse[v]
    # KIP-447: require_stable (v7+) makes offsets of open transactions UNSTABLE_OFFSET_COMMIT.
    stable = v >= 7 and bool(req.require_stable)
    if v >= 8:
        group_cls = resp.OffsetFetchResponseGroup
        groups = []
        for g in req.groups:
            if code := (_not_here(ctx, g.group_id) or _member_check(ctx, g, v)):
                groups.append(group_cls(group_id=g.group_id, error_code=code, topics=[]))
                continue
            groups.append(group_cls(
                group_id=g.group_id, error_code=0,
                topics=_fetch(ctx, group_cls.OffsetFetchResponseTopics, g.group_id, g.topics,
                              "OffsetFetchResponsePartitions", stable)))
        return resp(throttle_time_ms=0, groups=groups)
    if code := _not_here(ctx, req.group_id):
        return resp(throttle_time_ms=0, error_code=code, topics=[])
    topics = _fetch(ctx, resp.OffsetFetchResponseTopic, req.group_id, req.topics,
                    "OffsetFetchResponsePartition", stable)
    return resp(throttle_time_ms=0, error_code=0, topics=topics)


def _member_check(ctx: BrokerContext, group: Any, version: int) -> ErrorCode:
    """OffsetFetch v9+ of a KIP-848 consumer group names a member and its epoch."""
    consumer_group = coordinator(ctx).consumer_groups.get(group.group_id)
    if version < 9 or consumer_group is None:
        return ErrorCode.NONE
    code = consumer_group.validate_fetch(group.member_id, group.member_epoch)
    if code:
        ctx.metrics.error("OffsetFetch", code)
    return code


def _not_here(ctx: BrokerContext, group_id: str) -> ErrorCode:
    code = not_here(ctx, group_id)
    if code:
        ctx.metrics.error("OffsetFetch", code)
    return code


def _fetch(ctx: BrokerContext, topic_cls: Any, group_id: str, topics: Any | None,
           part_attr: str, stable: bool = False) -> list[Any]:
    """Topics of one group's OffsetFetch answer (``topics`` None: everything committed)."""
    part_cls = getattr(topic_cls, part_attr)
    wanted = None if topics is None else [(t.name, p) for t in topics
                                          for p in t.partition_indexes]
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), value in coordinator(ctx).offsets.fetch(group_id, wanted):
        if stable and coordinator(ctx).txn_offsets.has_pending(group_id, (topic, partition)):
            ctx.metrics.error("OffsetFetch", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            by_topic.setdefault(topic, []).append(part_cls(
                partition_index=partition, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT,
                committed_offset=NO_OFFSET, committed_leader_epoch=NO_EPOCH, metadata=""))
            continue
        by_topic.setdefault(topic, []).append(part_cls(
            partition_index=partition, error_code=0,
            committed_offset=value.offset if value else NO_OFFSET,
            committed_leader_epoch=value.leader_epoch if value else NO_EPOCH,
            metadata=value.metadata if value else ""))
    return [topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()]


async def handle_offset_delete(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = OffsetDeleteResponse[header.api_version]
    topic_cls = resp.OffsetDeleteResponseTopic
    part_cls = topic_cls.OffsetDeleteResponsePartition
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    known = [tp for tp in wanted if _exists(ctx, tp)]
    code = not_here(ctx, req.group_id)
    errors: list[ErrorCode] = []
    if not code:
        code, errors = coordinator(ctx).offsets.delete(req.group_id, known)
        code = await coordinator(ctx).durable(req.group_id, code)
    if code:
        ctx.metrics.error("OffsetDelete", code)
        return resp(error_code=code, throttle_time_ms=0, topics=[])
    result = dict(zip(known, errors, strict=True))
    by_topic: dict[str, list[Any]] = {}
    for tp in wanted:
        err = result.get(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if err:
            ctx.metrics.error("OffsetDelete", err)
        by_topic.setdefault(tp[0], []).append(part_cls(partition_index=tp[1], error_code=err))
    return resp(error_code=0, throttle_time_ms=0,
                topics=[topic_cls(name=n, partitions=p) for n, p in by_topic.items()])


HANDLERS = {
    OffsetCommitRequest.API_KEY: handle_offset_commit,
    OffsetFetchRequest.API_KEY: handle_offset_fetch,
    OffsetDeleteRequest.API_KEY: handle_offset_delete,
}
