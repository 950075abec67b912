"""Generate docs/configuration.md and docs/metrics.md from the code.

Run from the repository root after changing a config definition or a metric::

    python scripts/gen_docs.py          # rewrite both files
    python scripts/gen_docs.py --check  # exit 1 if either file is stale

``tests/test_docs_current.py`` fails while either file differs from what
this script renders, so the docs cannot drift from the code.

Where the content comes from:

* configuration: the ``ConfigDef`` lists (``config.broker.DEFS``, the topic
  keys of ``config.topic``, the storage managers' ``CONFIG_DEFS``), their doc
  strings, defaults and validation bounds (the ``rlmm.config.*`` keys of the
  built-in metadata manager: ``storage.remote.rlmm_config``). Which keys Apache Kafka also has
  is recorded below (``KAFKA_KEYS`` / ``TIERD_KEYS``); a key in neither set
  stops the generator, so a new key has to be classified.
* metrics: the broker's metric objects are built (without a broker: the
  collectors are fed empty or placeholder state) and their registries
  collected, exactly as the Prometheus endpoint collects them. Names, types,
  help texts and labels are what the endpoint serves; ``METRIC_NOTES`` adds
  an operator's remark to some of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from config.defs import INT_MAX, LONG_MAX, ConfigDef  # noqa: E402
from storage.remote import rlmm_config as _rlmm_config  # noqa: E402

CONFIGURATION_MD = ROOT / "docs" / "configuration.md"
METRICS_MD = ROOT / "docs" / "metrics.md"

# -- configuration ---------------------------------------------------------------

# Keys tierd accepts that Apache Kafka (broker, topic, or its built-in
# TopicBasedRemoteLogMetadataManager / LocalTieredStorage plugins) has under the
# same name.
KAFKA_KEYS = frozenset("""
max.incremental.fetch.session.cache.slots broker.rack replica.selector.class
node.id broker.id listeners advertised.listeners listener.security.protocol.map
inter.broker.listener.name security.inter.broker.protocol ssl.keystore.type
ssl.keystore.location ssl.keystore.password ssl.key.password ssl.keystore.key
ssl.keystore.certificate.chain ssl.truststore.type ssl.truststore.location
ssl.truststore.password ssl.truststore.certificates ssl.client.auth ssl.enabled.protocols
ssl.protocol ssl.cipher.suites ssl.endpoint.identification.algorithm
ssl.principal.mapping.rules sasl.enabled.mechanisms sasl.mechanism.inter.broker.protocol
sasl.jaas.config connection.failed.authentication.delay.ms max.connections
max.connections.per.ip max.connections.per.ip.overrides max.connection.creation.rate
connections.max.idle.ms quota.window.num quota.window.size.seconds
authorizer.class.name super.users allow.everyone.if.no.acl.found connections.max.reauth.ms log.dirs log.dir num.partitions
default.replication.factor auto.create.topics.enable delete.topic.enable message.max.bytes
socket.request.max.bytes max.request.partition.size.limit log.segment.bytes log.roll.ms log.roll.hours log.roll.jitter.ms
log.roll.jitter.hours log.index.size.max.bytes log.index.interval.bytes
log.flush.interval.messages log.flush.interval.ms log.flush.scheduler.interval.ms
log.flush.offset.checkpoint.interval.ms log.retention.ms log.retention.minutes
log.retention.hours log.retention.bytes log.retention.check.interval.ms
log.segment.delete.delay.ms log.cleanup.policy log.cleaner.delete.retention.ms
log.cleaner.enable log.cleaner.threads log.cleaner.dedupe.buffer.size log.cleaner.io.buffer.size
log.cleaner.io.buffer.load.factor log.cleaner.io.max.bytes.per.second log.cleaner.backoff.ms
log.cleaner.min.cleanable.ratio log.cleaner.min.compaction.lag.ms log.cleaner.max.compaction.lag.ms
log.message.timestamp.type log.message.timestamp.before.max.ms
log.message.timestamp.after.max.ms log.preallocate compression.type min.insync.replicas
fetch.max.bytes unclean.leader.election.enable group.min.session.timeout.ms
group.max.session.timeout.ms group.initial.rebalance.delay.ms offsets.topic.num.partitions
group.consumer.session.timeout.ms group.consumer.heartbeat.interval.ms group.consumer.assignors
group.consumer.max.size group.consumer.min.session.timeout.ms group.consumer.max.session.timeout.ms
group.consumer.min.heartbeat.interval.ms group.consumer.max.heartbeat.interval.ms
group.consumer.migration.policy
offsets.topic.segment.bytes offsets.retention.minutes offsets.retention.check.interval.ms
offsets.commit.timeout.ms offset.metadata.max.bytes request.timeout.ms
transaction.max.timeout.ms transaction.state.log.num.partitions transaction.partition.verification.enable
transaction.state.log.segment.bytes transactional.id.expiration.ms
transaction.abort.timed.out.transaction.cleanup.interval.ms
transaction.remove.expired.transaction.cleanup.interval.ms offsets.topic.replication.factor
transaction.state.log.replication.factor transaction.state.log.min.isr zookeeper.connect
zookeeper.session.timeout.ms zookeeper.connection.timeout.ms num.replica.fetchers
replica.lag.time.max.ms replica.fetch.max.bytes replica.fetch.response.max.bytes
replica.fetch.wait.max.ms replica.fetch.min.bytes replica.fetch.backoff.ms
replica.socket.timeout.ms controller.socket.timeout.ms controlled.shutdown.enable
controlled.shutdown.max.retries controlled.shutdown.retry.backoff.ms
auto.leader.rebalance.enable leader.imbalance.check.interval.seconds
leader.imbalance.per.broker.percentage telemetry.max.bytes
remote.log.storage.system.enable remote.log.storage.manager.class.name
remote.log.metadata.manager.class.name remote.log.manager.copier.thread.pool.size
remote.log.manager.expiration.thread.pool.size remote.log.manager.task.interval.ms
remote.log.manager.task.retry.backoff.ms remote.log.manager.task.retry.backoff.max.ms
remote.log.manager.task.retry.jitter remote.log.reader.threads
remote.log.reader.max.pending.tasks remote.log.index.file.cache.total.size.bytes
remote.fetch.max.wait.ms remote.log.manager.copy.max.bytes.per.second
remote.log.manager.fetch.max.bytes.per.second remote.log.manager.copy.quota.window.num
remote.log.manager.copy.quota.window.size.seconds remote.log.manager.fetch.quota.window.num
remote.log.manager.fetch.quota.window.size.seconds log.local.retention.ms
follower.fetch.last.tiered.offset.enable
log.local.retention.bytes
cleanup.policy delete.retention.ms file.delete.delay.ms flush.messages flush.ms
follower.replication.throttled.replicas index.interval.bytes
leader.replication.throttled.replicas local.retention.bytes local.retention.ms
max.compaction.lag.ms max.message.bytes message.downconversion.enable
message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.type
min.cleanable.dirty.ratio min.compaction.lag.ms preallocate remote.log.copy.disable
remote.log.delete.on.disable remote.storage.enable retention.bytes retention.ms
segment.bytes segment.index.bytes segment.jitter.ms segment.ms
rsm.config.dir
""".split()) | frozenset(d.name for d in _rlmm_config.CONFIG_DEFS)

# Keys only tierd has (besides every ``tierd.*`` key). Kafka keeps the cluster
# id in meta.properties, not in server.properties; the S3, GCS and Azure
# settings belong to tierd's own storage managers (the GCS and Azure names are
# the Aiven plugin's, without its ``storage.`` level); the codec's follow the
# names of Aiven's tiered-storage plugin. The two rlmm.config.* keys of
# compaction are tierd's own (this set is consulted before KAFKA_KEYS, which
# takes every key of storage.remote.rlmm_config).
TIERD_KEYS = frozenset("""
cluster.id
rsm.config.bucket rsm.config.prefix rsm.config.region rsm.config.endpoint.url
rsm.config.path.style.access rsm.config.upload.part.size rsm.config.retry.max.attempts
rsm.config.connect.timeout.ms rsm.config.read.timeout.ms rsm.config.max.connections
rsm.config.fetch.chunk.size rsm.config.fetch.chunk.cache.size rsm.config.fetch.prefetch.chunks
rsm.config.fetch.prefetch.threads rsm.config.fetch.chunk.cache.disk.size
rsm.config.fetch.prefetch.max.chunks
rsm.config.gcs.bucket.name rsm.config.gcs.endpoint.url rsm.config.gcs.credentials.default
rsm.config.gcs.credentials.json rsm.config.gcs.credentials.path
rsm.config.gcs.resumable.upload.chunk.size rsm.config.gcs.key.prefix
rsm.config.gcs.retry.max.attempts rsm.config.gcs.connect.timeout.ms rsm.config.gcs.read.timeout.ms
rsm.config.azure.container.name rsm.config.azure.account.name rsm.config.azure.account.key
rsm.config.azure.sas.token rsm.config.azure.connection.string rsm.config.azure.endpoint.url
rsm.config.azure.upload.block.size rsm.config.azure.key.prefix rsm.config.azure.retry.max.attempts
rsm.config.azure.connect.timeout.ms rsm.config.azure.read.timeout.ms
rsm.config.compression.enabled rsm.config.compression.heuristic.enabled rsm.config.chunk.size
rsm.config.encryption.enabled rsm.config.encryption.key.pair.id rsm.config.encryption.key.pairs
rsm.config.encryption.key.pairs.<id>.public.key.file
rsm.config.encryption.key.pairs.<id>.private.key.file
rlmm.config.remote.log.metadata.snapshot.interval.ms
rlmm.config.remote.log.metadata.compaction.min.superseded.records
""".split())

# One-line meanings of keys whose definition has no doc string.
DESCRIPTIONS: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    type: str
    default: str
    scope: str
    compat: str
    meaning: str
    valid: str


def _compat(key: str) -> str:
    if key.startswith("tierd.") or key in TIERD_KEYS:
        return "tierd-specific"
    if key in KAFKA_KEYS:
        return "Kafka-compatible"
    raise SystemExit(f"gen_docs: classify {key!r}: add it to KAFKA_KEYS (Kafka has a key of "
                     "that name) or TIERD_KEYS in scripts/gen_docs.py")


def _number(value: float) -> str:
    if value == LONG_MAX:
        return f"{LONG_MAX} (Long.MAX_VALUE)"
    if value == INT_MAX:
        return f"{INT_MAX} (Integer.MAX_VALUE)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default(d: ConfigDef, effective: Any = None) -> str:
    """The default as written; an unset key that the broker derives from
    others (``config.broker._derive``) shows the derived value."""
    if d.default is None:
        if effective is None:
            return "(unset)"
        return f"{_default(_with_default(d, effective))} (derived)"
    if isinstance(d.default, (int, float)) and not isinstance(d.default, bool):
        return _number(d.default)
    text = d.render(d.default)
    return '""' if text == "" else text


def _with_default(d: ConfigDef, default: Any) -> ConfigDef:
    return ConfigDef(d.name, d.type, default, d.doc, d.at_least, d.at_most, d.choices,
                     d.check, d.sensitive)


def _valid(d: ConfigDef) -> str:
    parts = []
    if d.choices is not None:
        parts.append("one of " + ", ".join(d.choices))
    if d.at_least is not None and d.at_most is not None:
        parts.append(f"{_number(d.at_least)} .. {_number(d.at_most)}")
    elif d.at_least is not None:
        parts.append(f">= {_number(d.at_least)}")
    elif d.at_most is not None:
        parts.append(f"<= {_number(d.at_most)}")
    if d.check is not None:
        parts.append("checked")
    return "; ".join(parts)


def _meaning(d: ConfigDef) -> str:
    doc = " ".join(d.doc.split()) if d.doc else ""
    if doc:
        return doc
    if d.name in DESCRIPTIONS:
        return DESCRIPTIONS[d.name]
    raise SystemExit(f"gen_docs: {d.name!r} has no doc string; add a line to DESCRIPTIONS")


def _row(d: ConfigDef, scope: str, default: str | None = None, note: str = "",
         effective: Any = None) -> Row:
    meaning = _meaning(d) + (f" {note}" if note else "")
    return Row(d.name, d.type.name.lower(),
               default if default is not None else _default(d, effective),
               scope, _compat(d.name), meaning, _valid(d))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _table(rows: Iterable[Row]) -> str:
    out = ["| Key | Type | Default | Scope | Compatibility | Valid values | Meaning |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r.key}` | {r.type} | {_code(_cell(r.default))} | {r.scope} | "
                   f"{r.compat} | {_cell(r.valid)} | {_cell(r.meaning)} |")
    return "\n".join(out)


def config_sections() -> list[tuple[str, str, list[Row]]]:
    """(title, introduction, rows) of every group of keys."""
    from config.broker import DEFS as BROKER_DEFS
    from config.broker import BrokerConfig
    from config.remote import BROKER_DEFS as REMOTE_BROKER_DEFS
    from config.topic import SYNONYMS, topic_def, topic_keys
    from storage.remote import azure, chunk_cache, codec_storage, filesystem, gcs, s3

    topic_by_synonym: dict[str, list[str]] = {}
    for topic_key, broker_key in SYNONYMS.items():
        topic_by_synonym.setdefault(broker_key, []).append(topic_key)
    topic_names = set(topic_keys())
    # What a broker with an empty configuration runs with (derived keys filled in).
    effective = BrokerConfig.from_mapping({}).values

    def broker_row(d: ConfigDef) -> Row:
        overrides = sorted(topic_by_synonym.get(d.name, []))
        scope = "both" if d.name in topic_names else "broker"
        note = ""
        others = [k for k in overrides if k != d.name]
        if others:
            note = "Per-topic override: " + ", ".join(f"`{k}`" for k in others) + "."
        return _row(d, scope, note=note, effective=effective[d.name])

    remote_names = {d.name for d in REMOTE_BROKER_DEFS}
    core = [broker_row(d) for d in BROKER_DEFS.values()
            if not d.name.startswith("tierd.") and d.name not in remote_names]
    remote = [broker_row(d) for d in BROKER_DEFS.values() if d.name in remote_names]
    own = [broker_row(d) for d in BROKER_DEFS.values() if d.name.startswith("tierd.")]

    topic_rows = []
    for key in topic_keys():
        d = topic_def(key)
        assert d is not None, key
        synonym = SYNONYMS.get(key)
        if synonym is None:
            topic_rows.append(_row(d, "topic"))
        else:
            scope = "both" if synonym == key else "topic"
            base = _default(d, effective[synonym]).removesuffix(" (derived)")
            topic_rows.append(_row(d, scope, default=f"{base} (from {synonym})"))

    rsm_rows = [_row(d, "broker", note="(`filesystem` manager.)")
                for d in filesystem.CONFIG_DEFS]
    rsm_rows += [_row(d, "broker", note="(`s3` manager.)") for d in s3.CONFIG_DEFS]
    rsm_rows += [_row(d, "broker", note="(`gcs` manager.)") for d in gcs.CONFIG_DEFS]
    rsm_rows += [_row(d, "broker", note="(`azure` manager.)") for d in azure.CONFIG_DEFS]
    rsm_rows += [_row(d, "broker", note="(Remote reads, any manager.)")
                 for d in chunk_cache.CONFIG_DEFS]
    rsm_rows += [_row(d, "broker", note="(Compression/encryption, any manager.)")
                 for d in [*codec_storage.CONFIG_DEFS, *codec_storage.KEY_FILE_DEFS]]

    rlmm_rows = [_row(d, "broker") for d in _rlmm_config.CONFIG_DEFS]

    return [
        ("Broker keys", "Set in server.properties, as `TIERD_<KEY>` environment variables "
         "or with `--override`. Scope `both`: the topic key of the same name overrides "
         "it per topic.", core),
        ("Tiered storage (KIP-405) broker keys", "Read when the broker starts; "
         "`remote.log.storage.system.enable=true` turns tiering on for the broker, "
         "`remote.storage.enable=true` for a topic.", remote),
        ("tierd.* keys", "tierd's own broker keys (logging and the metrics endpoint).", own),
        ("Topic keys", "Set with CreateTopics / AlterConfigs / IncrementalAlterConfigs (for "
         "example `tierd admin topics create --config` or `tierd admin topics "
         "alter-configs --set`). A key without a topic value takes the value of the broker "
         "key named in its default column.", topic_rows),
        ("Remote storage manager keys (rsm.config.*)", "Passed, prefix stripped, to the "
         "storage manager named by `remote.log.storage.manager.class.name`. With the "
         "`filesystem` manager and no `rsm.config.dir`, a single broker uses "
         "`<log dir>-remote`; a broker of a cluster (`zookeeper.connect` set) refuses to "
         "start, since each broker would get a private tier that no other broker can read. "
         "Keys the chosen manager does not know are logged (names only) and ignored.",
         rsm_rows),
        ("Remote log metadata manager keys (rlmm.config.*)", "Read by the built-in "
         "topic-based metadata manager (`remote.log.metadata.manager.class.name="
         "topic-based`), which refuses to start on any other `rlmm.config.*` key (Kafka's "
         "client keys it does not apply, among them security settings: its requests use "
         "the inter-broker listener); a custom manager class receives every "
         "`rlmm.config.*` key, prefix stripped.", rlmm_rows),
    ]


def render_configuration() -> str:
    from config.broker import IGNORED_KAFKA_KEYS

    parts = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from the config definitions; do not edit. -->",
        "",
        "Every key tierd reads. Keys use Apache Kafka's names and defaults where Kafka has "
        "the key (*Kafka-compatible*); *tierd-specific* keys exist only here. Precedence, "
        "lowest first: default, the `--config` properties file, `TIERD_<KEY>` environment "
        "variables (dots as underscores), `--override key=value`. An unknown key is logged "
        "as a warning; an invalid value stops the broker with a message naming the key, the "
        "value and what is allowed.",
        "",
        "*Scope*: `broker` (server.properties), `topic` (per-topic config) or `both` (a "
        "broker key and a topic key of the same name). *Valid values* lists the bounds the "
        "broker enforces; `checked` means a format check (for example `NAME://host:port`). "
        "*(derived)*: the key has no default of its own; unset, the broker computes it from "
        "another key (`log.roll.ms` from `log.roll.hours`, `log.retention.ms` from "
        "`log.retention.minutes` or `log.retention.hours`, ...). *(from key)* on a topic key: "
        "its default is that broker key's value.",
        "",
    ]
    for title, intro, rows in config_sections():
        parts += [f"## {title}", "", intro, "", _table(rows), ""]
    parts += [
        "## Accepted and ignored Kafka keys",
        "",
        "These Kafka broker keys are accepted without a warning and have no effect "
        "(thread pools, socket buffers and KRaft settings that mean nothing to tierd):",
        "",
        ", ".join(f"`{k}`" for k in sorted(IGNORED_KAFKA_KEYS)) + ".",
        "",
        *_dynamic_section(),
    ]
    return "\n".join(parts)


def _dynamic_section() -> list[str]:
    from config import dynamic

    def keys(names: Iterable[str]) -> str:
        return ", ".join(f"`{k}`" for k in sorted(names)) + "."

    return [
        "## Dynamic broker keys",
        "",
        "Changed on running brokers, as with Kafka: `kafka-configs --bootstrap-server ... "
        "--entity-type brokers --entity-name <id> | --entity-default --alter --add-config "
        "k=v` (or `tierd admin configs alter`). A per-broker value overrides the cluster "
        "default, which overrides server.properties. They are kept in ZooKeeper "
        "(`/config/brokers/<id>`, `/config/brokers/<default>`) in cluster mode and in "
        "`dynamic-broker-configs.json` of the log directory on a single node. Keys not "
        "listed here are refused (INVALID_REQUEST) rather than accepted and ignored.",
        "",
        "Applied at once: " + keys(dynamic.LIVE),
        "",
        "Per listener (`listener.name.<listener>.<key>`; the keystore and truststore keys "
        "per broker only, for new TLS connections): " + keys(dynamic.LISTENER_LIVE),
        "",
        "Dynamic in Kafka but refused by tierd (set them in server.properties and "
        "restart): " + keys(dynamic.NOT_LIVE),
        "",
    ]


# -- metrics -----------------------------------------------------------------------

# An operator's remark appended to a metric's help text, by family name.
METRIC_NOTES: dict[str, str] = {
    "tierd_error_responses": "`error` is Kafka's error code name.",
    "tierd_protocol_errors": "`reason` is e.g. `invalid_request`, `handler_error` (a "
                             "request failed inside the broker; see its log).",
    "tierd_log_size_bytes": "Local bytes only; the remote part is RemoteLogSizeBytes.",
    "tierd_client_metric": "Set tierd.client.metrics.names to subscribe clients. At most "
                           "10000 series over all clients (the rest are counted in "
                           "tierd_client_metrics_dropped_points); a client instance's series "
                           "disappear 3 push intervals (at least 60 s) after its last request.",
    "RemoteCopyLagBytes": "Grows while copies fail; local retention cannot free these bytes.",
    "RemoteCopyLagSegments": "Grows while copies fail; local retention cannot free these "
                             "segments.",
    "RemoteCopyErrorsPerSec": "Rises during a remote storage outage.",
    "RemoteFetchErrorsPerSec": "Includes reads refused because the reader queue was full.",
    "tierd_OfflinePartitionsCount": "Non-zero means some partitions cannot be read or "
                                    "written.",
    "tierd_FollowerPartitionState": "A partition stuck in BuildingRemoteLogAuxState is "
                                    "rebuilding from the remote tier.",
}


@dataclass(frozen=True, slots=True)
class MetricRow:
    family: str
    exported: str
    type: str
    labels: tuple[str, ...]
    help: str
    scope: str


def _exported(name: str, kind: str) -> str:
    if kind == "counter":
        return f"{name}_total"
    if kind == "histogram":
        return f"{name}_bucket, {name}_sum, {name}_count"
    return name


def _families(registry: Any) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """name -> (type, labels, help) of what ``registry`` serves."""
    out: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for metric in registry.collect():
        labels: list[str] = list(getattr(metric, "_labelnames", ()) or ())
        for sample in metric.samples:
            for key in sample.labels:
                if key != "le" and key not in labels:
                    labels.append(key)
        out[metric.name] = (metric.type, tuple(labels), metric.documentation)
    return out


def _touch_labelled(*holders: Any) -> None:
    """Create one child of every labelled metric so its labels are collected."""
    from prometheus_client.metrics import MetricWrapperBase

    for holder in holders:
        values = holder if isinstance(holder, list) else list(vars(holder).values())
        for value in values:
            names = getattr(value, "_labelnames", ())
            if isinstance(value, MetricWrapperBase) and names:
                value.labels(*["-"] * len(names))


def exported_metrics() -> list[MetricRow]:
    """Every metric family the broker's endpoint can serve, with when it is there.

    Built like ``broker.app``: ``BrokerMetrics`` with the log sizes and the
    replication collector (single-node: no controller, no fetchers), the
    tiering metrics when tiering is on, and the cluster-mode collector.
    """
    from prometheus_client import CollectorRegistry

    from broker.client_telemetry import ClientTelemetry, Subscription
    from broker.gc_freeze import GcFreezer
    from broker.loop_monitor import LoopMonitor
    from broker.metrics import BrokerMetrics
    from replication.follower_state import FollowerState
    from replication.metrics import ControllerStats, ReplicaStats, ReplicationCollector
    from storage.remote.gauges import RemoteGaugeCollector
    from storage.remote.metrics import RemoteMetrics

    def replicas() -> Any:
        from replication.fetch_session import FetchSessionCache

        return SimpleNamespace(stats=ReplicaStats(), hosted=lambda: [], node_id=0,
                               fetch_sessions=FetchSessionCache(0))

    broker = BrokerMetrics()
    broker.add_log_sizes(lambda: [("topic", 0, 0)])
    LoopMonitor(0.025, broker.registry).stalls.labels("task")
    GcFreezer(broker.registry)
    ClientTelemetry(Subscription((), 30000), 1, broker.registry)
    _touch_labelled(broker)
    from config import BrokerConfig
    from storage.log.cleaner import LogCleaner

    broker.registry.register(LogCleaner(BrokerConfig.from_mapping({}), {}, lambda: 0))
    base = _families(broker.registry)

    single_registry = CollectorRegistry()
    single = ReplicationCollector(replicas(), None)
    single.snapshot()
    single_registry.register(single)
    single_names = _families(single_registry)

    remote_registry = CollectorRegistry()
    remote = RemoteMetrics(remote_registry)
    remote_registry.register(RemoteGaugeCollector({}, SimpleNamespace()))
    _touch_labelled(remote)
    tiered = _families(remote_registry)

    cluster_registry = CollectorRegistry()
    controller = SimpleNamespace(active=True, stats=ControllerStats(),
                                 offline_partition_count=lambda: 0)
    follower = ReplicationCollector(
        replicas(), controller,
        lambda: [(("topic", 0), FollowerState.BUILDING_REMOTE_AUX_STATE)])
    follower.snapshot()
    cluster_registry.register(follower)
    cluster = _families(cluster_registry)

    rows: list[MetricRow] = []
    created = {n[: -len("_created")] for group in (base, single_names, tiered, cluster)
               for n in group if n.endswith("_created")}

    def add(group: dict[str, tuple[str, tuple[str, ...], str]], scope: str,
            skip: Iterable[str] = ()) -> None:
        for name, (kind, labels, doc) in group.items():
            if name in skip or (name.endswith("_created") and name[:-8] in created):
                continue
            note = METRIC_NOTES.get(name)
            text = doc.rstrip(".") + "." + (f" {note}" if note else "")
            rows.append(MetricRow(name, _exported(name, kind), kind, labels, text, scope))

    add(base, "always")
    add(single_names, "always")
    add(tiered, "tiering on")
    add(cluster, "cluster mode", skip=single_names)
    unknown = set(METRIC_NOTES) - {r.family for r in rows}
    if unknown:
        raise SystemExit(f"gen_docs: METRIC_NOTES names unknown metrics: {sorted(unknown)}")
    return rows


def render_metrics() -> str:
    rows = exported_metrics()
    parts = [
        "# Metrics reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from the broker's metric objects; "
        "do not edit. -->",
        "",
        "The broker serves Prometheus metrics on `http://<tierd.metrics.host>:"
        "<tierd.metrics.port>/metrics` (default `127.0.0.1:9404`; `tierd.metrics.port=-1` "
        "turns the endpoint off).",
        "",
        "Names: tierd's own metrics start with `tierd_`; replication metrics are "
        "`tierd_<Kafka's name>`; tiered-storage metrics carry the KIP-405 / KIP-963 names "
        "as they are, without a prefix. Kafka's meters (`...PerSec`) are Prometheus "
        "counters: take `rate()` of the `_total` series for Kafka's per-second rate. Each "
        "counter and histogram also has a `<name>_created` gauge (its creation time), as "
        "prometheus_client exports it. A labelled counter shows no series until the first "
        "event with those labels.",
        "",
        "*When*: `always`; `tiering on` (`remote.log.storage.system.enable=true`); "
        "`cluster mode` (`zookeeper.connect` set). Gauges computed from partition state are "
        "refreshed on the event loop every second (replication, tiered storage, log "
        "sizes) and scrapes read that copy; the remote pools' idle percentages are averages "
        "over the last 30 seconds, whatever the scrape interval.",
        "",
        "| Exported name | Type | Labels | When | Meaning |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        names = ", ".join(f"`{n.strip()}`" for n in r.exported.split(","))
        labels = ", ".join(f"`{label}`" for label in r.labels) or "-"
        parts.append(f"| {names} | {r.type} | {labels} | {r.scope} | {_cell(r.help)} |")
    parts.append("")
    return "\n".join(parts)


# -- main ------------------------------------------------------------------------

def rendered() -> dict[Path, str]:
    return {CONFIGURATION_MD: render_configuration(), METRICS_MD: render_metrics()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date; run python scripts/gen_docs.py",
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
