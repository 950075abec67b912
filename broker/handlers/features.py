"""UpdateFeatures (KIP-584): change the cluster's finalized feature levels
(broker/features.py keeps them; the rules are protocol.features').

Every feature update of a request is applied, or none: the first refused
update's error is the request's top-level error (INVALID_UPDATE_VERSION,
FEATURE_UPDATE_FAILED), as Kafka 4's controller answers. v0-1 list each
feature's result when the request succeeds; v2 lists none.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import UpdateFeaturesRequest, UpdateFeaturesResponse

from broker.context import BrokerContext, Session
from broker.features import FeatureUpdate
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.features import Refusal, UpgradeType

# First version with UpgradeType and ValidateOnly (v0 has AllowDowngrade).
_UPGRADE_TYPE_SINCE = 1
# First version whose response carries no per-feature results.
_NO_RESULTS_SINCE = 2


def _update(header: RequestHeader, item: Any) -> FeatureUpdate:
    if header.api_version < _UPGRADE_TYPE_SINCE:
        kind = UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
        return FeatureUpdate(item.feature, item.max_version_level, kind)
    return FeatureUpdate(item.feature, item.max_version_level, item.upgrade_type)


async def handle_update_features(ctx: BrokerContext, header: RequestHeader, req: Any,
                                 session: Session) -> Any:
    v = header.api_version
    resp = UpdateFeaturesResponse[v]
    updates = [_update(header, item) for item in req.feature_updates]
    validate_only = bool(req.validate_only) if v >= _UPGRADE_TYPE_SINCE else False
    refusal = (Refusal(ErrorCode.FEATURE_UPDATE_FAILED, "no feature store")
               if ctx.features is None else await ctx.features.update(updates, validate_only))
    refusal_code = refusal.code if refusal is not None else ErrorCode.NONE
    message = refusal.message if refusal is not None else None
    if refusal_code:
        ctx.metrics.error("UpdateFeatures", refusal_code)
    body: dict[str, Any] = {}
    if v < _NO_RESULTS_SINCE:
        body["results"] = [] if refusal_code else [
            resp.UpdatableFeatureResult(feature=u.name, error_code=0, error_message=None)
            for u in updates]
    return resp(throttle_time_ms=0, error_code=refusal_code, error_message=message, **body)


HANDLERS = {UpdateFeaturesRequest.API_KEY: handle_update_features}
