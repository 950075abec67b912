"""Wiring of KIP-405 tiered storage into the broker (when
remote.log.storage.system.enable=true).

Builds the RemoteStorageManager named by remote.log.storage.manager.class.name
(rsm.config.* passed through), the RemoteLogMetadataManager (the built-in
topic-based one over ``__remote_log_metadata``, or a dotted path), and the
RemoteLogManager with the reader pool, the remote lookups and the gauges,
and runs them: the metadata manager starts and catches up before any tiered
partition starts its tasks.

In cluster mode the metadata topic is replicated like any other
(``ClusterMetadataLog``: writes to each metadata partition's leader, reads
from the local replica), partitions start their tasks as LeaderAndIsr makes
them leaders or followers, and the metadata manager starts in the
background once the broker is registered (its topic needs enough live
brokers to be created).
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from config import BrokerConfig, ConfigError
from config.remote import RLMM_PREFIX, RSM_PREFIX, plugin_configs
from protocol.partition import TopicPartition
from replication.cluster import ClusterNode
from replication.internal_topics import REMOTE_LOG_METADATA_TOPIC, InternalTopic
from replication.local_admin import LocalTopicAdmin
from replication.metadata_cache import MetadataCache
from replication.peer import Connector, PeerPool
from replication.remote_metadata_log import ClusterMetadataLog, ReplicaMetadataLog
from replication.replica_manager import ReplicaManager
from replication.topic_admin import TopicAdmin
from storage.log.manager import now_ms
from storage.remote import chunk_cache
from storage.remote.codec_storage import load_storage
from storage.remote.copy_process import ProcessCopier
from storage.remote.gauges import RemoteGaugeCollector
from storage.remote.lookups import RemoteLookups
from storage.remote.manager import RemoteLogManager, build_services
from storage.remote.metadata_cache import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.read_pool import RemoteReadPool
from storage.remote.rlmm import TopicBasedRemoteLogMetadataManager
from storage.remote.rlmm_config import RlmmSettings, parse_settings
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

RLMM_CLASS_KEY = "remote.log.metadata.manager.class.name"


@dataclass(slots=True)
class Tiering:
    rlmm: Any
    manager: RemoteLogManager
    reads: RemoteReadPool
    gauges: RemoteGaugeCollector
    replicas: ReplicaManager
    admin: TopicAdmin

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self._run_rlmm)
            self.replicas.tiering.start_all(self.replicas.hosted())
            if isinstance(self.admin, LocalTopicAdmin):
                self.admin.resume_remote_deletes()
            await nursery.start(self.reads.run)
            nursery.start_soon(self.manager.run)
            nursery.start_soon(self.gauges.run)
            task_status.started()

    async def _run_rlmm(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> None:
        await self.rlmm.run(task_status=task_status)

    async def close(self) -> None:
        await self.rlmm.close()
        for closable in (self.manager.svc.chunks, self.manager.svc.copier):
            if closable is not None:
                closable.close()


def _build_rlmm(config: BrokerConfig, admin: TopicAdmin, metadata: MetadataCache,
                replicas: ReplicaManager, cluster: bool, connector: Connector | None) -> Any:
    settings = plugin_configs(config.values, RLMM_PREFIX)
    class_name = config[RLMM_CLASS_KEY]
    if class_name in ("topic-based", "TopicBasedRemoteLogMetadataManager",
                      "org.apache.kafka.server.log.remote.metadata.storage."
                      "TopicBasedRemoteLogMetadataManager"):
        rlmm = parse_settings(settings)
        topic = InternalTopic(REMOTE_LOG_METADATA_TOPIC, rlmm.num_partitions,
                              rlmm.replication_factor,
                              {"cleanup.policy": "delete", "retention.ms": str(rlmm.retention_ms)},
                              admin, metadata, replicas)
        metadata_log = (_cluster_metadata_log(config, topic, metadata, connector, rlmm)
                        if cluster else ReplicaMetadataLog(topic))
        return TopicBasedRemoteLogMetadataManager(metadata_log, config.log_dir, settings=rlmm)
    module_name, _, attr = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(RLMM_CLASS_KEY, class_name, f"cannot load: {exc}") from None
    return cls(settings)


def _cluster_metadata_log(config: BrokerConfig, topic: InternalTopic, metadata: MetadataCache,
                          connector: Connector | None, rlmm: RlmmSettings) -> ClusterMetadataLog:
    """The metadata topic over the cluster: Produce and catch-up reads on one
    set of connections, the long-polls on another (the manager's producer and
    consumer in Kafka)."""
    node_id = config["node.id"]
    broker_timeout_ms = config["request.timeout.ms"]
    produce_timeout_ms = rlmm.producer_request_timeout_ms or broker_timeout_ms
    poll_timeout_ms = rlmm.consumer_request_timeout_ms or broker_timeout_ms
    return ClusterMetadataLog(
        topic, node_id, metadata,
        PeerPool(metadata, f"rlmm-{node_id}", produce_timeout_ms, connector), produce_timeout_ms,
        PeerPool(metadata, f"rlmm-consumer-{node_id}", poll_timeout_ms, connector),
        poll_timeout_ms)


def build_tiering(config: BrokerConfig, admin: TopicAdmin, metadata: MetadataCache,
                  replicas: ReplicaManager, registry: Any, cluster: bool = False,
                  connector: Connector | None = None) -> Tiering | None:
    """The tiering stack, or None when the broker has tiering off (in cluster
    mode, ``connector`` secures its connections to other brokers).

    Raises:
        ConfigError: an unloadable or misconfigured manager.
    """
    if not config["remote.log.storage.system.enable"]:
        return None
    rsm_settings = plugin_configs(config.values, RSM_PREFIX)
    rsm_class = config["remote.log.storage.manager.class.name"]
    if rsm_class == "filesystem" and "dir" not in rsm_settings:
        if cluster:
            # A default beside each broker's log dir would give every broker a
            # private tier: a new leader would find none of the old leader's
            # segments, and the RLMM would list segments no broker can read.
            raise ConfigError(RSM_PREFIX + "dir", None,
                              "a cluster needs one remote tier that every broker shares: set "
                              "it to a directory all brokers mount, or use another "
                              "remote.log.storage.manager.class.name (s3)")
        rsm_settings["dir"] = os.path.abspath(config.log_dir.rstrip("/") + "-remote")
    rsm_settings, chunk_settings = chunk_cache.split_settings(rsm_settings)
    rsm = load_storage(rsm_class, rsm_settings)
    rlmm = _build_rlmm(config, admin, metadata, replicas, cluster, connector)
    services = build_services(config, config.log_dir, rsm, rlmm, registry, now_ms,
                              chunk_settings)
    processes = copy_processes(config["tierd.remote.copy.processes"], rsm)
    if processes:
        services.copier = ProcessCopier(
            rsm_class, rsm_settings, processes,
            logging.getLevelName(str(config["tierd.log.level"]).upper()))
    manager = RemoteLogManager(config, services)
    reads = RemoteReadPool(services, manager)
    gauges = RemoteGaugeCollector(manager.partitions, services)
    registry.register(gauges)
    replicas.tiering.turn_on(manager, reads, RemoteLookups(services, manager))

    if isinstance(admin, LocalTopicAdmin):
        manager.on_partition_removed = admin.remote_delete_done
    log.info("tiered storage on", storage_manager=rsm_class,
             metadata_manager=config[RLMM_CLASS_KEY],
             remote_dir=rsm_settings.get("dir"), bucket=rsm_settings.get("bucket"))
    return Tiering(rlmm, manager, reads, gauges, replicas, admin)


def wire_cluster(tiering: Tiering, node: ClusterNode) -> None:
    """Cluster mode with the built-in metadata manager: it follows the metadata
    partitions this broker leads whole; the controller marks deleted tiered
    topics through it, and the remote log manager removes those marked in
    the metadata partitions led here (``replication.controller_remote_deletes``)."""
    rlmm = tiering.rlmm
    if not isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
        return
    node_id = node.node_id
    metadata = node.metadata

    def on_leadership(tp: TopicPartition, leader: bool) -> None:
        if tp[0] == REMOTE_LOG_METADATA_TOPIC:
            rlmm.on_metadata_partition_leadership(tp[1], leader)

    async def mark(partitions: list[TopicIdPartition]) -> None:
        for tip in partitions:
            await rlmm.mark_partition_deleted(RemotePartitionDeleteMetadata(
                tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, now_ms(), node_id))

    def topic_deleted(tip: TopicIdPartition) -> bool:
        # Not before the first UpdateMetadata (no topic is known yet).
        return metadata.controller_id >= 0 and metadata.topic_by_id(tip.topic_id) is None

    node.on_leadership.append(on_leadership)
    node.controller.mark_remote_deletes = mark
    tiering.manager.topic_deleted = topic_deleted


def copy_processes(setting: int, rsm: Any) -> int:
    """Copy worker processes for ``rsm``: the setting, or for -1 one if the
    storage manager's copies run Python code (``COPIES_RUN_PYTHON``), else none."""
    if setting >= 0:
        return setting
    return 1 if getattr(rsm, "COPIES_RUN_PYTHON", False) else 0
