"""Calling a request handler the way the broker does: the request encoded to
bytes and decoded again, the handler's response likewise."""

from __future__ import annotations

from typing import Any

from broker.context import NO_SESSION, BrokerContext
from broker.handlers import HANDLERS
from protocol.api import RequestHeader


async def wire_call(ctx: BrokerContext, req_cls: Any, resp_cls: Any, version: int,
                    **fields: Any) -> Any:
    """``req_cls[version](**fields)`` through its handler, both ways over the
    wire format; returns the decoded ``resp_cls[version]``."""
    header = RequestHeader(req_cls.API_KEY, version, 1, "test", 0)
    req = req_cls[version].decode(req_cls[version](**fields).encode(version=version),
                                  version=version)
    resp = await HANDLERS[req_cls.API_KEY](ctx, header, req, NO_SESSION)
    return resp_cls[version].decode(resp.encode(version=version), version=version)
