"""InitProducerId for idempotent producers.

A producer without a transactional id gets a fresh producer id at epoch 0
(Kafka does the same; an epoch bump request from such a producer also gets a
fresh id). Transactional ids need the transaction coordinator, which this
broker does not run yet: they are answered COORDINATOR_NOT_AVAILABLE and
logged.
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from broker.context import BrokerContext
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


async def handle_init_producer_id(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
    resp = InitProducerIdResponse[header.api_version]
    if req.transactional_id is not None:
        log.info("transactional producer refused: no transaction coordinator",
                 transactional_id=req.transactional_id, client_id=header.client_id)
        ctx.metrics.error("InitProducerId", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return resp(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    producer_id=-1, producer_epoch=-1)
    pid = await ctx.store.allocate_producer_id()
    return resp(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)


HANDLERS = {InitProducerIdRequest.API_KEY: handle_init_producer_id}
