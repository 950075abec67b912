"""The ``rlmm.config.*`` settings of the built-in topic-based metadata manager.

Owns which of Kafka's TopicBasedRemoteLogMetadataManagerConfig keys tierd
applies, their defaults and bounds, and the refusal of every other key.

Two keys are tierd's own: ``remote.log.metadata.snapshot.interval.ms`` (how
often snapshots are written and compaction is considered) and
``remote.log.metadata.compaction.min.superseded.records`` (``rlmm_compaction``).

Kafka's manager runs a producer and a consumer of its own, configured by the
``remote.log.metadata.common.client.`` / ``.producer.`` / ``.consumer.``
prefixes. tierd's manager sends Produce and Fetch requests over the
inter-broker listener (its TLS and SASL), so of those client keys only the
ones that shape these requests mean something here: the consumer's long-poll
(``fetch.max.wait.ms``, ``fetch.min.bytes``, ``fetch.max.bytes``,
``max.partition.fetch.bytes``) and ``request.timeout.ms``. Any other key
under ``rlmm.config.`` (a client's ``bootstrap.servers``, security settings,
batching...) would be ignored silently, so it stops the broker at start-up
with a ``ConfigError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from config.defs import INT_MAX, ConfigDef, ConfigError
from config.defs import ConfigType as T
from storage.remote.rlmm_api import DEFAULT_NUM_PARTITIONS, NUM_PARTITIONS_CONFIG
from storage.remote.rlmm_compaction import DEFAULT_MIN_SUPERSEDED

PREFIX = "rlmm.config."
REPLICATION_FACTOR_CONFIG = "remote.log.metadata.topic.replication.factor"
RETENTION_CONFIG = "remote.log.metadata.topic.retention.ms"
CONSUME_WAIT_CONFIG = "remote.log.metadata.consume.wait.ms"
INIT_RETRY_INTERVAL_CONFIG = "remote.log.metadata.initialization.retry.interval.ms"
INIT_RETRY_MAX_TIMEOUT_CONFIG = "remote.log.metadata.initialization.retry.max.timeout.ms"
SNAPSHOT_INTERVAL_CONFIG = "remote.log.metadata.snapshot.interval.ms"
MIN_SUPERSEDED_CONFIG = "remote.log.metadata.compaction.min.superseded.records"
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."

# Kafka's defaults: replication factor 3, consume wait and initialization
# timeout 2 min, initialization retried every 100 ms; the consumer defaults
# fetch.max.wait.ms 500, fetch.min.bytes 1, fetch.max.bytes 50 MiB,
# max.partition.fetch.bytes 1 MiB.
DEFAULT_REPLICATION_FACTOR = 3
DEFAULT_CONSUME_WAIT_MS = 120_000
DEFAULT_INIT_RETRY_INTERVAL_MS = 100
DEFAULT_INIT_RETRY_MAX_TIMEOUT_MS = 120_000
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_FETCH_MIN_BYTES = 1
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_MAX_PARTITION_FETCH_BYTES = 1024 * 1024
# Snapshots every 30 s: Kafka's ConsumerTask synced its committed offsets this often.
DEFAULT_SNAPSHOT_INTERVAL_MS = 30_000


def _retention(value: int) -> str | None:
    return None if value == -1 or value > 0 else "must be -1 (unlimited) or positive"


_TOPIC_DEFS = (
    ConfigDef(PREFIX + NUM_PARTITIONS_CONFIG, T.INT, DEFAULT_NUM_PARTITIONS,
              "Partitions of __remote_log_metadata; fixed once the topic exists (a different "
              "value makes the metadata manager fail to start, naming both counts).",
              at_least=1),
    ConfigDef(PREFIX + REPLICATION_FACTOR_CONFIG, T.SHORT, DEFAULT_REPLICATION_FACTOR,
              "Replication factor of __remote_log_metadata when a broker creates it.",
              at_least=1),
    ConfigDef(PREFIX + RETENTION_CONFIG, T.LONG, -1,
              "retention.ms of __remote_log_metadata when the broker creates it; -1 keeps "
              "every record.", check=_retention),
    ConfigDef(PREFIX + CONSUME_WAIT_CONFIG, T.LONG, DEFAULT_CONSUME_WAIT_MS,
              "How long a metadata write waits to read its own record back before the "
              "write fails (retriable: the copy or deletion is tried again).", at_least=0),
    ConfigDef(PREFIX + INIT_RETRY_INTERVAL_CONFIG, T.LONG, DEFAULT_INIT_RETRY_INTERVAL_MS,
              "Pause between attempts to start the metadata manager (create or find "
              "__remote_log_metadata).", at_least=0),
    ConfigDef(PREFIX + INIT_RETRY_MAX_TIMEOUT_CONFIG, T.LONG, DEFAULT_INIT_RETRY_MAX_TIMEOUT_MS,
              "How long the metadata manager keeps trying to start; then the broker stops.",
              at_least=0),
    ConfigDef(PREFIX + SNAPSHOT_INTERVAL_CONFIG, T.LONG, DEFAULT_SNAPSHOT_INTERVAL_MS,
              "How often the metadata manager writes its snapshot files and committed offsets, "
              "then compacts the metadata partitions this broker leads that are worth it.",
              at_least=1),
    ConfigDef(PREFIX + MIN_SUPERSEDED_CONFIG, T.LONG, DEFAULT_MIN_SUPERSEDED,
              "A metadata partition is compacted (its live state restated at its end, every "
              "record before dropped) once at least this many of its records are superseded and "
              "they outnumber the restatement; -1 never compacts.", at_least=-1),
)

# The client keys that mean something here, and what they do.
_CLIENT_KEYS: dict[str, tuple[T, int | None, int, str]] = {
    "fetch.max.wait.ms": (T.INT, DEFAULT_FETCH_MAX_WAIT_MS, 0,
                          "Longest a metadata long-poll Fetch waits for new records: an idle "
                          "broker sends one such Fetch per metadata partition leader this "
                          "often."),
    "fetch.min.bytes": (T.INT, DEFAULT_FETCH_MIN_BYTES, 0,
                        "Record bytes a metadata long-poll waits for before it answers (0 acts as 1: "
                        "an idle manager must not spin)."),
    "fetch.max.bytes": (T.INT, DEFAULT_FETCH_MAX_BYTES, 1,
                        "Bytes one metadata Fetch may return in all."),
    "max.partition.fetch.bytes": (T.INT, DEFAULT_MAX_PARTITION_FETCH_BYTES, 1,
                                  "Bytes one metadata Fetch may return per partition."),
    "request.timeout.ms": (T.INT, None, 1,
                           "Timeout of the metadata manager's Produce and Fetch requests "
                           "(beyond a long-poll's wait); default: the broker's "
                           "request.timeout.ms."),
}
_PRODUCER_KEYS = ("request.timeout.ms",)


def _client_defs() -> list[ConfigDef]:
    defs = []
    for name, (kind, default, least, doc) in _CLIENT_KEYS.items():
        prefixes = [COMMON_CLIENT_PREFIX, CONSUMER_PREFIX]
        if name in _PRODUCER_KEYS:
            prefixes.append(PRODUCER_PREFIX)
        for prefix in prefixes:
            scope = {COMMON_CLIENT_PREFIX: "(both clients)", CONSUMER_PREFIX: "(consumer)",
                     PRODUCER_PREFIX: "(producer)"}[prefix]
            defs.append(ConfigDef(PREFIX + prefix + name, kind, default, f"{doc} {scope}",
                                  at_least=least, at_most=INT_MAX))
    return defs


CONFIG_DEFS: tuple[ConfigDef, ...] = (*_TOPIC_DEFS, *_client_defs())
_BY_NAME = {d.name: d for d in CONFIG_DEFS}


@dataclass(frozen=True, slots=True)
class RlmmSettings:
    """The applied settings (defaults are Kafka's)."""

    num_partitions: int = DEFAULT_NUM_PARTITIONS
    replication_factor: int = DEFAULT_REPLICATION_FACTOR
    retention_ms: int = -1
    consume_wait_ms: int = DEFAULT_CONSUME_WAIT_MS
    init_retry_interval_ms: int = DEFAULT_INIT_RETRY_INTERVAL_MS
    init_retry_max_timeout_ms: int = DEFAULT_INIT_RETRY_MAX_TIMEOUT_MS
    snapshot_interval_ms: int = DEFAULT_SNAPSHOT_INTERVAL_MS
    compaction_min_superseded_records: int = DEFAULT_MIN_SUPERSEDED
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    fetch_min_bytes: int = DEFAULT_FETCH_MIN_BYTES
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES
    # None: the broker's request.timeout.ms.
    consumer_request_timeout_ms: int | None = None
    producer_request_timeout_ms: int | None = None


def parse_settings(settings: Mapping[str, str]) -> RlmmSettings:
    """The built-in manager's settings from the ``rlmm.config.*`` keys (prefix stripped).

    A consumer or producer key overrides the same common-client key.

    Raises:
        ConfigError: a key the built-in manager does not apply (named with its
            ``rlmm.config.`` prefix), or a value of the wrong type or range.
    """
    values: dict[str, int] = {}
    for key, raw in settings.items():
        definition = _BY_NAME.get(PREFIX + key)
        if definition is None:
            raise ConfigError(PREFIX + key, raw, _why_refused(key))
        values[key] = int(definition.parse(raw))

    def client(name: str, prefix: str) -> int | None:
        common = values.get(COMMON_CLIENT_PREFIX + name, _CLIENT_KEYS[name][1])
        return values.get(prefix + name, common)

    def consumer(name: str) -> int:
        value = client(name, CONSUMER_PREFIX)
        assert value is not None  # every consumer key but request.timeout.ms has a default
        return value

    return RlmmSettings(
        num_partitions=values.get(NUM_PARTITIONS_CONFIG, DEFAULT_NUM_PARTITIONS),
        replication_factor=values.get(REPLICATION_FACTOR_CONFIG, DEFAULT_REPLICATION_FACTOR),
        retention_ms=values.get(RETENTION_CONFIG, -1),
        consume_wait_ms=values.get(CONSUME_WAIT_CONFIG, DEFAULT_CONSUME_WAIT_MS),
        init_retry_interval_ms=values.get(INIT_RETRY_INTERVAL_CONFIG,
                                          DEFAULT_INIT_RETRY_INTERVAL_MS),
        init_retry_max_timeout_ms=values.get(INIT_RETRY_MAX_TIMEOUT_CONFIG,
                                             DEFAULT_INIT_RETRY_MAX_TIMEOUT_MS),
        snapshot_interval_ms=values.get(SNAPSHOT_INTERVAL_CONFIG, DEFAULT_SNAPSHOT_INTERVAL_MS),
        compaction_min_superseded_records=values.get(MIN_SUPERSEDED_CONFIG,
                                                     DEFAULT_MIN_SUPERSEDED),
        fetch_max_wait_ms=consumer("fetch.max.wait.ms"),
        fetch_min_bytes=consumer("fetch.min.bytes"),
        fetch_max_bytes=consumer("fetch.max.bytes"),
        max_partition_fetch_bytes=consumer("max.partition.fetch.bytes"),
        consumer_request_timeout_ms=client("request.timeout.ms", CONSUMER_PREFIX),
        producer_request_timeout_ms=client("request.timeout.ms", PRODUCER_PREFIX),
    )


def _why_refused(key: str) -> str:
    for prefix in (COMMON_CLIENT_PREFIX, PRODUCER_PREFIX, CONSUMER_PREFIX):
        if key.startswith(prefix):
            return ("not applied by tierd's built-in metadata manager: its requests go over "
                    "the inter-broker listener (its security settings), and of the client "
                    "keys only " + ", ".join(sorted(_CLIENT_KEYS)) + " apply")
    return ("not a setting of tierd's built-in metadata manager (known: "
            + ", ".join(d.name for d in _TOPIC_DEFS) + ", and the client prefixes "
            + ", ".join(PREFIX + p for p in (COMMON_CLIENT_PREFIX, PRODUCER_PREFIX,
                                             CONSUMER_PREFIX)) + ")")
