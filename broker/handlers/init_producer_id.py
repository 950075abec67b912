"""InitProducerId for idempotent and transactional producers.

A producer without a transactional id gets a fresh producer id at epoch 0
(Kafka does the same; an epoch bump request from such a producer also gets a
fresh id). A transactional id goes to the transaction coordinator, which
bumps the epoch of the id's producer id and fences (aborting its open
transaction) any older instance. PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH before v4, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from broker.context import BrokerContext, Session
from broker.handlers.transactions import coordinator, fenced_for
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError

# The request version that introduced PRODUCER_FENCED here.
_FENCED_SINCE = 4
# Request versions from which the client may name its current producer id and epoch.
_EXPECTED_SINCE = 3
NO_PRODUCER_ID = -1


async def handle_init_producer_id(ctx: BrokerContext, header: RequestHeader,
                                  req: Any, session: Session) -> Any:
    v = header.api_version
    resp = InitProducerIdResponse[v]
    if req.transactional_id is None:
        try:
            pid = await ctx.admin.allocate_producer_id()
        except KafkaApiError as exc:
            ctx.metrics.error("InitProducerId", exc.code)
            return resp(throttle_time_ms=0, error_code=exc.code, producer_id=-1,
                        producer_epoch=-1)
        return resp(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
    if ctx.transactions is None:  # cluster mode until coordinators follow leadership
        ctx.metrics.error("InitProducerId", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return resp(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    producer_id=-1, producer_epoch=-1)
    expected = None
    if v >= _EXPECTED_SINCE and req.producer_id != NO_PRODUCER_ID:
        expected = (req.producer_id, req.producer_epoch)
    result = await coordinator(ctx).init_producer_id(req.transactional_id,
                                                     req.transaction_timeout_ms, expected)
    code = fenced_for(result.error, v, _FENCED_SINCE)
    if code:
        ctx.metrics.error("InitProducerId", code)
    return resp(throttle_time_ms=0, error_code=code, producer_id=result.producer_id,
                producer_epoch=result.producer_epoch)


HANDLERS = {InitProducerIdRequest.API_KEY: handle_init_producer_id}
