"""UpdateFeatures (KIP-584) on a single node: the rules of Kafka 4's controller,
the levels kept in the log directory's feature.json (Kafka's /feature document),
ApiVersions following them, and group.version 0 switching ConsumerGroupHeartbeat
off. Requests and responses go through the wire format."""

from __future__ import annotations

import json

import pytest
from kafka.protocol.admin import UpdateFeaturesRequest, UpdateFeaturesResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker.context import NO_SESSION, BrokerContext
from broker.features import FEATURES_FILE, ClusterFeatures, LocalFeatureStore
from broker.handlers import HANDLERS
from broker.metrics import BrokerMetrics
from protocol.api import RequestHeader
from protocol.consumer_group_apis import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.errors import ErrorCode
from tests.coordinator.conftest import make_config, make_node

INVALID = ErrorCode.INVALID_UPDATE_VERSION


async def broker(tmp_path, **overrides: str) -> BrokerContext:
    config = make_config(tmp_path, **overrides)
    node = make_node(config)
    ctx = BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0)
    ctx.features = ClusterFeatures.of(config, LocalFeatureStore(config.log_dir))
    await ctx.features.load()
    return ctx


async def call(ctx, req_cls, resp_cls, version, **fields):
    header = RequestHeader(req_cls.API_KEY, version, 1, "test", 0)
    req = req_cls[version].decode(req_cls[version](**fields).encode(version=version),
                                  version=version)
    resp = await HANDLERS[req_cls.API_KEY](ctx, header, req, NO_SESSION)
    return resp_cls[version].decode(resp.encode(version=version), version=version)


async def update(ctx, version: int, *items: tuple, validate_only: bool = False):
    cls = UpdateFeaturesRequest[version].FeatureUpdateKey
    if version == 0:
        keys = [cls(feature=f, max_version_level=lvl, allow_downgrade=kind != 1)
                for f, lvl, kind in items]
        return await call(ctx, UpdateFeaturesRequest, UpdateFeaturesResponse, 0,
                          timeout_ms=1000, feature_updates=keys)
    keys = [cls(feature=f, max_version_level=lvl, upgrade_type=kind) for f, lvl, kind in items]
    return await call(ctx, UpdateFeaturesRequest, UpdateFeaturesResponse, version,
                      timeout_ms=1000, feature_updates=keys, validate_only=validate_only)


async def finalized(ctx) -> tuple[dict[str, int], int]:
    resp = await call(ctx, ApiVersionsRequest, ApiVersionsResponse, 4)
    return ({f.name: f.max_version_level for f in resp.finalized_features},
            resp.finalized_features_epoch)


async def test_seeded_then_stored_levels_win_over_the_config(tmp_path):
    ctx = await broker(tmp_path, tierd_transaction_version="1")
    assert await finalized(ctx) == ({"transaction.version": 1, "group.version": 1}, 0)
    resp = await update(ctx, 1, ("transaction.version", 2, 1))
    assert resp.error_code == 0
    assert [(r.feature, r.error_code) for r in resp.results] == [("transaction.version", 0)]
    assert await finalized(ctx) == ({"transaction.version": 2, "group.version": 1}, 1)
    doc = json.loads((tmp_path / FEATURES_FILE).read_text())
    assert (doc["version"], doc["status"], doc["epoch"]) == (2, 1, 1)
    assert doc["features"]["transaction.version"] == {"max_version_level": 2}
    # A restart with another tierd.transaction.version keeps the stored level.
    again = await broker(tmp_path, tierd_transaction_version="0")
    assert await finalized(again) == ({"transaction.version": 2, "group.version": 1}, 1)


async def test_downgrades_need_a_downgrade_type_and_level_0_unlists(tmp_path):
    ctx = await broker(tmp_path)
    resp = await update(ctx, 1, ("transaction.version", 1, 1))
    assert resp.error_code == INVALID and "downgrade" in resp.error_message
    assert resp.results == []
    assert (await update(ctx, 1, ("transaction.version", 1, 2))).error_code == 0
    assert (await update(ctx, 1, ("transaction.version", 0, 3))).error_code == 0
    assert await finalized(ctx) == ({"group.version": 1}, 2)
    # A "downgrade" to a higher level is refused; v0's AllowDowngrade=false upgrades.
    assert (await update(ctx, 1, ("transaction.version", 2, 2))).error_code == INVALID
    assert (await update(ctx, 0, ("transaction.version", 2, 1))).error_code == 0
    assert (await update(ctx, 0, ("transaction.version", 1, 2))).error_code == 0
    assert (await finalized(ctx))[0]["transaction.version"] == 1


@pytest.mark.parametrize("item, words", [
    (("no.such.feature", 1, 1), "does not support the given feature"),
    (("transaction.version", 3, 1), "supports versions 0-2"),
    (("group.version", -1, 3), "less than 0"),
    (("group.version", 0, 9), "upgrade type"),
])
async def test_refusals_change_nothing(tmp_path, item, words):
    ctx = await broker(tmp_path)
    # All or nothing: a valid update beside a refused one is not applied.
    resp = await update(ctx, 2, ("transaction.version", 1, 2), item)
    assert (resp.error_code, resp.results) == (INVALID, [])  # v2 has no results field
    assert words in resp.error_message
    assert await finalized(ctx) == ({"transaction.version": 2, "group.version": 1}, 0)


async def test_validate_only_writes_nothing(tmp_path):
    ctx = await broker(tmp_path)
    resp = await update(ctx, 1, ("group.version", 0, 2), validate_only=True)
    assert resp.error_code == 0
    assert await finalized(ctx) == ({"transaction.version": 2, "group.version": 1}, 0)
    assert (await update(ctx, 1, ("group.version", 1, 1))).error_code == 0  # same level
    assert (await finalized(ctx))[1] == 0


async def test_a_stale_epoch_is_feature_update_failed(tmp_path):
    ctx = await broker(tmp_path)
    assert ctx.features is not None
    ctx.features.store.epoch = 5  # type: ignore[attr-defined]  # as if another writer came first
    resp = await update(ctx, 1, ("group.version", 0, 2))
    assert resp.error_code == ErrorCode.FEATURE_UPDATE_FAILED
    assert (await finalized(ctx))[0]["group.version"] == 1


async def test_group_version_0_turns_the_consumer_protocol_off(tmp_path):
    ctx = await broker(tmp_path)
    assert (await update(ctx, 1, ("group.version", 0, 2))).error_code == 0
    resp = await call(ctx, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0,
                      group_id="g", member_id="", member_epoch=0, instance_id=None,
                      rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
                      server_assignor=None, topic_partitions=[])
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
