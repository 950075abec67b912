"""Quota muting (KIP-219): a client over a quota is not read from until its
throttle time has passed.

Theory of operation: once a response is ready, ``throttling.apply`` records
the request against the client's quotas and returns the throttle time it
earned (also set in the response). The connection then neither reads nor
handles (pipelined requests already read wait too, as in Kafka) until
``until``. With no quota configured nothing is recorded and nothing mutes.
"""

from __future__ import annotations

from typing import Any

import trio

from broker.context import BrokerContext, Session
from broker.security import throttling
from protocol import api


def quotas_apply(ctx: BrokerContext) -> bool:
    """Whether any client quota is configured (else nothing is throttled)."""
    return ctx.quotas is not None and bool(ctx.quotas.quotas.entries)


class QuotaMute:
    """When one connection may be read from again (trio time; 0: now)."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def active(self) -> bool:
        return self.until > trio.current_time()

    async def wait(self) -> None:
        """Sleep until the mute ends (at once if it has)."""
        if self.active():
            await trio.sleep_until(self.until)

    def record(self, ctx: BrokerContext, session: Session, header: api.RequestHeader,
               request: Any, response: Any, size: int, elapsed_s: float) -> None:
        """Count the request against the client's quotas; mute for the throttle
        time it earned."""
        throttle_ms = throttling.apply(ctx, session, header, request, response, size, elapsed_s)
        if throttle_ms > 0:
            self.until = max(self.until, trio.current_time() + throttle_ms / 1000)
