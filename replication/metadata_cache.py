"""The broker's read-only view of cluster metadata, as every handler sees it.

Theory of operation: handlers never ask the logs, the ReplicaManager or
ZooKeeper what exists and who leads it; they ask this cache. It holds the
topics (name, id, partition count, configs, internal flag), each
partition's state (leader, leader epoch, replicas, ISR, offline replicas),
the live brokers with their endpoints, the controller id and the cluster id.

Who feeds it: in single-node mode the local topic writer
(``replication.local_admin``) after each change it persists; in cluster mode
the controller's UpdateMetadata requests. Only feeders call the mutators
(``put_topic``, ``remove_topic``, ``put_partition``, ``set_brokers``,
``set_controller``); everything else reads.

Concurrency: lives on the event loop; a reader sees the state between two
feeder calls, never half of one (mutators do not await).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from replication.metadata import TopicInfo

TopicPartition = tuple[str, int]

# The leader id Kafka reports for a partition that has none (offline).
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionState:
    """Who leads one partition, in which epoch, and who replicates it."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int] = field(default_factory=list)
    # The partition state's version (ZooKeeper znode version), for AlterPartition.
    partition_epoch: int = 0


class MetadataCache:
    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.controller_id = NO_LEADER
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._partitions: dict[TopicPartition, PartitionState] = {}
        self._brokers: dict[int, BrokerEndpoint] = {}

    # -- reads --------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        return self._partitions.get(tp)

    def has_partition(self, tp: TopicPartition) -> bool:
        return tp in self._partitions

    def brokers(self) -> list[BrokerEndpoint]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self._brokers.get(node_id)

    # -- feeders ------------------------------------------------------------------

    def put_topic(self, info: TopicInfo) -> None:
        old = self._topics.get(info.name)
        if old is not None and old.topic_id != info.topic_id:
            self._by_id.pop(old.topic_id, None)
        self._topics[info.name] = info
        self._by_id[info.topic_id] = info

    def remove_topic(self, name: str) -> None:
        info = self._topics.pop(name, None)
        if info is None:
            return
        self._by_id.pop(info.topic_id, None)
        for tp in [tp for tp in self._partitions if tp[0] == name]:
            del self._partitions[tp]

    def put_partition(self, tp: TopicPartition, state: PartitionState) -> None:
        self._partitions[tp] = state

    def set_brokers(self, brokers: list[BrokerEndpoint]) -> None:
        self._brokers = {b.node_id: b for b in brokers}

    def set_controller(self, node_id: int) -> None:
        self.controller_id = node_id
