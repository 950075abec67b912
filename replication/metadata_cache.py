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

Stamps: every change to a topic or one of its partitions gives the topic a
new stamp, and a change to the live brokers a new broker stamp, so a reader
that keeps something derived (the Metadata handler keeps each topic's part of
its response encoded) knows when to derive it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from config.listeners import Listeners
from protocol.partition import TopicPartition
from replication.metadata import TopicInfo

# The leader id Kafka reports for a partition that has none (offline).
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One advertised listener of a broker."""

    name: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A broker: ``host``/``port`` are where brokers reach it (its inter-broker
    listener); ``listeners`` every listener it advertises."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[ListenerEndpoint, ...] = ()

    @classmethod
    def advertise(cls, node_id: int, listeners: Listeners,
                  bound: Mapping[str, int] | None = None,
                  rack: str | None = None) -> BrokerEndpoint:
        """This broker as its config advertises it; an advertised port 0 becomes
        the port its listener of that name bound (``bound``, by name)."""
        bound = bound or {}
        ends = tuple(ListenerEndpoint(a.name, a.security_protocol, a.host,
                                      a.port or bound.get(a.name, 0))
                     for a in listeners.advertised)
        inter = next((e for e in ends if e.name == listeners.inter_broker), ends[0])
        return cls(node_id, inter.host, inter.port, rack or None, ends)

    def on(self, listener: str | None) -> BrokerEndpoint | None:
        """This broker as clients of ``listener`` reach it (None, or a broker
        that lists no listeners: as brokers reach it); None if it does not
        advertise ``listener``."""
        if listener is None or not self.listeners:
            return self
        found = next((e for e in self.listeners if e.name == listener), None)
        if found is None:
            return None
        return BrokerEndpoint(self.node_id, found.host, found.port, self.rack, self.listeners)


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
        self._clock = 0
        self._stamps: dict[str, int] = {}
        self._brokers_stamp = 0

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

    def brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """Live brokers as clients of ``listener`` reach them (None: as brokers
        do); brokers without that listener are left out."""
        found = (b.on(listener) for b in sorted(self._brokers.values(), key=lambda b: b.node_id))
        return [b for b in found if b is not None]

    def broker(self, node_id: int, listener: str | None = None) -> BrokerEndpoint | None:
        b = self._brokers.get(node_id)
        return b.on(listener) if b is not None else None

    def topic_stamp(self, name: str) -> tuple[int, int]:
        """(the topic's stamp, the brokers' stamp): equal stamps, same topic
        state and same live brokers (stamps are never reused, a topic deleted
        and created again included)."""
        return self._stamps.get(name, 0), self._brokers_stamp

    def _touch(self, name: str) -> None:
        self._clock += 1
        self._stamps[name] = self._clock

    # -- feeders ------------------------------------------------------------------

    def put_topic(self, info: TopicInfo) -> None:
        old = self._topics.get(info.name)
        if old is not None and old.topic_id != info.topic_id:
            self._by_id.pop(old.topic_id, None)
        self._topics[info.name] = info
        self._by_id[info.topic_id] = info
        self._touch(info.name)

    def remove_topic(self, name: str) -> None:
        info = self._topics.pop(name, None)
        if info is None:
            return
        self._by_id.pop(info.topic_id, None)
        for tp in [tp for tp in self._partitions if tp[0] == name]:
            del self._partitions[tp]
        self._touch(name)

    def put_partition(self, tp: TopicPartition, state: PartitionState) -> None:
        if self._partitions.get(tp) != state:
            self._partitions[tp] = state
            self._touch(tp[0])

    def set_brokers(self, brokers: list[BrokerEndpoint]) -> None:
        by_id = {b.node_id: b for b in brokers}
        if by_id != self._brokers:
            self._brokers = by_id
            self._clock += 1
            self._brokers_stamp = self._clock

    def set_controller(self, node_id: int) -> None:
        self.controller_id = node_id
