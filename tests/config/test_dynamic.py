"""Dynamic broker configs: which keys may change, and the layers (sources and
synonyms) a key's value comes from."""

from __future__ import annotations

import pytest

from config.broker import BrokerConfig
from config.defs import ConfigError
from config.dynamic import (
    ConfigSource,
    DynamicConfigRefused,
    DynamicLayers,
    broker_synonyms,
    check_change,
    check_values,
    is_live,
)

LISTENERS = ["PLAINTEXT", "SSL"]
DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG
DYNAMIC_DEFAULT_BROKER_CONFIG = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
STATIC_BROKER_CONFIG = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG


def test_live_keys_are_accepted_per_broker_and_as_default() -> None:
    for per_broker in (True, False):
        check_change({"log.retention.bytes": "1000", "log.cleaner.threads": "2",
                      "max.connections.per.ip": "5",
                      "remote.log.manager.copy.max.bytes.per.second": "1048576",
                      "log.retention.hours": None}, per_broker, LISTENERS)


@pytest.mark.parametrize("key", ["log.dirs", "broker.id", "zookeeper.connect", "node.id"])
def test_read_only_keys_are_refused_with_kafkas_message(key: str) -> None:
    with pytest.raises(DynamicConfigRefused, match=f"Cannot update these configs "
                                                   f"dynamically: {key}"):
        check_change({key: "1"}, True, LISTENERS)


def test_kafka_dynamic_keys_tierd_cannot_apply_live_are_refused() -> None:
    with pytest.raises(DynamicConfigRefused, match="running broker.*remote.log.reader.threads"):
        check_change({"remote.log.reader.threads": "2"}, True, LISTENERS)
    # Taken live since (broker/dynamic_apply.py): the controller and the fetchers.
    check_change({"num.replica.fetchers": "2", "unclean.leader.election.enable": "true"},
                 False, LISTENERS)
    with pytest.raises(DynamicConfigRefused, match="listener.name.ssl.ssl.keystore.password"):
        check_change({"listener.name.ssl.ssl.keystore.password": "x"}, True, LISTENERS)


def test_unknown_keys_and_bad_values_are_invalid_config() -> None:
    with pytest.raises(ConfigError, match="unknown broker config"):
        check_change({"no.such.key": "1"}, True, LISTENERS)
    with pytest.raises(ConfigError, match="log.retention.bytes"):
        check_change({"log.retention.bytes": "lots"}, True, LISTENERS)
    with pytest.raises(ConfigError, match="no listener named"):
        check_change({"listener.name.other.max.connections": "3"}, True, LISTENERS)


def test_ssl_stores_need_a_listener_prefix_and_a_broker_id() -> None:
    with pytest.raises(DynamicConfigRefused, match="only per-listener"):
        check_change({"ssl.keystore.location": "/k.pem"}, True, LISTENERS)
    check_change({"listener.name.ssl.ssl.keystore.location": "/k.pem"}, True, LISTENERS)
    with pytest.raises(DynamicConfigRefused, match="broker id must be specified"):
        check_change({"listener.name.ssl.ssl.keystore.location": "/k.pem"}, False, LISTENERS)
    assert is_live("listener.name.ssl.max.connections")
    assert not is_live("listener.name.ssl.ssl.client.auth")


def test_cleaner_threads_change_within_half_and_double() -> None:
    old = BrokerConfig.from_mapping({"log.cleaner.threads": "2"})
    check_values(BrokerConfig.from_mapping({"log.cleaner.threads": "4"}), old)
    check_values(BrokerConfig.from_mapping({"log.cleaner.threads": "1"}), old)
    for bad in ("5", "0"):
        with pytest.raises(ConfigError, match="log.cleaner.threads"):
            check_values(BrokerConfig.from_mapping({"log.cleaner.threads": bad}), old)


def test_per_broker_overrides_default_overrides_static() -> None:
    config = BrokerConfig.from_mapping({"log.retention.bytes": "100"})
    layers = DynamicLayers.of(config)
    layers.default = {"log.retention.bytes": "200"}
    assert layers.apply(config) == {"log.retention.bytes"}
    assert config["log.retention.bytes"] == 200
    layers.broker = {"log.retention.bytes": "300"}
    layers.apply(config)
    assert config["log.retention.bytes"] == 300
    assert layers.synonyms("log.retention.bytes") == [
        ("log.retention.bytes", "300", DYNAMIC_BROKER_CONFIG),
        ("log.retention.bytes", "200", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.bytes", "100", STATIC_BROKER_CONFIG),
        ("log.retention.bytes", "-1", DEFAULT_CONFIG)]
    assert layers.synonyms("log.retention.bytes", per_broker=False) == [
        ("log.retention.bytes", "200", DYNAMIC_DEFAULT_BROKER_CONFIG)]
    layers.broker, layers.default = {}, {}
    assert layers.apply(config) == {"log.retention.bytes"}
    assert config["log.retention.bytes"] == 100


def test_derived_keys_follow_their_dynamic_synonyms() -> None:
    config = BrokerConfig.from_mapping({"log.retention.hours": "24"})
    layers = DynamicLayers.of(config)
    layers.default = {"log.retention.minutes": "30"}
    layers.apply(config)
    assert config["log.retention.ms"] == 30 * 60_000
    assert broker_synonyms("log.retention.ms") == [
        "log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert layers.synonyms("log.retention.ms") == [
        ("log.retention.minutes", "30", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "24", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG)]


def test_listener_keys_fall_back_to_their_base_key_and_hide_passwords() -> None:
    config = BrokerConfig.from_mapping({"max.connections": "50",
                                        "listener.name.ssl.ssl.keystore.password": "secret"})
    layers = DynamicLayers.of(config)
    layers.broker = {"listener.name.ssl.max.connections": "7"}
    layers.apply(config)
    assert config.for_listener("SSL", "max.connections") == 7
    assert layers.synonyms("listener.name.ssl.max.connections")[:2] == [
        ("listener.name.ssl.max.connections", "7", DYNAMIC_BROKER_CONFIG),
        ("max.connections", "50", STATIC_BROKER_CONFIG)]
    assert layers.synonyms("listener.name.ssl.ssl.keystore.password") == [
        ("listener.name.ssl.ssl.keystore.password", None, STATIC_BROKER_CONFIG)]
    layers.broker = {}
    assert "listener.name.ssl.max.connections" in layers.apply(config)
    assert "listener.name.ssl.max.connections" not in config.values
