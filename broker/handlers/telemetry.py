"""GetTelemetrySubscriptions (v0) and PushTelemetry (v0): KIP-714 client metrics.

The rules live in ``broker.client_telemetry``; this module turns requests
into its calls and its answers into responses. As in Kafka, any client that
got through authentication may send both (no ACL is checked). A push whose
metrics cannot be decompressed or decoded is answered INVALID_RECORD, as
Kafka answers a push its receiver fails to export.
"""

from __future__ import annotations

from typing import Any

import trio

from broker.client_telemetry import ACCEPTED_COMPRESSION, decode_push
from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.otlp import OtlpError
from protocol.telemetry_apis import (
    GET_TELEMETRY_SUBSCRIPTIONS_KEY,
    PUSH_TELEMETRY_KEY,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
)


async def handle_get_subscriptions(ctx: BrokerContext, header: RequestHeader, req: Any,
                                   session: Session) -> Any:
    telemetry = ctx.client_telemetry
    if telemetry is None:
        return _subscription_error(ctx, header, ErrorCode.UNSUPPORTED_VERSION)
    answer = telemetry.get_subscription(req.client_instance_id, header.client_id or "")
    if answer.error != ErrorCode.NONE:
        return _subscription_error(ctx, header, answer.error)
    return GetTelemetrySubscriptionsResponse[header.api_version](
        throttle_time_ms=0, error_code=0, client_instance_id=answer.instance_id,
        subscription_id=answer.subscription_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION),
        push_interval_ms=telemetry.subscription.interval_ms,
        telemetry_max_bytes=telemetry.max_bytes, delta_temporality=False,
        requested_metrics=answer.requested)


async def handle_push(ctx: BrokerContext, header: RequestHeader, req: Any,
                      session: Session) -> Any:
    telemetry = ctx.client_telemetry
    if telemetry is None:
        return _push_answer(ctx, header, ErrorCode.UNSUPPORTED_VERSION)
    metrics = bytes(req.metrics)
    error = telemetry.check_push(req.client_instance_id, header.client_id or "",
                                 req.subscription_id, req.terminating, req.compression_type,
                                 len(metrics))
    if error == ErrorCode.NONE and metrics:
        try:
            payload = await trio.to_thread.run_sync(decode_push, req.compression_type, metrics)
        except OtlpError:
            telemetry.dropped.inc()
            error = ErrorCode.INVALID_RECORD
        else:
            telemetry.record(req.client_instance_id, payload)
    return _push_answer(ctx, header, error)


def _subscription_error(ctx: BrokerContext, header: RequestHeader, error: ErrorCode) -> Any:
    ctx.metrics.error("GetTelemetrySubscriptions", error)
    return GetTelemetrySubscriptionsResponse[header.api_version](
        throttle_time_ms=0, error_code=error, client_instance_id=None, subscription_id=0,
        accepted_compression_types=[], push_interval_ms=0, telemetry_max_bytes=0,
        delta_temporality=False, requested_metrics=[])


def _push_answer(ctx: BrokerContext, header: RequestHeader, error: ErrorCode) -> Any:
    if error != ErrorCode.NONE:
        ctx.metrics.error("PushTelemetry", error)
    return PushTelemetryResponse[header.api_version](throttle_time_ms=0, error_code=error)


HANDLERS = {GET_TELEMETRY_SUBSCRIPTIONS_KEY: handle_get_subscriptions,
            PUSH_TELEMETRY_KEY: handle_push}
