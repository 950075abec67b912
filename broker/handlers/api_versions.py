"""ApiVersions: the table in protocol.api, nothing more."""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, Session
from protocol import api
from protocol.api import RequestHeader


async def handle_api_versions(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp_cls = api.SUPPORTED[api.API_VERSIONS_KEY].response[header.api_version]
    return resp_cls(error_code=0, api_keys=api.api_version_entries(header.api_version),
                    throttle_time_ms=0)


HANDLERS = {api.API_VERSIONS_KEY: handle_api_versions}
