"""ListOffsets: requests in, ``partition_queries.list_offset`` per partition (see
``replication.list_offsets`` for what each special timestamp means), responses out."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import KafkaApiError
from replication import partition_queries

READ_COMMITTED = 1


async def handle_list_offsets(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = ListOffsetsResponse[v]
    topic_cls = resp.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            try:
                offset, ts, epoch = await partition_queries.list_offset(
                    ctx.replicas, (t.name, p.partition_index), p.timestamp, v, committed,
                    p.current_leader_epoch)
                parts.append(part_cls(partition_index=p.partition_index, error_code=0,
                                      timestamp=ts, offset=offset, leader_epoch=epoch))
            except KafkaApiError as exc:
                ctx.metrics.error("ListOffsets", exc.code)
                parts.append(part_cls(partition_index=p.partition_index, error_code=exc.code,
                                      timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


HANDLERS = {ListOffsetsRequest.API_KEY: handle_list_offsets}
