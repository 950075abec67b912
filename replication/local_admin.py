"""The topic writer of a single-node broker.

Keeps topics in ``replication.metadata.LocalMetadataStore`` (a file in the
log directory), and after every change it persisted, applies it here and
now: the metadata cache is fed (this node is the only broker, the
controller, and the leader of every partition in the topic's leader epoch
with ISR {this node}), and the ReplicaManager opens, reconfigures or drops
the logs. In cluster mode the controller does the same across brokers.

Deleting a tiered topic records its partitions as owing a remote cleanup in
the store until the RemoteLogManager reports each one done, so the cleanup
resumes after a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from config import BrokerConfig, TopicConfigs
from replication.internal_topics import InternalTopics
from replication.metadata import LocalMetadataStore, TopicInfo
from replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager, now_ms
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)


class LocalTopicAdmin:
    def __init__(self, config: BrokerConfig, store: LocalMetadataStore,
                 metadata: MetadataCache, replicas: ReplicaManager) -> None:
        self.config = config
        self.store = store
        self.metadata = metadata
        self.replicas = replicas
        self.node_id: int = config["node.id"]

    def load(self) -> None:
        """Feed the cache from the store, recover every log, lead every partition."""
        self.metadata.set_controller(self.node_id)
        self.replicas.logs.load(self._log_config_for, self._topic_id_for)
        for topic in self.store.topics.values():
            self._apply(topic)

    def set_endpoint(self, endpoint: BrokerEndpoint) -> None:
        """This broker's advertised listeners (ports known once they are bound)."""
        self.metadata.set_brokers([endpoint])

    def _log_config_for(self, topic: str):  # type: ignore[no-untyped-def]
        info = self.store.get(topic)
        return TopicConfigs(self.config, info.configs).log_config() if info else None

    def _topic_id_for(self, topic: str):  # type: ignore[no-untyped-def]
        info = self.store.get(topic)
        return info.topic_id if info else None

    def _apply(self, topic: TopicInfo) -> None:
        self.metadata.put_topic(topic)
        cfg = TopicConfigs(self.config, topic.configs).log_config()
        for i in range(topic.partitions):
            state = PartitionState(self.node_id, topic.leader_epoch, [self.node_id],
                                   [self.node_id])
            self.metadata.put_partition((topic.name, i), state)
            self.replicas.become_leader((topic.name, i), topic.topic_id, cfg, state)

    # -- TopicAdmin ---------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], internal: bool = False,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        TopicConfigs(self.config, configs)  # raises ConfigError before anything is written
        info = await self.store.create_topic(name, partitions, configs, internal)
        self._apply(info)
        log.info("topic created", topic=name, partitions=partitions, configs=configs)
        return info

    async def delete_topic(self, name: str) -> None:
        info = self.store.get(name)
        if info is None:
            return
        tiered = bool(TopicConfigs(self.config, info.configs).get("remote.storage.enable"))
        await self.store.delete_topic(name, remote_partitions=tiered)
        self.metadata.remove_topic(name)
        for i in range(info.partitions):
            await self.replicas.stop_replica((name, i), delete=True)
            if tiered and self.replicas.tiering.manager is not None:
                self.replicas.tiering.manager.delete_partition(TopicIdPartition(info.topic_id, name, i))
        log.info("topic deleted", topic=name)

    async def create_partitions(self, name: str, count: int) -> None:
        await self.store.set_partitions(name, count)
        self._apply(self.store.topics[name])

    async def alter_configs(self, name: str, configs: TopicConfigs) -> None:
        await self.store.set_configs(name, configs.overrides)
        info = self.store.topics[name]
        self.metadata.put_topic(info)
        cfg = configs.log_config()
        for i in range(info.partitions):
            self.replicas.update_log_config((name, i), cfg)

    async def allocate_producer_id(self) -> int:
        return await self.store.allocate_producer_id()

    # -- remote cleanup of deleted topics ------------------------------------------

    def resume_remote_deletes(self) -> None:
        """Restart the remote cleanups of tiered topics deleted before a restart."""
        if self.replicas.tiering.manager is None:
            return
        for topic_id, topic, index in self.store.pending_remote_deletes:
            self.replicas.tiering.manager.delete_partition(TopicIdPartition(topic_id, topic, index))

    async def remote_delete_done(self, tip: TopicIdPartition) -> None:
        await self.store.remote_delete_done(tip.topic_id, tip.topic, tip.partition)


@dataclass(slots=True)
class SingleNode:
    """The metadata, data and topic-writing parts of a single-node broker."""

    store: LocalMetadataStore
    metadata: MetadataCache
    replicas: ReplicaManager
    admin: LocalTopicAdmin
    internal: InternalTopics


def open_single_node(config: BrokerConfig, clock: Callable[[], int] = now_ms) -> SingleNode:
    """Open the local metadata store and every log (recovery happens here)."""
    store = LocalMetadataStore(config.log_dir, config["node.id"], config["cluster.id"])
    metadata = MetadataCache(store.cluster_id)
    replicas = ReplicaManager(config, LogManager(config, clock))
    admin = LocalTopicAdmin(config, store, metadata, replicas)
    admin.load()
    admin.set_endpoint(BrokerEndpoint.advertise(config["node.id"], config.listeners,
                                                rack=config["broker.rack"]))
    return SingleNode(store, metadata, replicas, admin,
                      InternalTopics(config, admin, metadata, replicas))
