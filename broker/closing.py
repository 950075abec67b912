"""Why a client connection stops being served: ``CloseConnection``, and
``reject`` for bad input (a log line, a metric, then the close)."""

from __future__ import annotations

from typing import Any, NoReturn

import structlog

from broker.metrics import BrokerMetrics

log = structlog.get_logger(__name__)


class CloseConnection(Exception):
    """Stop serving this connection (after logging why)."""


def reject(metrics: BrokerMetrics, peer: str, reason: str, detail: str, **fields: Any
           ) -> NoReturn:
    """Close the connection of ``peer`` for bad input, logged and counted
    under ``reason`` (``tierd_protocol_errors_total``).

    Raises:
        CloseConnection: always.
    """
    log.warning("closing connection", peer=peer, reason=reason, detail=detail, **fields)
    metrics.protocol_errors.labels(reason).inc()
    raise CloseConnection(reason)
