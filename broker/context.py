"""The broker's shared state handed to every request handler."""

from __future__ import annotations

from dataclasses import dataclass

from broker.metrics import BrokerMetrics
from config import BrokerConfig
from replication.metadata import LocalMetadataStore
from replication.replica_manager import ReplicaManager


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    store: LocalMetadataStore
    replicas: ReplicaManager
    metrics: BrokerMetrics
    node_id: int
    host: str
    port: int

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id
