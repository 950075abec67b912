"""ListOffsets: latest (-1), earliest (-2), max timestamp (-3), earliest local
(-4, v8+), latest tiered (-5, v9+), and lookups by timestamp.

On a topic that is not tiered, -4 is the log start offset and -5 answers
"none" (offset -1), as Kafka does. On a tiered topic -2 is the start of the
log including remote data, -4 the first offset on local disk, -5 the last
offset copied to the remote tier (with its leader epoch); timestamps are
looked up in the remote time indexes first, then locally; -3 considers both.
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
                offset, ts, epoch = await _lookup(ctx, part, p.timestamp, v, committed)
                parts.append(part_cls(partition_index=p.partition_index, error_code=0,
                                      timestamp=ts, offset=offset, leader_epoch=epoch))
            except KafkaApiError as exc:
                ctx.metrics.error("ListOffsets", exc.code)
                parts.append(part_cls(partition_index=p.partition_index, error_code=exc.code,
                                      timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


async def _lookup(ctx: BrokerContext, part: Partition, timestamp: int, version: int,
                  committed: bool) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition.

    Raises:
        KafkaApiError: UNSUPPORTED_VERSION for a special timestamp the
            request version does not allow; KAFKA_STORAGE_ERROR if a remote
            lookup cannot read the tier.
    """
    lg = part.log
    if timestamp in _MIN_VERSION and version < _MIN_VERSION[timestamp]:
        raise KafkaApiError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {timestamp} needs "
                                                           f"v{_MIN_VERSION[timestamp]}")
    if timestamp == LATEST:
        offset = part.last_stable_offset if committed else part.high_watermark
        return offset, -1, lg.epochs.latest_epoch
    if timestamp == EARLIEST:
        start = lg.log_start_offset
        return start, -1, lg.epochs.epoch_for_offset(start)
    if timestamp == EARLIEST_LOCAL:
        start = lg.local_log_start_offset
        return start, -1, lg.epochs.epoch_for_offset(start)
    if timestamp == LATEST_TIERED:
        tiered = lg.highest_tiered_offset
        if not lg.config.remote_storage_enable or tiered < 0:
            return -1, -1, -1
        return tiered, -1, lg.epochs.epoch_for_offset(tiered)
    if timestamp < 0 and timestamp != MAX_TIMESTAMP:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    found = await _search(ctx, part, timestamp)
    if found is None or found[0] >= (part.last_stable_offset if committed else part.high_watermark):
        return -1, -1, -1
    return found[0], found[1], lg.epochs.epoch_for_offset(found[0])


async def _search(ctx: BrokerContext, part: Partition, timestamp: int) -> tuple[int, int] | None:
    lg = part.log
    tp = (part.topic, part.index)
    rlm = ctx.replicas.remote
    tiered = rlm is not None and tp in rlm.partitions and lg.config.remote_storage_enable
    if timestamp == MAX_TIMESTAMP:
        local = lg.max_timestamp_offset()
        if tiered:
            remote_max = rlm.remote_max_timestamp(tp)  # type: ignore[union-attr]
            if remote_max is not None and (local is None or remote_max > local[1]):
                return await rlm.offset_for_timestamp(tp, remote_max)  # type: ignore[union-attr]
        return local
    if tiered:
        found = await rlm.offset_for_timestamp(tp, timestamp)  # type: ignore[union-attr]
        if found is not None:
            return found
    return lg.offset_for_timestamp(timestamp)


HANDLERS = {ListOffsetsRequest.API_KEY: handle_list_offsets}
