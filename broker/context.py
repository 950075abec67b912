"""The broker's shared state handed to every request handler."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from broker.coordinator import GroupCoordinator
from broker.metrics import BrokerMetrics
from broker.transactions import TransactionCoordinator
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
    groups: GroupCoordinator | None = None
    transactions: TransactionCoordinator | None = None

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id


# The peer of the connection whose request is being handled, as Kafka prints
# it ("/127.0.0.1"; JoinGroup records it as the member's client host). Set by
# the server in each connection's task, so every request sees its own.
client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
