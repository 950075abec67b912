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
from config.remote import TOPIC_DEFS as REMOTE_TOPIC_DEFS
from config.remote import TOPIC_SYNONYMS as REMOTE_TOPIC_SYNONYMS

# topic key -> broker synonym (the broker key whose value is the default)
SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    **REMOTE_TOPIC_SYNONYMS,
}

# Topic keys with no broker synonym.
_OWN: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("message.downconversion.enable", T.BOOLEAN, True, "Down-conversion (unused)."),
        ConfigDef("follower.replication.throttled.replicas", T.LIST, [], "Throttling (unused)."),
        ConfigDef("leader.replication.throttled.replicas", T.LIST, [], "Throttling (unused)."),
        *REMOTE_TOPIC_DEFS,
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
    remote_storage_enable: bool = False
    local_retention_ms: int = -1
    local_retention_bytes: int = -1
    remote_copy_disable: bool = False
    remote_delete_on_disable: bool = False
    remote_metadata_rebuilding: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    delete_retention_ms: int = 86400000
    min_cleanable_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy


class TopicConfigs:
    """The overrides of one topic plus the broker config they fall back to."""

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str] | None = None) -> None:
        self.broker = broker
        self.overrides: dict[str, str] = {}
        self._typed: dict[str, Any] = {}
        self.update(overrides or {})
        self.check_consistency()

    def check_consistency(self) -> None:
        """Rules that involve several keys (Kafka's LogConfig validation).

        Raises:
            ConfigError: tiering on a compacted topic or with the broker's
                tiering off, or local retention above total retention.
        """
        if not self.get("remote.storage.enable"):
            return
        if not self.broker["remote.log.storage.system.enable"]:
            raise ConfigError("remote.storage.enable", "true",
                              "Tiered Storage functionality is disabled in the broker "
                              "(remote.log.storage.system.enable=false)")
        if "compact" in self.get("cleanup.policy"):
            raise ConfigError("remote.storage.enable", "true",
                              "Remote log storage is not supported for compacted topics")
        for local_key, total_key in (("local.retention.ms", "retention.ms"),
                                     ("local.retention.bytes", "retention.bytes")):
            local, total = self.get(local_key), self.get(total_key)
            if local == -2 or total == -1:
                continue
            if local == -1 or local > total:
                raise ConfigError(local_key, local,
                                  f"must be <= {total_key} ({total}); -2 means use {total_key}")

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
            remote_storage_enable=g("remote.storage.enable"),
            local_retention_ms=g("retention.ms") if g("local.retention.ms") == -2
            else g("local.retention.ms"),
            local_retention_bytes=g("retention.bytes") if g("local.retention.bytes") == -2
            else g("local.retention.bytes"),
            remote_copy_disable=g("remote.log.copy.disable"),
            remote_delete_on_disable=g("remote.log.delete.on.disable"),
            remote_metadata_rebuilding=g("tierd.remote.metadata.rebuilding"),
            min_insync_replicas=g("min.insync.replicas"),
            unclean_leader_election=g("unclean.leader.election.enable"),
            delete_retention_ms=g("delete.retention.ms"),
            min_cleanable_ratio=g("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=g("min.compaction.lag.ms"),
            max_compaction_lag_ms=g("max.compaction.lag.ms"),
        )
