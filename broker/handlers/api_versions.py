"""ApiVersions: the table in protocol.api, and (v3+) the features of
protocol.features with the cluster's finalized levels and their epoch
(broker/features.py)."""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, Session
from broker.features import finalized_now
from protocol import api, features
from protocol.api import RequestHeader

# First ApiVersions version with the feature fields (tagged).
_FEATURES_SINCE = 3


async def handle_api_versions(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp_cls = api.SUPPORTED[api.API_VERSIONS_KEY].response[v]
    resp = resp_cls(error_code=0, api_keys=api.api_version_entries(v), throttle_time_ms=0)
    if v >= _FEATURES_SINCE:
        resp.supported_features = [
            resp_cls.SupportedFeatureKey(name=f.name, min_version=f.min_level,
                                         max_version=f.max_level)
            for f in features.supported(v)]
        finalized = finalized_now(ctx.features, ctx.config)
        resp.finalized_features_epoch = finalized.epoch
        resp.finalized_features = [
            resp_cls.FinalizedFeatureKey(name=f.name, min_version_level=f.min_level,
                                         max_version_level=f.max_level)
            for f in features.finalized(finalized)]
    return resp


HANDLERS = {api.API_VERSIONS_KEY: handle_api_versions}
