"""Broker configuration: server.properties, overrides, environment.

Precedence, lowest to highest: built-in default, the properties file,
environment variables ``TIERD_<KEY>`` (dots as underscores, upper case), and
``--override key=value`` arguments. Unknown keys produce a warning (Kafka's
behaviour); invalid values make ``load`` raise ``ConfigError``, which the CLI
reports before exiting.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from config.defs import INT_MAX, LONG_MAX, ConfigDef, ConfigError
from config.defs import ConfigType as T
from config.listeners import DEFAULT_PROTOCOL_MAP, PROTOCOLS, Listeners, resolve
from config.remote import BROKER_DEFS as REMOTE_BROKER_DEFS
from config.security import DEFS as SECURITY_DEFS

log = structlog.get_logger(__name__)

# replica.selector.class values: Kafka's class names (also in tierd's config files).
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _listener_check(value: list[str]) -> str | None:
    for item in value:
        name, sep, rest = item.partition("://")
        if not sep or ":" not in rest:
            return "expected a list of NAME://host:port"
        host, _, port = rest.rpartition(":")
        if not port.isdigit() or not 0 <= int(port) <= 65535:
            return f"bad port in {item!r}"
    return None


# group.consumer.assignors: the server-side assignors tierd has, by name or by
# the class name Kafka's default lists them with.
CONSUMER_ASSIGNORS = {
    "uniform": "uniform", "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "range": "range", "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


# group.consumer.migration.policy: which online conversions between classic
# and consumer groups are allowed (Kafka 4.x's ConsumerGroupMigrationPolicy).
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _migration_policy_check(value: str) -> str | None:
    if value.lower() not in MIGRATION_POLICIES:
        return f"one of {', '.join(MIGRATION_POLICIES)} (case-insensitive)"
    return None


def _assignors_check(value: list[str]) -> str | None:
    if not value:
        return "at least one assignor"
    unknown = [v for v in value if v not in CONSUMER_ASSIGNORS]
    return f"unknown assignors {unknown} (uniform, range)" if unknown else None


_DEFS: list[ConfigDef] = [
    ConfigDef("node.id", T.INT, 0, "Id of this broker.", at_least=0),
    ConfigDef("broker.id", T.INT, None, "Deprecated synonym of node.id.", at_least=-1),
    ConfigDef("broker.rack", T.STRING, None, "Rack (or zone) of this broker: replicas of a "
              "new partition go to different racks, and with replica.selector.class a "
              "consumer that sets client.rack reads from a replica in its own rack."),
    ConfigDef("replica.selector.class", T.STRING, None, "Which replica a consumer reads "
              "from (KIP-392): unset or LeaderSelector, the leader; RackAwareReplicaSelector, "
              "a replica in the consumer's client.rack when there is one.",
              choices=(LEADER_SELECTOR, RACK_AWARE_SELECTOR)),
    ConfigDef("listeners", T.LIST, ["PLAINTEXT://127.0.0.1:9092"], "Listeners.", check=_listener_check),
    ConfigDef("advertised.listeners", T.LIST, None, "Listeners given to clients.",
              check=_listener_check),
    ConfigDef("listener.security.protocol.map", T.LIST, DEFAULT_PROTOCOL_MAP,
              "Security protocol of each listener name (NAME:PROTOCOL)."),
    ConfigDef("inter.broker.listener.name", T.STRING, None,
              "Listener brokers use to reach each other."),
    ConfigDef("security.inter.broker.protocol", T.STRING, "PLAINTEXT",
              "Inter-broker security protocol if inter.broker.listener.name is unset.",
              choices=PROTOCOLS),
    ConfigDef("log.dirs", T.LIST, None, "Log directories (only the first is used)."),
    ConfigDef("log.dir", T.STRING, "./data", "Log directory if log.dirs is not set."),
    ConfigDef("num.partitions", T.INT, 1, "Default partitions of a new topic.", at_least=1),
    ConfigDef("default.replication.factor", T.SHORT, 1, "Default replication factor.", at_least=1),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True, "Create topics on metadata requests."),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True, "Allow DeleteTopics."),
    ConfigDef("message.max.bytes", T.INT, 1048588, "Largest record batch.", at_least=0),
    ConfigDef("socket.request.max.bytes", T.INT, 104857600, "Largest request.", at_least=1),
    ConfigDef("max.request.partition.size.limit", T.INT, 2000,
              "Most partitions one DescribeTopicPartitions answer holds.", at_least=1),
    ConfigDef("log.segment.bytes", T.INT, 1073741824, "Segment size.", at_least=14),
    ConfigDef("log.roll.ms", T.LONG, None, "Segment age before roll.", at_least=1),
    ConfigDef("log.roll.hours", T.INT, 168, "Segment age before roll, hours.", at_least=1),
    ConfigDef("log.roll.jitter.ms", T.LONG, None, "Roll jitter.", at_least=0),
    ConfigDef("log.roll.jitter.hours", T.INT, 0, "Roll jitter, hours.", at_least=0),
    ConfigDef("log.index.size.max.bytes", T.INT, 10485760, "Index size.", at_least=4),
    ConfigDef("log.index.interval.bytes", T.INT, 4096, "Bytes between index entries.", at_least=0),
    ConfigDef("log.flush.interval.messages", T.LONG, LONG_MAX, "Messages before fsync.", at_least=1),
    ConfigDef("log.flush.interval.ms", T.LONG, None, "Time before fsync.", at_least=0),
    ConfigDef("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, "Flush check interval.",
              at_least=0),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", T.INT, 60000, "Checkpoint interval.",
              at_least=0),
    ConfigDef("log.retention.ms", T.LONG, None, "Retention time, -1 unlimited.", at_least=-1),
    ConfigDef("log.retention.minutes", T.INT, None, "Retention time, minutes."),
    ConfigDef("log.retention.hours", T.INT, 168, "Retention time, hours."),
    ConfigDef("log.retention.bytes", T.LONG, -1, "Retention size per partition.", at_least=-1),
    ConfigDef("log.retention.check.interval.ms", T.LONG, 300000, "Retention check period.",
              at_least=1),
    ConfigDef("log.segment.delete.delay.ms", T.LONG, 60000, "Delay before deleting files.",
              at_least=0),
    ConfigDef("log.cleanup.policy", T.LIST, ["delete"], "Cleanup policy.",
              choices=("delete", "compact")),
    ConfigDef("log.cleaner.delete.retention.ms", T.LONG, 86400000, "How long a tombstone or "
              "a removable transaction marker stays after the cleaner first keeps it.",
              at_least=0),
    ConfigDef("log.cleaner.enable", T.BOOLEAN, True, "Run the log cleaner (compacted topics, "
              "__consumer_offsets, __transaction_state)."),
    ConfigDef("log.cleaner.threads", T.INT, 1, "Cleaner threads (each one worker process).",
              at_least=0),
    ConfigDef("log.cleaner.dedupe.buffer.size", T.LONG, 134217728, "Memory of the cleaners' "
              "key maps, shared by the threads.", at_least=0),
    ConfigDef("log.cleaner.io.buffer.size", T.INT, 524288, "Read/write buffer of a cleaner.",
              at_least=0),
    ConfigDef("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9, "How full a key map may get.",
              at_least=0, at_most=1),
    ConfigDef("log.cleaner.io.max.bytes.per.second", T.DOUBLE, 1.7976931348623157e308,
              "Read plus write rate limit of each cleaner."),
    ConfigDef("log.cleaner.backoff.ms", T.LONG, 15000, "Sleep of a cleaner with no log to "
              "clean.", at_least=0),
    ConfigDef("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, "Dirty share of a log before "
              "it is cleaned.", at_least=0, at_most=1),
    ConfigDef("log.cleaner.min.compaction.lag.ms", T.LONG, 0, "Minimum age of a record before "
              "it may be compacted.", at_least=0),
    ConfigDef("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, "Maximum age of a record "
              "before it must be compacted.", at_least=1),
    ConfigDef("log.message.timestamp.type", T.STRING, "CreateTime", "Timestamp type.",
              choices=("CreateTime", "LogAppendTime")),
    ConfigDef("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX,
              "Max age of a record timestamp.", at_least=0),
    ConfigDef("log.message.timestamp.after.max.ms", T.LONG, 3600000,
              "Max future skew of a record timestamp.", at_least=0),
    ConfigDef("log.preallocate", T.BOOLEAN, False, "Preallocate segments (ignored)."),
    ConfigDef("compression.type", T.STRING, "producer", "Compression of stored batches.",
              choices=("producer",)),
    ConfigDef("min.insync.replicas", T.INT, 1, "Minimum ISR for acks=all.", at_least=1),
    ConfigDef("fetch.max.bytes", T.INT, 57671680, "Max bytes of a fetch response.", at_least=0),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, "Unclean election."),
    ConfigDef("cluster.id", T.STRING, None, "Cluster id; generated on first start if unset."),
    ConfigDef("group.min.session.timeout.ms", T.INT, 6000, "Smallest session timeout a group "
              "member may ask for.", at_least=0),
    ConfigDef("group.max.session.timeout.ms", T.INT, 1800000, "Largest session timeout a group "
              "member may ask for.", at_least=0),
    ConfigDef("group.initial.rebalance.delay.ms", T.INT, 3000, "Wait for more members before "
              "the first rebalance of an empty group.", at_least=0),
    ConfigDef("group.consumer.session.timeout.ms", T.INT, 45000, "Session timeout of "
              "members of consumer-protocol groups (KIP-848).", at_least=1),
    ConfigDef("group.consumer.heartbeat.interval.ms", T.INT, 5000, "Heartbeat interval given "
              "to members of consumer-protocol groups (KIP-848).", at_least=1),
    ConfigDef("group.consumer.min.session.timeout.ms", T.INT, 45000, "Smallest "
              "consumer.session.timeout.ms a consumer group may be configured with.",
              at_least=1),
    ConfigDef("group.consumer.max.session.timeout.ms", T.INT, 60000, "Largest "
              "consumer.session.timeout.ms a consumer group may be configured with.",
              at_least=1),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", T.INT, 5000, "Smallest "
              "consumer.heartbeat.interval.ms a consumer group may be configured with.",
              at_least=1),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", T.INT, 15000, "Largest "
              "consumer.heartbeat.interval.ms a consumer group may be configured with.",
              at_least=1),
    ConfigDef("group.consumer.assignors", T.LIST, ["uniform", "range"], "Server-side assignors "
              "of consumer-protocol groups, the first being the default (uniform, range).",
              check=_assignors_check),
    ConfigDef("group.consumer.max.size", T.INT, INT_MAX, "Most members of one "
              "consumer-protocol group.", at_least=1),
    ConfigDef("group.consumer.migration.policy", T.STRING, "bidirectional", "Online "
              "conversion of a non-empty group between the classic and the consumer "
              "protocols (KIP-848): bidirectional, upgrade (classic to consumer only), "
              "downgrade (consumer to classic only) or disabled. Empty groups convert "
              "either way regardless.", check=_migration_policy_check),
    ConfigDef("offsets.topic.num.partitions", T.INT, 50, "Partitions of __consumer_offsets "
              "(fixed once the topic exists).", at_least=1),
    ConfigDef("offsets.topic.segment.bytes", T.INT, 104857600, "Segment size of "
              "__consumer_offsets.", at_least=1),
    ConfigDef("offsets.retention.minutes", T.INT, 10080, "How long committed offsets of an "
              "empty group are kept.", at_least=1),
    ConfigDef("offsets.retention.check.interval.ms", T.LONG, 600000, "Period of the expired "
              "offsets check.", at_least=1),
    ConfigDef("offsets.commit.timeout.ms", T.INT, 5000, "How long a write to "
              "__consumer_offsets waits for every in-sync replica before the commit fails.",
              at_least=1),
    ConfigDef("offset.metadata.max.bytes", T.INT, 4096, "Largest metadata string of a "
              "committed offset.", at_least=0),
    ConfigDef("request.timeout.ms", T.INT, 30000, "How long the transaction coordinator's "
              "writes (__transaction_state, markers) wait for every in-sync replica.",
              at_least=1),
    ConfigDef("transaction.max.timeout.ms", T.INT, 900000, "Largest transaction timeout a "
              "producer may ask for.", at_least=1),
    ConfigDef("transaction.state.log.num.partitions", T.INT, 50, "Partitions of "
              "__transaction_state (fixed once the topic exists).", at_least=1),
    ConfigDef("transaction.state.log.segment.bytes", T.INT, 104857600, "Segment size of "
              "__transaction_state.", at_least=1),
    ConfigDef("transactional.id.expiration.ms", T.INT, 604800000, "Idle time after which a "
              "transactional id is forgotten.", at_least=1),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000,
              "Period of the check that aborts timed-out transactions.", at_least=1),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000,
              "Period of the check that removes expired transactional ids.", at_least=1),
    ConfigDef("transaction.partition.verification.enable", T.BOOLEAN, True, "Before a "
              "leader appends a transactional batch (transactions v1), ask the transaction "
              "coordinator whether the partition is in the open transaction (KIP-890 part 1); "
              "a partition outside it is refused with INVALID_TXN_STATE."),
    ConfigDef("tierd.transaction.version", T.SHORT, 2, "The transaction.version feature "
              "level (KIP-890) a cluster is finalized at while no levels are stored yet "
              "(UpdateFeatures changes them later): 2 lets clients use transactions v2 (an "
              "epoch bump per transaction, partitions added by Produce); 0 keeps every "
              "client on transactions v1.", at_least=0, at_most=2),
    ConfigDef("offsets.topic.replication.factor", T.SHORT, 3, "Replication factor of "
              "__consumer_offsets (cluster mode).", at_least=1),
    ConfigDef("transaction.state.log.replication.factor", T.SHORT, 3, "Replication factor of "
              "__transaction_state (cluster mode).", at_least=1),
    ConfigDef("transaction.state.log.min.isr", T.INT, 2, "min.insync.replicas of "
              "__transaction_state (cluster mode).", at_least=1),
    # Cluster mode (ZooKeeper) and replication.
    ConfigDef("zookeeper.connect", T.STRING, None, "ZooKeeper servers (host:port,...[/chroot]); "
              "set = cluster mode."),
    ConfigDef("zookeeper.session.timeout.ms", T.INT, 18000, "ZooKeeper session timeout.",
              at_least=1),
    ConfigDef("zookeeper.connection.timeout.ms", T.INT, None, "How long to wait for ZooKeeper "
              "at start (default: the session timeout).", at_least=1),
    ConfigDef("num.replica.fetchers", T.INT, 1, "Fetcher tasks per source broker.", at_least=1),
    ConfigDef("replica.lag.time.max.ms", T.LONG, 30000, "A follower not caught up for this "
              "long leaves the ISR.", at_least=1),
    ConfigDef("replica.fetch.max.bytes", T.INT, 1048576, "Bytes per partition a follower "
              "asks for.", at_least=0),
    ConfigDef("replica.fetch.response.max.bytes", T.INT, 10485760, "Bytes per follower "
              "fetch response.", at_least=0),
    ConfigDef("replica.fetch.wait.max.ms", T.INT, 500, "How long a follower fetch waits "
              "for data.", at_least=0),
    ConfigDef("replica.fetch.min.bytes", T.INT, 1, "Bytes a follower fetch waits for.",
              at_least=1),
    ConfigDef("max.incremental.fetch.session.cache.slots", T.INT, 1000, "Fetch sessions "
              "(KIP-227) the broker keeps for incremental fetches of consumers and followers.",
              at_least=0),
    ConfigDef("replica.fetch.backoff.ms", T.INT, 1000, "Backoff after a follower fetch "
              "error.", at_least=0),
    ConfigDef("replica.socket.timeout.ms", T.INT, 30000, "Timeout of a follower fetch.",
              at_least=1),
    ConfigDef("controller.socket.timeout.ms", T.INT, 30000, "Timeout of a controller "
              "request.", at_least=1),
    ConfigDef("controlled.shutdown.enable", T.BOOLEAN, True, "Move leaderships away before "
              "stopping."),
    ConfigDef("controlled.shutdown.max.retries", T.INT, 3, "Controlled shutdown attempts.",
              at_least=0),
    ConfigDef("controlled.shutdown.retry.backoff.ms", T.LONG, 5000, "Backoff between "
              "controlled shutdown attempts.", at_least=0),
    ConfigDef("auto.leader.rebalance.enable", T.BOOLEAN, True, "Move leadership back to "
              "preferred replicas."),
    ConfigDef("leader.imbalance.check.interval.seconds", T.LONG, 300, "Period of the "
              "preferred leader check.", at_least=1),
    ConfigDef("leader.imbalance.per.broker.percentage", T.INT, 10, "Imbalance that triggers "
              "preferred leader election.", at_least=0),
    ConfigDef("tierd.metrics.port", T.INT, 9404, "Prometheus port (0 = any, -1 = off).",
              at_least=-1, at_most=65535),
    ConfigDef("tierd.metrics.host", T.STRING, "127.0.0.1", "Prometheus bind address."),
    ConfigDef("tierd.client.metrics.names", T.LIST, [], "KIP-714 client metrics: the metric "
              "name prefixes every client is asked to push (GetTelemetrySubscriptions), "
              "exported as tierd_client_metric; * = every metric; empty = none (clients "
              "push nothing)."),
    ConfigDef("tierd.client.metrics.interval.ms", T.INT, 30000, "How often clients push "
              "the subscribed metrics (KIP-714 PushIntervalMs).", at_least=100,
              at_most=3600000),
    ConfigDef("telemetry.max.bytes", T.INT, 1048576, "Largest metrics payload of a "
              "PushTelemetry request (KIP-714).", at_least=1),
    ConfigDef("tierd.log.format", T.STRING, "console", "Log output.", choices=("console", "json")),
    ConfigDef("tierd.event.loop.stall.ms", T.INT, 25, "An event-loop task step longer than "
              "this counts as a stall (metric tierd_event_loop_stalls, a warning naming the "
              "task); -1 = not measured.", at_least=-1),
    ConfigDef("tierd.fetch.zero.copy", T.BOOLEAN, True, "Send local log data of fetch "
              "responses with sendfile, from the page cache to the socket, and large remote "
              "record bytes beside the encoded response (off: everything read into memory "
              "and encoded into the response)."),
    ConfigDef("tierd.log.level", T.STRING, "info", "Log level.",
              choices=("debug", "info", "warning", "error")),
]

DEFS: dict[str, ConfigDef] = {d.name: d for d in [*_DEFS, *REMOTE_BROKER_DEFS,
                                                  *SECURITY_DEFS]}

# Keys of Apache Kafka that tierd accepts without a warning and does not use
# (thread pools and socket buffers that have no meaning on trio).
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
    "process.roles",
    "controller.quorum.voters", "controller.listener.names",
})

ENV_PREFIX = "TIERD_"


@dataclass(slots=True)
class BrokerConfig:
    """Typed broker configuration.

    ``values`` holds every known key (defaults filled in); ``explicit`` the
    keys a user set, for DescribeConfigs' STATIC_BROKER_CONFIG source;
    ``raw`` the strings they were set to (what dynamic configs layer over).
    """

    values: dict[str, Any]
    explicit: set[str] = field(default_factory=set)
    raw: dict[str, str] = field(default_factory=dict)
    listeners: Listeners = field(init=False)

    def __post_init__(self) -> None:
        self.listeners = resolve(self.values, self.explicit)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @classmethod
    def load(
        cls,
        path: str | None = None,
        overrides: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """Build the config from a file, the environment and overrides.

        Raises:
            ConfigError: an invalid value, a malformed override, or an
                unreadable file.
        """
        raw: dict[str, str] = {}
        if path:
            raw.update(read_properties(path))
        for name, value in (env if env is not None else os.environ).items():
            if name.startswith(ENV_PREFIX):
                raw[name[len(ENV_PREFIX):].lower().replace("_", ".")] = value
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError("--override", item, "expected key=value")
            raw[key.strip()] = value.strip()
        return cls.from_mapping(raw)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, str], quiet: bool = False) -> BrokerConfig:
        """Typed config from string values; unknown keys are warned about
        (unless ``quiet``: a rebuild with dynamic configs layered over)."""
        values = {name: d.default for name, d in DEFS.items()}
        explicit: set[str] = set()
        for key, text in raw.items():
            d = DEFS.get(key)
            if d is None and key.startswith("listener.name."):
                # listener.name.<listener>.<key>: typed and checked as <key>.
                scoped = DEFS.get(key.split(".", 3)[-1]) if key.count(".") >= 3 else None
                values[key] = scoped.parse(text) if scoped is not None else text
                explicit.add(key)
                continue
            if d is None:
                if not quiet and key not in IGNORED_KAFKA_KEYS and not key.startswith(
                        ("rsm.config.", "rlmm.config.", "listener.name.")):
                    log.warning("unknown config key", key=key)
                values[key] = text
                continue
            values[key] = d.parse(text)
            explicit.add(key)
        _derive(values)
        return cls(values, explicit, {k: str(v) for k, v in raw.items()})

    @property
    def log_dir(self) -> str:
        dirs = self.values["log.dirs"]
        return dirs[0] if dirs else self.values["log.dir"]

    def for_listener(self, listener: str, key: str) -> Any:
        """``key`` for one listener: ``listener.name.<listener>.<key>`` if set
        (typed and checked at load as ``key``), else ``key``."""
        scoped = f"listener.name.{listener.lower()}.{key}"
        return self.values[scoped] if scoped in self.values else self.values.get(key)


def _derive(values: dict[str, Any]) -> None:
    """Fill keys Kafka derives from others (ms from minutes/hours, ids)."""
    if values["log.retention.ms"] is None:
        if values["log.retention.minutes"] is not None:
            values["log.retention.ms"] = values["log.retention.minutes"] * 60_000
        else:
            values["log.retention.ms"] = values["log.retention.hours"] * 3_600_000
    if values["log.roll.ms"] is None:
        values["log.roll.ms"] = values["log.roll.hours"] * 3_600_000
    if values["log.roll.jitter.ms"] is None:
        values["log.roll.jitter.ms"] = values["log.roll.jitter.hours"] * 3_600_000
    if values["log.flush.interval.ms"] is None:
        values["log.flush.interval.ms"] = values["log.flush.scheduler.interval.ms"]
    if values["broker.id"] is not None and values["broker.id"] >= 0:
        values["node.id"] = values["broker.id"]
    if values["zookeeper.connection.timeout.ms"] is None:
        values["zookeeper.connection.timeout.ms"] = values["zookeeper.session.timeout.ms"]


def read_properties(path: str) -> dict[str, str]:
    """Parse a Java-style .properties file (``key=value`` or ``key: value``, # comments).

    Raises:
        ConfigError: the file cannot be read or a line has no separator.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError("--config", path, f"cannot read file: {exc.strerror}") from None
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        positions = [p for p in (text.find("="), text.find(":")) if p > 0]
        if not positions:
            raise ConfigError(f"{path}:{number}", text, "expected key=value")
        cut = min(positions)
        out[text[:cut].strip()] = text[cut + 1 :].strip()
    return out
