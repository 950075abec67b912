"""Client quotas applied to one answered request (KIP-13/124/219): its bytes
and handler time are recorded against the client's quotas; a client over one
gets the throttle time in its response, and the server mutes its connection
that long.
"""

from __future__ import annotations

from typing import Any

from broker import zero_copy
from broker.context import BrokerContext, Session
from protocol import api, broker_apis
from protocol.fetch_fields import replica_id

PRODUCE_KEY, FETCH_KEY = 0, 1
# Requests between brokers are never throttled by client quotas.
_EXEMPT_FROM_QUOTAS = frozenset(broker_apis.INTER_BROKER) | {27}  # 27: WriteTxnMarkers


def fetched_bytes(response: Any) -> int:
    """Record bytes in a Fetch response (file slices and large bytes counted
    at their real length, not their markers')."""
    real = {}
    body = response
    if isinstance(response, zero_copy.SplicedResponse):
        real = {marker: len(data) for marker, data in response.slices}
        body = response.response
    total = 0
    for topic in body.responses:
        for part in topic.partitions:
            records = part.records
            if records:
                total += real.get(records, len(records))
    return total


def apply(ctx: BrokerContext, session: Session, header: api.RequestHeader, request: Any,
          response: Any, request_bytes: int, elapsed_s: float) -> float:
    """Record the request against its client's quotas.

    Returns:
        The throttle time in ms (0: within every quota); when positive it is
        also in the response's throttle_time_ms and counted in the metrics.
    """
    assert ctx.quotas is not None
    key = header.api_key
    if key in _EXEMPT_FROM_QUOTAS or (key == FETCH_KEY and replica_id(
            request, header.api_version) >= 0):
        return 0.0
    quotas = ctx.quotas.quotas
    user = session.principal.removeprefix("User:")
    client = header.client_id or ""
    throttle = quotas.record(user, client, "request_percentage", elapsed_s * 100)
    kind = "request"
    if key == PRODUCE_KEY:
        produce = quotas.record(user, client, "producer_byte_rate", request_bytes)
        if produce > throttle:
            throttle, kind = produce, "produce"
    elif key == FETCH_KEY:
        fetch = quotas.record(user, client, "consumer_byte_rate", fetched_bytes(response))
        if fetch > throttle:
            throttle, kind = fetch, "fetch"
    if throttle <= 0:
        return 0.0
    body = response.response if isinstance(response, api.WrappedResponse) else response
    if hasattr(body, "throttle_time_ms"):
        body.throttle_time_ms = int(throttle)
    ctx.metrics.throttled.labels(kind).inc()
    ctx.metrics.throttle_seconds.labels(kind).inc(throttle / 1000)
    return throttle
