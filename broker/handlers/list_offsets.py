"""ListOffsets: requests in, ``partition_queries.list_offset`` per partition (see
``replication.list_offsets`` for what each special timestamp means), responses out.

From v10 (KIP-1075) the request carries a timeout for lookups that read the
remote tier: one deadline for the whole request; a partition whose lookup is
still running then gets REQUEST_TIMED_OUT, as Kafka's delayed remote list
offsets answer."""

from __future__ import annotations

import math
from typing import Any

import trio
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication import partition_queries

READ_COMMITTED = 1
# The first version with timeout_ms (KIP-1075).
TIMEOUT_VERSION = 10


async def handle_list_offsets(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = ListOffsetsResponse[v]
    topic_cls = resp.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    # Decoded requests of every version carry the field (its default before v10).
    timeout_ms = req.timeout_ms if v >= TIMEOUT_VERSION else None
    deadline = math.inf if timeout_ms is None else trio.current_time() + max(timeout_ms, 0) / 1000
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            try:
                with trio.move_on_at(deadline):
                    offset, ts, epoch = await partition_queries.list_offset(
                        ctx.replicas, (t.name, p.partition_index), p.timestamp, v, committed,
                        p.current_leader_epoch)
                    parts.append(part_cls(partition_index=p.partition_index, error_code=0,
                                          timestamp=ts, offset=offset, leader_epoch=epoch))
                    continue
                raise KafkaApiError(ErrorCode.REQUEST_TIMED_OUT,
                                    f"no answer within timeout_ms={timeout_ms}")
            except KafkaApiError as exc:
                ctx.metrics.error("ListOffsets", exc.code)
                parts.append(part_cls(partition_index=p.partition_index, error_code=exc.code,
                                      timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


HANDLERS = {ListOffsetsRequest.API_KEY: handle_list_offsets}
