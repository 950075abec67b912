"""ApiVersions v3+ features (KIP-584): transaction.version supported 0..2 and
seeded at the level of tierd.transaction.version, group.version supported 0..1
and seeded at 1; through the wire format. (Changing them: test_features.py.)"""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker.context import NO_SESSION, BrokerContext
from broker.handlers import HANDLERS
from broker.metrics import BrokerMetrics
from protocol import features
from protocol.api import RequestHeader
from tests.coordinator.conftest import make_config, make_node


async def ask(tmp_path, version: int, **overrides: str):
    config = make_config(tmp_path, **overrides)
    node = make_node(config)
    ctx = BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0)
    header = RequestHeader(ApiVersionsRequest.API_KEY, version, 1, "test", 0)
    resp = await HANDLERS[ApiVersionsRequest.API_KEY](ctx, header, ApiVersionsRequest[version](),
                                                       NO_SESSION)
    return ApiVersionsResponse[version].decode(resp.encode(version=version), version=version)


def named(entries) -> dict:
    return {e.name: e for e in entries or []}


async def test_v4_lists_transaction_version_finalized_at_2_by_default(tmp_path):
    resp = await ask(tmp_path, 4)
    supported = named(resp.supported_features)["transaction.version"]
    assert (supported.min_version, supported.max_version) == (0, 2)
    finalized = named(resp.finalized_features)["transaction.version"]
    assert (finalized.min_version_level, finalized.max_version_level) == (2, 2)
    assert named(resp.supported_features)["group.version"].max_version == 1
    assert named(resp.finalized_features)["group.version"].max_version_level == 1
    assert resp.finalized_features_epoch == 0


async def test_level_0_finalizes_nothing(tmp_path):
    resp = await ask(tmp_path, 4, tierd_transaction_version="0")
    assert set(named(resp.finalized_features)) == {"group.version"}
    assert "transaction.version" in named(resp.supported_features)


async def test_v3_omits_features_with_minimum_0(tmp_path):
    # KAFKA-17011: v3 clients reject a supported minimum of 0.
    resp = await ask(tmp_path, 3)
    assert named(resp.supported_features) == {}
    assert named(resp.finalized_features)["transaction.version"].max_version_level == 2


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_old_versions_have_no_features(tmp_path, version):
    resp = await ask(tmp_path, version)
    assert resp.error_code == 0 and resp.api_keys


def test_seed_levels():
    assert features.seed_levels(1) == {"transaction.version": 1, "group.version": 1}
    assert features.seed_levels(0) == {"group.version": 1}
    assert features.finalized(features.Finalized({"transaction.version": 2}, 3)) == [
        features.Feature("transaction.version", 2, 2)]
