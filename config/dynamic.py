"""Dynamic broker configs (``kafka-configs --entity-type brokers``): which keys a
running broker takes, how a change is checked, and the layers a key's value
comes from.

Theory of operation: a broker key has up to four layers, highest first: the
per-broker dynamic entry (Kafka's ``/config/brokers/<id>``), the cluster-wide
dynamic default (``/config/brokers/<default>``), server.properties (with the
environment and ``--override``s) and the built-in default. ``DynamicLayers``
keeps the two dynamic layers as strings and rebuilds the typed config from all
of them, so precedence and derived keys (``log.retention.ms`` from
``log.retention.hours``) follow the same rules as at start.

Which keys: Kafka marks some keys dynamic; tierd takes those it applies to the
running broker (``LIVE``; with the ``listener.name.<l>.`` prefix,
``LISTENER_LIVE``). Keys Kafka makes dynamic that tierd cannot apply without a
restart (``NOT_LIVE``) are refused, never accepted and ignored. Every other
known key is read-only, refused as Kafka refuses it.

Error handling: ``check_change`` raises ``DynamicConfigRefused`` (Kafka's
INVALID_REQUEST: a key that may not change this way) or ``ConfigError``
(INVALID_CONFIG: an unknown key or a bad value).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from config.broker import DEFS, IGNORED_KAFKA_KEYS, BrokerConfig
from config.defs import ConfigDef, ConfigError
from config.topic import SYNONYMS

# The name of the cluster-wide entry (Kafka's ZooKeeper node name).
DEFAULT_ENTITY = "<default>"
LISTENER_PREFIX = "listener.name."



class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource numbers: where a value comes from."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


# Broker defaults of topic configs: topics without their own value follow them.
# unclean.leader.election.enable is left out: no log reads it (the controller
# does, REPLICATION_KEYS).
LOG_KEYS = frozenset(v for v in SYNONYMS.values() if v != "unclean.leader.election.enable") | {
    "log.retention.minutes", "log.retention.hours", "log.roll.hours",
    "log.roll.jitter.hours"}
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.backoff.ms"})
CONNECTION_KEYS = frozenset({
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "max.connection.creation.rate"})
REMOTE_QUOTA_KEYS = frozenset({
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second"})
# KIP-714 client metrics subscription (tierd's stand-in for CLIENT_METRICS resources).
CLIENT_METRICS_KEYS = frozenset({"tierd.client.metrics.names",
                                 "tierd.client.metrics.interval.ms"})
# Read by the controller at each election (a change to true also elects the
# partitions left without a leader), and the replica fetchers' count.
REPLICATION_KEYS = frozenset({"unclean.leader.election.enable", "num.replica.fetchers"})
LIVE = (LOG_KEYS | CLEANER_KEYS | CONNECTION_KEYS | REMOTE_QUOTA_KEYS | CLIENT_METRICS_KEYS
        | REPLICATION_KEYS)

# Keystore and truststore files: new TLS connections of the listener use them.
SSL_FILE_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.truststore.type",
    "ssl.truststore.location"})
# Kafka's reconfigurable SSL keys: per listener and per broker only.
SSL_STORE_KEYS = SSL_FILE_KEYS | {
    "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.password",
    "ssl.truststore.certificates"}
LISTENER_LIVE = SSL_FILE_KEYS | {"max.connections", "max.connection.creation.rate"}

# Dynamic in Kafka, not (yet) live in tierd: refused. The SSL passwords would
# have to be stored encrypted (Kafka's password.encoder.secret).
NOT_LIVE = frozenset({
    "num.io.threads",
    "num.network.threads", "num.recovery.threads.per.data.dir",
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.reader.threads", "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size", "advertised.listeners",
    "listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms",
    "sasl.jaas.config", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.client.auth", "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules", "connections.max.reauth.ms",
    *(SSL_STORE_KEYS - SSL_FILE_KEYS)})
# Keys Kafka takes only for one broker, never as the cluster default.
PER_BROKER_ONLY = SSL_STORE_KEYS | {"advertised.listeners", "listeners",
                                    "listener.security.protocol.map"}


class DynamicConfigRefused(Exception):
    """A key that cannot be changed this way (Kafka's INVALID_REQUEST)."""


def split_listener(key: str) -> tuple[str | None, str]:
    """``listener.name.<l>.<key>`` -> (l, key); any other key -> (None, key)."""
    if key.startswith(LISTENER_PREFIX) and key.count(".") >= 3:
        _, _, listener, base = key.split(".", 3)
        return listener, base
    return None, key


def definition(key: str) -> ConfigDef | None:
    """The definition of a broker key (a listener-prefixed key: of its base key)."""
    return DEFS.get(split_listener(key)[1])


def is_live(key: str) -> bool:
    """May ``key`` change on a running tierd broker?"""
    listener, base = split_listener(key)
    return base in LISTENER_LIVE if listener is not None else base in LIVE


def check_change(changes: Mapping[str, str | None], per_broker: bool,
                 listeners: list[str]) -> None:
    """Check a change of one dynamic entry (None: the key is deleted).

    Args:
        per_broker: the change is to one broker's entry (else the default).
        listeners: this broker's listener names.

    Raises:
        ConfigError: an unknown key or listener, or a bad value.
        DynamicConfigRefused: a key that may not change (read-only, not live in
            tierd, needing a listener prefix, or per-broker only).
    """
    read_only, not_live, unprefixed, broker_only = [], [], [], []
    known_listeners = {name.lower() for name in listeners}
    for key, value in sorted(changes.items()):
        listener, base = split_listener(key)
        d = DEFS.get(base)
        if d is None and base not in IGNORED_KAFKA_KEYS:
            raise ConfigError(key, value, "unknown broker config")
        if listener is not None and listener.lower() not in known_listeners:
            raise ConfigError(key, value, f"no listener named {listener!r} on this broker")
        if d is not None and value is not None:
            d.parse(value)
        if listener is None and base in SSL_STORE_KEYS:
            unprefixed.append(key)
        elif is_live(key):
            pass
        elif base in NOT_LIVE:
            not_live.append(key)
        else:
            read_only.append(key)
        if not per_broker and base in PER_BROKER_ONLY:
            broker_only.append(key)
    for keys, message in (
            (read_only, "Cannot update these configs dynamically"),
            (not_live, "tierd cannot apply these configs to a running broker (set them in "
                       "server.properties and restart)"),
            (unprefixed, "These security configs can be dynamically updated only "
                         "per-listener (listener.name.<listener>.<config>)"),
            (broker_only, "Cannot update these configs at default cluster level, broker id "
                          "must be specified")):
        if keys:
            raise DynamicConfigRefused(f"{message}: {', '.join(keys)}")


def check_values(new: BrokerConfig, old: BrokerConfig) -> None:
    """Rules between the running value and the new one (Kafka's cleaner limits).

    Raises:
        ConfigError: log.cleaner.threads below 1, below half or above double
            the running count.
    """
    threads, running = new["log.cleaner.threads"], old["log.cleaner.threads"]
    if threads == running:
        return
    if threads < 1:
        raise ConfigError("log.cleaner.threads", threads, "must be at least 1")
    if threads < running / 2:
        raise ConfigError("log.cleaner.threads", threads,
                          f"cannot be reduced to less than half the current value {running}")
    if threads > running * 2:
        raise ConfigError("log.cleaner.threads", threads,
                          f"cannot be increased to more than double the current value "
                          f"{running}")


# Keys whose value may come from another key (Kafka's broker synonyms), first wins.
_SYNONYM_GROUPS = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)


def broker_synonyms(key: str) -> list[str]:
    """The keys ``key``'s value may come from, highest precedence first."""
    listener, base = split_listener(key)
    if listener is not None:
        return [key, base]
    for group in _SYNONYM_GROUPS:
        if key in group:
            return list(group[group.index(key):]) if key != group[0] else list(group)
    return [key]


@dataclass(slots=True)
class DynamicLayers:
    """The static config and the two dynamic entries of this broker."""

    static: dict[str, str]
    default: dict[str, str] = field(default_factory=dict)
    broker: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config: BrokerConfig) -> DynamicLayers:
        static = dict(config.raw) or {k: str(DEFS[k].render(config[k])) for k in config.explicit
                                      if k in DEFS}
        return cls(static)

    def merged(self, default: Mapping[str, str] | None = None,
               broker: Mapping[str, str] | None = None) -> BrokerConfig:
        """The typed config with these layers (or replacements of the dynamic ones).

        Raises:
            ConfigError: a value does not parse.
        """
        return BrokerConfig.from_mapping(
            {**self.static, **(self.default if default is None else default),
             **(self.broker if broker is None else broker)}, quiet=True)

    def apply(self, config: BrokerConfig) -> set[str]:
        """Rebuild ``config``'s values in place from the layers; the keys that changed."""
        new = self.merged().values
        changed = {k for k in set(new) | set(config.values)
                   if new.get(k, None) != config.values.get(k, None)}
        for key in changed:
            if key in new:
                config.values[key] = new[key]
            else:
                del config.values[key]
        return changed

    def synonyms(self, key: str, per_broker: bool = True) -> list[tuple[str, str | None, int]]:
        """Where ``key``'s value may come from: (key, value, source), highest first;
        only the default entry's own layer if not ``per_broker``."""
        out: list[tuple[str, str | None, int]] = []
        for name in broker_synonyms(key):
            d = definition(name)
            hide = d is not None and d.sensitive
            layers = [(self.broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                      (self.default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                      (self.static, ConfigSource.STATIC_BROKER_CONFIG)]
            for values, source in layers:
                if name in values:
                    out.append((name, None if hide else values[name], source))
            if d is not None and d.default is not None and name == split_listener(name)[1]:
                out.append((name, None if hide else d.render(d.default),
                            ConfigSource.DEFAULT_CONFIG))
        if not per_broker:
            out = [s for s in out if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        return out
