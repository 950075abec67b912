"""ListOffsets: latest (-1), earliest (-2), max timestamp (-3), earliest local
(-4, v8+), latest tiered (-5, v9+), and lookups by timestamp.

On a topic that is not tiered, -4 is the log start offset and -5 answers
"none" (offset -1), as Kafka does.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from broker.context import BrokerContext
from broker.handlers.common import check_leader_epoch
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.partition import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
# Minimum request version at which each special timestamp is valid.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
READ_COMMITTED = 1


async def handle_list_offsets(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
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
                part = ctx.replicas.partition((t.name, p.partition_index))
                check_leader_epoch(part, p.current_leader_epoch)
                offset, ts, epoch = _lookup(part, p.timestamp, v, committed)
                parts.append(part_cls(partition_index=p.partition_index, error_code=0,
                                      timestamp=ts, offset=offset, leader_epoch=epoch))
            except KafkaApiError as exc:
                ctx.metrics.error("ListOffsets", exc.code)
                parts.append(part_cls(partition_index=p.partition_index, error_code=exc.code,
                                      timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


def _lookup(part: Partition, timestamp: int, version: int,
            committed: bool) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition.

    Raises:
        KafkaApiError: UNSUPPORTED_VERSION for a special timestamp the
            request version does not allow.
    """
    lg = part.log
    if timestamp in _MIN_VERSION and version < _MIN_VERSION[timestamp]:
        raise KafkaApiError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {timestamp} needs "
                                                           f"v{_MIN_VERSION[timestamp]}")
    if timestamp == LATEST:
        offset = part.last_stable_offset if committed else part.high_watermark
        return offset, -1, lg.epochs.latest_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = lg.log_start_offset
        return start, -1, lg.epochs.epoch_for_offset(start)
    if timestamp == LATEST_TIERED:
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = lg.max_timestamp_offset()
    elif timestamp < 0:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    else:
        found = lg.offset_for_timestamp(timestamp)
    if found is None or found[0] >= part.high_watermark:
        return -1, -1, -1
    return found[0], found[1], lg.epochs.epoch_for_offset(found[0])


HANDLERS = {ListOffsetsRequest.API_KEY: handle_list_offsets}
