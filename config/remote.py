"""Tiered-storage (KIP-405) configuration keys, broker and topic level.

Names and defaults are Kafka's, except two embedded-default choices of
tierd: the storage manager defaults to the built-in ``filesystem`` manager
(Kafka has no default) and the metadata manager to the built-in topic-based
one (Kafka's TopicBasedRemoteLogMetadataManager).
"""

from __future__ import annotations

from config.defs import LONG_MAX, ConfigDef
from config.defs import ConfigType as T

RSM_PREFIX = "rsm.config."
RLMM_PREFIX = "rlmm.config."

BROKER_DEFS: list[ConfigDef] = [
    ConfigDef("remote.log.storage.system.enable", T.BOOLEAN, False,
              "Enable tiered storage on this broker."),
    ConfigDef("remote.log.storage.manager.class.name", T.STRING, "filesystem",
              "RemoteStorageManager: 'filesystem', 's3', 'gcs', 'azure' or a dotted path to a class."),
    ConfigDef("remote.log.metadata.manager.class.name", T.STRING, "topic-based",
              "RemoteLogMetadataManager: 'topic-based' or a dotted path to a class."),
    ConfigDef("remote.log.manager.copier.thread.pool.size", T.INT, 10,
              "Threads copying segments to the remote tier.", at_least=1),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", T.INT, 10,
              "Threads deleting expired remote segments.", at_least=1),
    ConfigDef("remote.log.manager.task.interval.ms", T.LONG, 30000,
              "Interval of the per-partition copy and expiration tasks.", at_least=1),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", T.LONG, 500,
              "Initial backoff after a failed remote task.", at_least=1),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", T.LONG, 30000,
              "Maximum backoff after failed remote tasks.", at_least=1),
    ConfigDef("remote.log.manager.task.retry.jitter", T.DOUBLE, 0.2,
              "Random jitter applied to backoff.", at_least=0, at_most=0.5),
    ConfigDef("tierd.remote.copy.processes", T.INT, -1,
              "Worker processes (niced) that run segment copies, so a store client's CPU "
              "(boto3) never holds the broker's interpreter; 0 = copy in the broker's "
              "threads; -1 = one for a storage manager whose copies run Python code (S3, GCS, Azure), "
              "none for the directory one (its copies are file copies).",
              at_least=-1),
    ConfigDef("tierd.remote.audit.interval.ms", T.LONG, 3_600_000,
              "How often a leader compares its partition's remote objects with the remote "
              "log metadata (orphans, missing and wrong-sized segments, as metrics); "
              "-1 = never. One listing of the partition's prefix per run.", at_least=-1),
    ConfigDef("tierd.remote.audit.grace.ms", T.LONG, 3_600_000,
              "The audit ignores objects of unknown segments younger than this (a copy in "
              "flight whose metadata this broker has not read yet).", at_least=0),
    ConfigDef("remote.log.reader.threads", T.INT, 10, "Threads reading remote data.",
              at_least=1),
    ConfigDef("remote.log.reader.max.pending.tasks", T.INT, 100,
              "Remote reads queued before new ones are refused.", at_least=1),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", T.LONG, 1073741824,
              "Bytes of remote index files cached on local disk.", at_least=1),
    ConfigDef("remote.fetch.max.wait.ms", T.INT, 500,
              "Longest a fetch waits for remote data (KIP-1018).", at_least=1),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", T.LONG, LONG_MAX,
              "Copy quota (KIP-956).", at_least=1),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", T.LONG, LONG_MAX,
              "Remote fetch quota (KIP-956).", at_least=1),
    ConfigDef("remote.log.manager.copy.quota.window.num", T.INT, 11,
              "Samples in the copy quota window.", at_least=1),
    ConfigDef("remote.log.manager.copy.quota.window.size.seconds", T.INT, 1,
              "Seconds per copy quota sample.", at_least=1),
    ConfigDef("remote.log.manager.fetch.quota.window.num", T.INT, 11,
              "Samples in the remote fetch quota window.", at_least=1),
    ConfigDef("remote.log.manager.fetch.quota.window.size.seconds", T.INT, 1,
              "Seconds per remote fetch quota sample.", at_least=1),
    ConfigDef("follower.fetch.last.tiered.offset.enable", T.BOOLEAN, True,
              "A follower with no local data, or below its leader's local log start, "
              "rebuilds from the remote tier and replicates from the leader's last tiered "
              "offset + 1 (KIP-1023) instead of from the leader's local log start "
              "(KIP-405). On by default here (Kafka: off): it is what makes a rebuilt "
              "replica copy only the untiered tail; false keeps the KIP-405 path."),
    ConfigDef("log.local.retention.ms", T.LONG, -2,
              "Local retention time of tiered topics; -2 = use log.retention.ms.", at_least=-2),
    ConfigDef("log.local.retention.bytes", T.LONG, -2,
              "Local retention size of tiered topics; -2 = use log.retention.bytes.",
              at_least=-2),
]

# topic key -> broker synonym
TOPIC_SYNONYMS: dict[str, str] = {
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}

TOPIC_DEFS: list[ConfigDef] = [
    ConfigDef("remote.storage.enable", T.BOOLEAN, False, "Tier this topic's closed segments."),
    ConfigDef("remote.log.copy.disable", T.BOOLEAN, False,
              "Stop copying new segments; remote data stays readable (KIP-950)."),
    ConfigDef("remote.log.delete.on.disable", T.BOOLEAN, False,
              "Delete remote data when tiering is turned off (KIP-950)."),
    ConfigDef("tierd.remote.metadata.rebuilding", T.BOOLEAN, False,
              "Set by `tierd admin rebuild-metadata --execute` while it republishes lost "
              "remote segment metadata: the leaders neither copy nor expire the topic's "
              "segments and take the log start, tier boundary and leader epochs from the "
              "remote metadata, even below the current log start (followers follow)."),
]


def plugin_configs(values: dict[str, object], prefix: str) -> dict[str, str]:
    """The ``rsm.config.*`` / ``rlmm.config.*`` keys with the prefix stripped."""
    return {k[len(prefix):]: str(v) for k, v in values.items() if k.startswith(prefix)}
