"""Produce: validate, append, answer per partition (acks 0, 1, -1).

With one replica, acks=-1 is satisfied as soon as the leader appended (the
ISR is just us), exactly as Kafka behaves with replication factor 1. acks=0
gets no response at all. Per-partition errors (unknown partition, corrupt
batch, too large) are answered for that partition; the others still append.

Transactional batches are verified with the transaction coordinator first
(a simplified KIP-890 check): the partition must be in the producer's open
transaction, else INVALID_TXN_STATE.
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from broker.context import BrokerContext
from protocol import records as batches
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError

log = structlog.get_logger(__name__)

_VALID_ACKS = (-1, 0, 1)


async def handle_produce(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
    v = header.api_version
    resp = ProduceResponse[v]
    topic_cls = resp.TopicProduceResponse
    part_cls = topic_cls.PartitionProduceResponse
    acks_ok = req.acks in _VALID_ACKS
    topics = []
    for topic in req.topic_data:
        parts = []
        for pd in topic.partition_data:
            if not acks_ok:
                parts.append(_error(ctx, part_cls, pd.index, ErrorCode.INVALID_REQUIRED_ACKS, ""))
                continue
            parts.append(_append(ctx, part_cls, topic.name, pd, req.transactional_id))
        topics.append(topic_cls(name=topic.name, partition_responses=parts))
    if req.acks == 0:
        return None
    return resp(responses=topics, throttle_time_ms=0)


def _append(ctx: BrokerContext, part_cls: Any, topic: str, pd: Any,
            transactional_id: str | None) -> Any:
    records = pd.records
    if records is None:
        return _error(ctx, part_cls, pd.index, ErrorCode.CORRUPT_MESSAGE, "null record set")
    code = _verify_transactional(ctx, transactional_id, (topic, pd.index), records)
    if code:
        log.info("transactional produce rejected", topic=topic, partition=pd.index,
                 transactional_id=transactional_id, error=code.name)
        return _error(ctx, part_cls, pd.index, code, f"transactional batch refused: {code.name}")
    try:
        result = ctx.replicas.append((topic, pd.index), bytearray(records))
    except KafkaApiError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            log.info("produce rejected", topic=topic, partition=pd.index, error=exc.code.name,
                     detail=exc.message)
        return _error(ctx, part_cls, pd.index, exc.code, exc.message)
    ctx.metrics.bytes_in.labels(topic).inc(len(records))
    ctx.metrics.messages_in.labels(topic).inc(result.last_offset - result.first_offset + 1)
    return part_cls(index=pd.index, error_code=0, base_offset=result.first_offset,
                    log_append_time_ms=result.log_append_time,
                    log_start_offset=result.log_start_offset, record_errors=[],
                    error_message=None)


def _verify_transactional(ctx: BrokerContext, transactional_id: str | None,
                          tp: tuple[str, int], data: bytes) -> ErrorCode:
    if ctx.transactions is None or len(data) < batches.HEADER_SIZE:
        return ErrorCode.NONE
    head = batches.parse_header(data, 0)
    if not head.is_transactional or head.is_control:
        return ErrorCode.NONE
    return ctx.transactions.verify_produce(transactional_id, head.producer_id,
                                           head.producer_epoch, tp)


def _error(ctx: BrokerContext, part_cls: Any, index: int, code: ErrorCode, message: str) -> Any:
    ctx.metrics.error("Produce", code)
    return part_cls(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message or None)


HANDLERS = {ProduceRequest.API_KEY: handle_produce}
