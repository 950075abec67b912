"""Broker and topic configuration: parsing, precedence, validation, derived values."""

from __future__ import annotations

import pytest

from config.broker import DEFS, BrokerConfig, read_properties
from config.defs import ConfigDef, ConfigError, ConfigType
from config.topic import LogConfig, TopicConfigs, topic_def, topic_keys

# -- server.properties -----------------------------------------------------------------


def _props(tmp_path, text: str) -> str:
    path = tmp_path / "server.properties"
    path.write_text(text)
    return str(path)


def test_read_properties(tmp_path):
    path = _props(tmp_path, "\n".join([
        "# a comment",
        "! another comment",
        "",
        "node.id=3",
        "  log.dirs = /data/a, /data/b  ",
        "listeners=PLAINTEXT://broker-1:9092",
        "cluster.id: abc=def",
        "empty.value=",
    ]))
    assert read_properties(path) == {
        "node.id": "3",
        "log.dirs": "/data/a, /data/b",
        "listeners": "PLAINTEXT://broker-1:9092",
        "cluster.id": "abc=def",
        "empty.value": "",
    }


def test_read_properties_line_without_separator(tmp_path):
    path = _props(tmp_path, "node.id=1\njust-a-word\n")
    with pytest.raises(ConfigError) as info:
        read_properties(path)
    assert info.value.key == f"{path}:2"
    assert info.value.value == "just-a-word"


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(str(tmp_path / "missing.properties"), env={})
    assert info.value.key == "--config"


def test_defaults():
    cfg = BrokerConfig.from_mapping({})
    assert cfg["node.id"] == 0
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg["log.retention.ms"] == 168 * 3_600_000
    assert cfg["log.roll.ms"] == 168 * 3_600_000
    assert cfg["log.cleanup.policy"] == ["delete"]
    assert cfg.explicit == set()
    [listener] = cfg.listeners.bind
    assert (listener.name, listener.security_protocol, listener.host, listener.port) == (
        "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    assert cfg.listeners.inter_broker == "PLAINTEXT"
    assert cfg.log_dir == "./data"


# -- precedence -------------------------------------------------------------------------


def test_precedence_file_env_override(tmp_path):
    path = _props(tmp_path, "log.retention.hours=1\nnum.partitions=4\nnode.id=7\n")
    env = {"TIERD_LOG_RETENTION_HOURS": "2", "TIERD_NUM_PARTITIONS": "5", "PATH": "/bin"}
    cfg = BrokerConfig.load(path, ["log.retention.hours=3"], env=env)
    assert cfg["log.retention.hours"] == 3       # --override beats env and file
    assert cfg["num.partitions"] == 5            # env beats file
    assert cfg["node.id"] == 7                   # file beats default
    assert cfg["log.retention.ms"] == 3 * 3_600_000
    assert {"log.retention.hours", "num.partitions", "node.id"} <= cfg.explicit
    assert "log.retention.ms" not in cfg.explicit


def test_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("TIERD_NUM_PARTITIONS", "9")
    assert BrokerConfig.load()["num.partitions"] == 9


def test_malformed_override():
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, ["no-equals-sign"], env={})
    assert info.value.key == "--override"
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["=value"], env={})


def test_override_value_may_contain_equals():
    cfg = BrokerConfig.load(None, ["cluster.id=a=b"], env={})
    assert cfg["cluster.id"] == "a=b"


def test_unknown_keys_are_kept_not_fatal():
    cfg = BrokerConfig.from_mapping({"some.unknown.key": "1", "num.io.threads": "8"})
    assert cfg["some.unknown.key"] == "1"
    assert "some.unknown.key" not in cfg.explicit


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, allowed_contains, reported", [
    ("message.max.bytes", "abc", "int", "abc"),
    ("message.max.bytes", "1.5", "int", "1.5"),
    ("message.max.bytes", "-1", "at least 0", -1),
    ("message.max.bytes", "2147483648", "range", 2147483648),
    ("log.retention.bytes", "9223372036854775808", "range", 2**63),
    ("default.replication.factor", "40000", "range", 40000),
    ("auto.create.topics.enable", "yes", "boolean", "yes"),
    ("log.cleanup.policy", "delete,shred", "delete", ["delete", "shred"]),
    ("log.cleanup.policy", "", "one of", []),
    ("log.message.timestamp.type", "WallClock", "LogAppendTime", "WallClock"),
    ("listeners", "localhost:9092", "NAME://host:port", ["localhost:9092"]),
    ("listeners", "PLAINTEXT://h:99999", "port", ["PLAINTEXT://h:99999"]),
    ("tierd.metrics.port", "70000", "at most 65535", 70000),
])
def test_invalid_values_name_key_value_and_allowed(key, value, allowed_contains, reported):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, [f"{key}={value}"], env={})
    err = info.value
    assert err.key == key
    assert err.value == reported
    assert allowed_contains in err.allowed
    assert key in str(err) and allowed_contains in str(err)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_valid_typed_values():
    cfg = BrokerConfig.load(None, [
        "auto.create.topics.enable=FALSE", "log.cleanup.policy=compact, delete",
        "listeners=PLAINTEXT://0.0.0.0:9093,CTRL://[::1]:9094",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CTRL:SSL",
        "advertised.listeners=PLAINTEXT://kafka.example:19093", "log.dirs=/x,/y",
    ], env={})
    assert cfg["auto.create.topics.enable"] is False
    assert cfg["log.cleanup.policy"] == ["compact", "delete"]
    assert [(b.name, b.security_protocol, b.host, b.port) for b in cfg.listeners.bind] == [
        ("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9093), ("CTRL", "SSL", "::1", 9094)]
    assert [(a.name, a.host, a.port) for a in cfg.listeners.advertised] == [
        ("PLAINTEXT", "kafka.example", 19093)]
    assert cfg.log_dir == "/x"


def test_config_def_render():
    d = ConfigDef("x", ConfigType.LIST, [], "doc")
    assert d.render(["a", "b"]) == "a,b"
    assert d.render(True) == "true" and d.render(None) is None and d.render(5) == "5"
    assert d.parse(None) is None


# -- derived values -------------------------------------------------------------------------


@pytest.mark.parametrize("settings, expected_ms", [
    ({"log.retention.hours": "2"}, 2 * 3_600_000),
    ({"log.retention.minutes": "30", "log.retention.hours": "2"}, 30 * 60_000),
    ({"log.retention.ms": "1234", "log.retention.minutes": "30"}, 1234),
    ({"log.retention.ms": "-1"}, -1),
])
def test_retention_ms_derivation(settings, expected_ms):
    assert BrokerConfig.from_mapping(settings)["log.retention.ms"] == expected_ms


def test_other_derived_values():
    cfg = BrokerConfig.from_mapping({"log.roll.hours": "1", "log.roll.jitter.hours": "2",
                                     "log.flush.scheduler.interval.ms": "500",
                                     "broker.id": "4"})
    assert cfg["log.roll.ms"] == 3_600_000
    assert cfg["log.roll.jitter.ms"] == 7_200_000
    assert cfg["log.flush.interval.ms"] == 500
    assert cfg["node.id"] == 4
    explicit = BrokerConfig.from_mapping({"log.roll.ms": "10", "log.roll.hours": "1"})
    assert explicit["log.roll.ms"] == 10


# -- topic configs --------------------------------------------------------------------------


def test_topic_config_falls_back_to_broker_synonym():
    broker = BrokerConfig.from_mapping({"log.retention.hours": "5", "message.max.bytes": "2000",
                                        "log.roll.ms": "60000"})
    topic = TopicConfigs(broker)
    assert topic.get("retention.ms") == 5 * 3_600_000
    assert topic.get("max.message.bytes") == 2000
    assert topic.get("segment.ms") == 60000
    assert topic.get("min.cleanable.dirty.ratio") == 0.5  # topic-only key: its own default
    assert topic.source("retention.ms") == "default"       # derived, not set itself
    assert topic.source("max.message.bytes") == "broker"
    assert topic.source("segment.bytes") == "default"


def test_topic_overrides_win():
    topic = TopicConfigs(BrokerConfig.from_mapping({}),
                         {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert topic.get("retention.ms") == 1000
    assert topic.get("cleanup.policy") == ["compact"]
    assert topic.source("retention.ms") == "topic"
    assert topic.overrides == {"retention.ms": "1000", "cleanup.policy": "compact"}
    topic.update({"retention.ms": None, "segment.bytes": "2048"})
    assert topic.get("retention.ms") == 168 * 3_600_000
    assert topic.overrides == {"cleanup.policy": "compact", "segment.bytes": "2048"}
    topic.replace({"flush.messages": "10"})
    assert topic.overrides == {"flush.messages": "10"}
    assert topic.get("cleanup.policy") == ["delete"]


def test_unknown_topic_key_raises():
    with pytest.raises(ConfigError) as info:
        TopicConfigs(BrokerConfig.from_mapping({}), {"retention.hours": "1"})
    assert info.value.key == "retention.hours"
    assert "unknown" in info.value.allowed


def test_invalid_topic_value_raises_and_changes_nothing():
    topic = TopicConfigs(BrokerConfig.from_mapping({}), {"retention.ms": "1000"})
    with pytest.raises(ConfigError) as info:
        topic.update({"retention.ms": "5", "segment.bytes": "10"})  # segment.bytes >= 14
    assert info.value.key == "segment.bytes" and info.value.value == 10
    assert topic.get("retention.ms") == 1000
    with pytest.raises(ConfigError):
        topic.replace({"message.timestamp.type": "Nope"})
    assert topic.overrides == {"retention.ms": "1000"}


def test_topic_defs_are_typed_like_their_synonyms():
    assert topic_def("nonexistent") is None
    for key in topic_keys():
        d = topic_def(key)
        assert d is not None and d.name == key
    assert topic_def("retention.bytes").type == DEFS["log.retention.bytes"].type


def test_log_config_snapshot():
    broker = BrokerConfig.from_mapping({"log.segment.bytes": "5000"})
    cfg = TopicConfigs(broker, {"message.timestamp.type": "LogAppendTime",
                                "cleanup.policy": "delete,compact",
                                "retention.bytes": "100"}).log_config()
    assert isinstance(cfg, LogConfig)
    assert cfg.segment_bytes == 5000
    assert cfg.log_append_time is True
    assert cfg.cleanup_policy == ("delete", "compact")
    assert cfg.retention_bytes == 100
    assert cfg.retention_ms == 168 * 3_600_000
    assert cfg.max_message_bytes == 1048588
    assert TopicConfigs(broker).log_config().log_append_time is False
