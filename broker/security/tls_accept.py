"""The server side of a connection's TLS: the handshake, then the principal
its client certificate maps to.

Error handling: a failed handshake or a certificate no principal rule maps
is logged, counted in ``tierd_failed_authentications_total{mechanism="TLS"}``
and raised as ``TlsRefused``; the connection closes (``broker.server``).
"""

from __future__ import annotations

import structlog
import trio

from broker.metrics import BrokerMetrics
from broker.security.principal_rules import NoMatchingRule
from broker.security.tls import ANONYMOUS, ServerTls, principal_of
from broker.security.tls_stream import TlsStream, failure_reason

log = structlog.get_logger(__name__)


class TlsRefused(Exception):
    """The client did not get through TLS; ``reason`` says where it stopped."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def handshake(stream: trio.SocketStream, tls: ServerTls, metrics: BrokerMetrics,
                    peer: str, listener: str) -> TlsStream:
    """The TLS stream over ``stream``, its handshake done.

    Raises:
        TlsRefused: the handshake failed ("tls_handshake").
    """
    tls_stream = TlsStream(stream, tls.context())
    try:
        await tls_stream.do_handshake()
    except trio.BrokenResourceError as exc:
        reason = failure_reason(exc.__cause__)
        log.warning("TLS handshake failed", peer=peer, listener=listener, reason=reason)
        metrics.failed_authentications.labels(listener, "TLS", reason).inc()
        raise TlsRefused("tls_handshake") from None
    return tls_stream


def principal(stream: TlsStream, tls: ServerTls, metrics: BrokerMetrics, peer: str,
              listener: str) -> str:
    """The principal of the client certificate (ANONYMOUS without one).

    Raises:
        TlsRefused: no principal rule maps the certificate ("tls_principal").
    """
    try:
        name = principal_of(stream, tls.mapper)
    except NoMatchingRule as exc:
        log.warning("TLS client refused", peer=peer, listener=listener, reason=str(exc))
        metrics.failed_authentications.labels(listener, "TLS",
                                              "no_matching_principal_rule").inc()
        raise TlsRefused("tls_principal") from None
    if name != ANONYMOUS:
        metrics.authentications.labels(listener, "TLS").inc()
        log.debug("TLS client authenticated", peer=peer, principal=name)
    return name
