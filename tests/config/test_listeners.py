"""Listener keys: parsing, checks Kafka makes at start, the advertised view."""

from __future__ import annotations

import pytest

from config import BrokerConfig
from config.defs import ConfigError
from replication.metadata_cache import BrokerEndpoint, MetadataCache
from replication.zk_membership import _parse_broker


def load(**keys: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({k.replace("_", "."): v for k, v in keys.items()})


def test_named_listeners_and_inter_broker_default() -> None:
    cfg = load(listeners="INTERNAL://127.0.0.1:9092,EXTERNAL://:9093",
               listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL")
    assert [(b.name, b.security_protocol, b.host, b.port) for b in cfg.listeners.bind] == [
        ("INTERNAL", "PLAINTEXT", "127.0.0.1", 9092), ("EXTERNAL", "SASL_SSL", "0.0.0.0", 9093)]
    # security.inter.broker.protocol=PLAINTEXT picks the PLAINTEXT listener.
    assert cfg.listeners.inter_broker == "INTERNAL"
    assert cfg.listeners.bind[1].uses_tls and cfg.listeners.bind[1].uses_sasl


@pytest.mark.parametrize("keys, fragment", [
    ({"listeners": "FOO://127.0.0.1:1"}, "FOO has no security protocol"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "used twice"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:1"}, "port 1 used twice"),
    ({"listener.security.protocol.map": "A:PLAIN"}, "unknown security protocol"),
    ({"listener.security.protocol.map": "A:SSL,A:PLAINTEXT"}, "mapped twice"),
    ({"advertised.listeners": "SSL://h:1"}, "SSL is not one of the listeners"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
     "not both"),
    ({"zookeeper.connect": "127.0.0.1:2181", "inter.broker.listener.name": "SSL"},
     "must be one of advertised.listeners"),
])
def test_inconsistent_listener_keys_are_refused(keys: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        BrokerConfig.from_mapping(keys)


def test_for_listener_prefers_the_listener_prefixed_key() -> None:
    cfg = BrokerConfig.from_mapping({"message.max.bytes": "1000",
                                     "listener.name.external.message.max.bytes": "2000"})
    assert cfg.for_listener("EXTERNAL", "message.max.bytes") == 2000
    assert cfg.for_listener("INTERNAL", "message.max.bytes") == 1000


def test_advertised_endpoint_fills_bound_ports_and_projects_per_listener() -> None:
    cfg = load(listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0,HIDDEN://127.0.0.1:0",
               listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SSL,HIDDEN:PLAINTEXT",
               advertised_listeners="INTERNAL://127.0.0.1:0,EXTERNAL://ext.example:19093",
               inter_broker_listener_name="INTERNAL")
    endpoint = BrokerEndpoint.advertise(7, cfg.listeners, {"INTERNAL": 4000, "EXTERNAL": 4001})
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", 4000)
    cache = MetadataCache("c")
    cache.set_brokers([endpoint])
    assert [(b.host, b.port) for b in cache.brokers("EXTERNAL")] == [("ext.example", 19093)]
    assert [(b.host, b.port) for b in cache.brokers()] == [("127.0.0.1", 4000)]
    assert cache.brokers("HIDDEN") == []
    assert cache.broker(7, "HIDDEN") is None


def test_zookeeper_registration_read_on_the_inter_broker_listener() -> None:
    info = {"endpoints": ["INTERNAL://127.0.0.1:1", "EXTERNAL://[::1]:2"],
            "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"},
            "host": None, "port": -1, "rack": "r1"}
    b = _parse_broker(3, info, "INTERNAL")
    assert b is not None and (b.host, b.port, b.rack) == ("127.0.0.1", 1, "r1")
    assert [(e.name, e.security_protocol, e.host, e.port) for e in b.listeners] == [
        ("INTERNAL", "PLAINTEXT", "127.0.0.1", 1), ("EXTERNAL", "SSL", "::1", 2)]
    assert _parse_broker(3, info, "REPLICATION") is None
    legacy = _parse_broker(4, {"host": "h", "port": 9}, "PLAINTEXT")
    assert legacy is not None and (legacy.host, legacy.port) == ("h", 9)
