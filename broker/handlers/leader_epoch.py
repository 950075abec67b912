"""OffsetForLeaderEpoch: where did leader epoch E end? (KIP-101/KIP-320)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import KafkaApiError
from replication import partition_queries


async def handle_offset_for_leader_epoch(ctx: BrokerContext, header: RequestHeader,
                                         req: Any, session: Session) -> Any:
    resp = OffsetForLeaderEpochResponse[header.api_version]
    topic_cls = resp.OffsetForLeaderTopicResult
    part_cls = topic_cls.EpochEndOffset
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            try:
                epoch, end = partition_queries.end_offset_for_epoch(
                    ctx.replicas, (t.topic, p.partition), p.current_leader_epoch,
                    p.leader_epoch)
                parts.append(part_cls(error_code=0, partition=p.partition, leader_epoch=epoch,
                                      end_offset=end))
            except KafkaApiError as exc:
                ctx.metrics.error("OffsetForLeaderEpoch", exc.code)
                parts.append(part_cls(error_code=exc.code, partition=p.partition,
                                      leader_epoch=-1, end_offset=-1))
        topics.append(topic_cls(topic=t.topic, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


HANDLERS = {OffsetForLeaderEpochRequest.API_KEY: handle_offset_for_leader_epoch}
