"""Per-group configs (KIP-848): Kafka's validation rules, the single-node store,
DescribeConfigs / IncrementalAlterConfigs of resource type 32 through the wire
format, and the coordinator using a group's own session timeout and heartbeat
interval (trio's MockClock)."""

from __future__ import annotations

import pytest
import trio
from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from broker.context import NO_SESSION, BrokerContext
from broker.group_configs import GroupConfigs, LocalGroupConfigStore, check_group_configs
from broker.handlers import HANDLERS
from broker.metrics import BrokerMetrics
from config import ConfigError
from config.dynamic import ConfigSource
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from tests.coordinator.conftest import (  # noqa: F401 - fixtures used by name
    config,
    coordinator,
    make_config,
    make_node,
    node,
)
from tests.coordinator.test_consumer import hb

GROUP = 32
SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"


@pytest.mark.parametrize("configs, words", [
    ({"consumer.assignors": "range"}, "Unknown group config name"),
    ({SESSION: "44999"}, "greater than or equal to group.consumer.min.session.timeout.ms"),
    ({SESSION: "60001"}, "less than or equal to group.consumer.max.session.timeout.ms"),
    ({INTERVAL: "4999"}, "greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({INTERVAL: "15001"}, "less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({INTERVAL: "x"}, "not an integer"),
])
def test_kafka_rules(tmp_path, configs, words):
    with pytest.raises(ConfigError, match=words):
        check_group_configs(configs, make_config(tmp_path))


def test_session_must_exceed_interval_with_defaults_in_play(tmp_path):
    cfg = make_config(tmp_path, **{"group.consumer.min.session.timeout.ms": "1000"})
    assert check_group_configs({SESSION: "6000"}, cfg) == {SESSION: 6000, INTERVAL: 5000}
    with pytest.raises(ConfigError, match="must be greater than consumer.heartbeat"):
        check_group_configs({SESSION: "5000"}, cfg)


async def broker(tmp_path, **overrides: str) -> BrokerContext:
    cfg = make_config(tmp_path, **overrides)
    single = make_node(cfg)
    ctx = BrokerContext(cfg, single.metadata, single.replicas, single.admin, BrokerMetrics(), 0)
    ctx.group_configs = GroupConfigs(cfg, LocalGroupConfigStore(cfg.log_dir))
    await ctx.group_configs.load()
    return ctx


async def call(ctx, req_cls, resp_cls, version, **fields):
    header = RequestHeader(req_cls.API_KEY, version, 1, "test", 0)
    req = req_cls[version].decode(req_cls[version](**fields).encode(version=version),
                                  version=version)
    resp = await HANDLERS[req_cls.API_KEY](ctx, header, req, NO_SESSION)
    return resp_cls[version].decode(resp.encode(version=version), version=version)


async def describe(ctx, group: str):
    resp = await call(ctx, DescribeConfigsRequest, DescribeConfigsResponse, 4,
                      resources=[(GROUP, group, None)], include_synonyms=True,
                      include_documentation=False)
    [result] = resp.results
    return result.error_code, {c.name: (c.value, c.config_source) for c in result.configs}


async def alter(ctx, group: str, *ops: tuple[str, int, str | None], validate_only=False):
    resp = await call(ctx, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 1,
                      resources=[(GROUP, group, list(ops))], validate_only=validate_only)
    return resp.responses[0].error_code


async def test_alter_describe_and_keep_across_restarts(tmp_path):
    ctx = await broker(tmp_path)
    assert await describe(ctx, "g") == (0, {SESSION: ("45000", ConfigSource.DEFAULT_CONFIG),
                                            INTERVAL: ("5000", ConfigSource.DEFAULT_CONFIG)})
    assert await alter(ctx, "g", (INTERVAL, 0, "6000"), validate_only=True) == 0
    assert (await describe(ctx, "g"))[1][INTERVAL][1] == ConfigSource.DEFAULT_CONFIG
    assert await alter(ctx, "g", (INTERVAL, 0, "6000"), (SESSION, 0, "50000")) == 0
    assert await alter(ctx, "g", (SESSION, 1, None)) == 0
    assert await alter(ctx, "g", (INTERVAL, 0, "99")) == ErrorCode.INVALID_CONFIG
    assert await alter(ctx, "g", (INTERVAL, 2, "1")) == ErrorCode.INVALID_CONFIG  # APPEND
    assert await alter(ctx, "", (INTERVAL, 0, "6000")) == ErrorCode.INVALID_REQUEST
    want = {SESSION: ("45000", ConfigSource.DEFAULT_CONFIG),
            INTERVAL: ("6000", ConfigSource.GROUP_CONFIG)}
    assert await describe(ctx, "g") == (0, want)
    again = await broker(tmp_path)
    assert await describe(again, "g") == (0, want)
    assert again.group_configs is not None and again.group_configs.value("g", INTERVAL) == 6000
    assert again.group_configs.value("other", INTERVAL) == 5000


async def test_the_coordinator_uses_the_group_values(coordinator, autojump_clock):  # noqa: F811
    overrides = {("g", "consumer.session.timeout.ms"): 10_000,
                 ("g", "consumer.heartbeat.interval.ms"): 1_000}
    coordinator.consumer.group_config = lambda group, key: overrides.get(
        (group, key), coordinator.config[f"group.{key}"])
    assert hb(coordinator, "m1", 0).heartbeat_interval_ms == 1000
    assert hb(coordinator, "m1", 0, group="h").heartbeat_interval_ms == 5000
    await trio.sleep(11)  # past g's 10 s session, within h's 45 s
    assert "m1" not in coordinator.consumer_groups["g"].members
    assert "m1" in coordinator.consumer_groups["h"].members
