"""Dynamic broker configs of a single node: kept in the log directory, applied
in place, refused before anything is stored."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from broker import dynamic_apply
from broker.dynamic_config import DynamicBrokerConfigs, LocalDynamicConfigStore
from broker.security.limits import ConnectionLimits
from config.broker import BrokerConfig
from config.defs import ConfigError
from config.dynamic import DEFAULT_ENTITY, DynamicConfigRefused
from storage.remote.quota import RateQuota

LISTENERS = ["PLAINTEXT"]


def _configs(tmp_path: Path) -> DynamicBrokerConfigs:
    config = BrokerConfig.from_mapping({"log.dir": str(tmp_path), "node.id": "3",
                                        "log.retention.bytes": "1000"})
    return DynamicBrokerConfigs(config, LocalDynamicConfigStore(str(tmp_path)), cluster=False)


def _set(**values: str):  # type: ignore[no-untyped-def]
    return lambda entry: {**entry, **{k.replace("_", "."): v for k, v in values.items()}}


async def test_alter_applies_in_place_and_survives_a_restart(tmp_path: Path) -> None:
    dynamic = _configs(tmp_path)
    seen: list[set[str]] = []
    dynamic.on_change(seen.append)
    await dynamic.load()
    await dynamic.alter(DEFAULT_ENTITY, _set(log_retention_bytes="500"), LISTENERS, False)
    await dynamic.alter("3", _set(log_retention_bytes="200"), LISTENERS, False)
    assert dynamic.config["log.retention.bytes"] == 200
    assert seen == [{"log.retention.bytes"}, {"log.retention.bytes"}]

    again = _configs(tmp_path)
    assert again.config["log.retention.bytes"] == 1000
    assert await again.load() == {"log.retention.bytes"}
    assert again.config["log.retention.bytes"] == 200
    assert again.layers.default == {"log.retention.bytes": "500"}

    await again.alter("3", lambda entry: {}, LISTENERS, False)
    assert again.config["log.retention.bytes"] == 500


async def test_validate_only_and_refusals_store_nothing(tmp_path: Path) -> None:
    dynamic = _configs(tmp_path)
    await dynamic.load()
    await dynamic.alter("3", _set(log_retention_bytes="10"), LISTENERS, True)
    with pytest.raises(DynamicConfigRefused, match="log.dirs"):
        await dynamic.alter("3", _set(log_dirs="/x"), LISTENERS, False)
    with pytest.raises(ConfigError):
        await dynamic.alter("3", _set(log_cleaner_threads="9"), LISTENERS, False)
    assert dynamic.config["log.retention.bytes"] == 1000
    assert await dynamic.current("3") == {}
    assert not (tmp_path / "dynamic-broker-configs.json").exists()


def test_resource_names(tmp_path: Path) -> None:
    dynamic = _configs(tmp_path)
    assert dynamic.entity("") == DEFAULT_ENTITY
    assert dynamic.entity("3") == "3"
    for bad in ("4", "x"):
        with pytest.raises(DynamicConfigRefused):
            dynamic.entity(bad)


async def test_remote_quotas_and_connection_limits_change_live(tmp_path: Path) -> None:
    dynamic = _configs(tmp_path)
    config = dynamic.config
    copy = RateQuota(config["remote.log.manager.copy.max.bytes.per.second"], 11, 1,
                     lambda: 0.0)
    fetch = RateQuota(config["remote.log.manager.fetch.max.bytes.per.second"], 11, 1,
                      lambda: 0.0)
    tiering = SimpleNamespace(manager=SimpleNamespace(
        svc=SimpleNamespace(copy_quota=copy, fetch_quota=fetch)))
    ctx = SimpleNamespace(config=config, cluster=None, replicas=None, metadata=None)
    limits = ConnectionLimits(config, clock=lambda: 0.0)
    dynamic_apply.install(dynamic, ctx, limits, (), tiering)  # type: ignore[arg-type]
    assert copy.unlimited and fetch.unlimited
    await dynamic.alter(DEFAULT_ENTITY, _set(remote_log_manager_copy_max_bytes_per_second="1000",
                                             max_connections_per_ip="1"), LISTENERS, False)
    assert (copy.limit, fetch.unlimited) == (1000, True)
    assert limits.admit("PLAINTEXT", "10.0.0.1") is None
    assert limits.admit("PLAINTEXT", "10.0.0.1") == "max_connections_per_ip"
    await dynamic.alter(DEFAULT_ENTITY, lambda entry: {}, LISTENERS, False)
    assert copy.unlimited
    assert limits.admit("PLAINTEXT", "10.0.0.1") is None
