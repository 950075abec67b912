"""Topic-level configuration: Kafka's topic keys, each backed by a broker synonym.

A topic stores only its overrides (strings, as the user gave them). The
effective value of a key is the override if present, else the broker's
value of the synonym. ``LogConfig`` is the typed snapshot the log uses on
its hot paths; it is rebuilt whenever overrides or broker config change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.broker import DEFS as BROKER_DEFS
from config.broker import BrokerConfig
from config.defs import ConfigDef, ConfigError
from config.defs import ConfigType as T

# topic key -> broker synonym (the broker key whose value is the default)
SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Topic keys with no broker synonym.
_OWN: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("max.compaction.lag.ms", T.LONG, 2**63 - 1, "Compaction lag (unused).", at_least=1),
        ConfigDef("min.compaction.lag.ms", T.LONG, 0, "Compaction lag (unused).", at_least=0),
        ConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, "Cleaner ratio (unused).",
                  at_least=0, at_most=1),
        ConfigDef("message.downconversion.enable", T.BOOLEAN, True, "Down-conversion (unused)."),
        ConfigDef("follower.replication.throttled.replicas", T.LIST, [], "Throttling (unused)."),
        ConfigDef("leader.replication.throttled.replicas", T.LIST, [], "Throttling (unused)."),
    )
}


def topic_def(name: str) -> ConfigDef | None:
    """The definition of topic key ``name``, typed like its broker synonym."""
    if name in _OWN:
        return _OWN[name]
    synonym = SYNONYMS.get(name)
    if synonym is None:
        return None
    base = BROKER_DEFS[synonym]
    return ConfigDef(name, base.type, base.default, base.doc, base.at_least, base.at_most,
                     base.choices, base.check, base.sensitive)


def topic_keys() -> list[str]:
    return sorted([*SYNONYMS, *_OWN])


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed effective configuration of one partition's log."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    max_message_bytes: int
    retention_ms: int
    retention_bytes: int
    flush_messages: int
    flush_ms: int
    file_delete_delay_ms: int
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    cleanup_policy: tuple[str, ...]


class TopicConfigs:
    """The overrides of one topic plus the broker config they fall back to."""

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str] | None = None) -> None:
        self.broker = broker
        self.overrides: dict[str, str] = {}
        self._typed: dict[str, Any] = {}
        self.update(overrides or {})

    @staticmethod
    def validate(overrides: Mapping[str, str | None]) -> dict[str, Any]:
        """Parse ``overrides`` (None = remove), returning typed values.

        Raises:
            ConfigError: unknown key or invalid value.
        """
        typed: dict[str, Any] = {}
        for key, text in overrides.items():
            d = topic_def(key)
            if d is None:
                raise ConfigError(key, text, "unknown topic config")
            typed[key] = None if text is None else d.parse(text)
        return typed

    def update(self, overrides: Mapping[str, str | None]) -> None:
        """Apply ``overrides`` (None removes a key), validating all first."""
        typed = self.validate(overrides)
        for key, value in typed.items():
            if value is None:
                self.overrides.pop(key, None)
                self._typed.pop(key, None)
            else:
                self.overrides[key] = str(overrides[key])
                self._typed[key] = value

    def replace(self, overrides: Mapping[str, str]) -> None:
        """Replace all overrides (AlterConfigs semantics)."""
        typed = self.validate(overrides)
        self.overrides = {k: str(v) for k, v in overrides.items()}
        self._typed = typed

    def get(self, key: str) -> Any:
        if key in self._typed:
            return self._typed[key]
        if key in _OWN:
            return _OWN[key].default
        return self.broker[SYNONYMS[key]]

    def source(self, key: str) -> str:
        """'topic', 'broker' (set in server.properties) or 'default'."""
        if key in self._typed:
            return "topic"
        if SYNONYMS.get(key) in self.broker.explicit:
            return "broker"
        return "default"

    def log_config(self) -> LogConfig:
        g = self.get
        return LogConfig(
            segment_bytes=g("segment.bytes"),
            segment_ms=g("segment.ms"),
            segment_jitter_ms=g("segment.jitter.ms"),
            segment_index_bytes=g("segment.index.bytes"),
            index_interval_bytes=g("index.interval.bytes"),
            max_message_bytes=g("max.message.bytes"),
            retention_ms=g("retention.ms"),
            retention_bytes=g("retention.bytes"),
            flush_messages=g("flush.messages"),
            flush_ms=g("flush.ms"),
            file_delete_delay_ms=g("file.delete.delay.ms"),
            log_append_time=g("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms=g("message.timestamp.before.max.ms"),
            timestamp_after_max_ms=g("message.timestamp.after.max.ms"),
            cleanup_policy=tuple(g("cleanup.policy")),
        )
