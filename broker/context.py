"""The broker's shared state handed to every request handler."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from broker.coordinator import GroupCoordinator
from broker.metrics import BrokerMetrics
from broker.security.acl_store import AclStore
from broker.security.quotas import QuotaStore
from broker.security.scram import CredentialStore
from broker.topic_encodings import TopicEncodings
from broker.transactions import TransactionCoordinator
from config import BrokerConfig
from replication.cluster import ClusterNode
from replication.metadata_cache import MetadataCache
from replication.replica_manager import ReplicaManager
from replication.topic_admin import TopicAdmin


@dataclass(slots=True)
class BrokerContext:
    """What handlers may use: the read-only metadata cache, the ReplicaManager's
    append/fetch entry points, the topic writer, the coordinators, metrics."""

    config: BrokerConfig
    metadata: MetadataCache
    replicas: ReplicaManager
    admin: TopicAdmin
    metrics: BrokerMetrics
    node_id: int
    groups: GroupCoordinator | None = None
    transactions: TransactionCoordinator | None = None
    # Cluster mode (zookeeper.connect set); None on a single node.
    cluster: ClusterNode | None = None
    # SCRAM credentials (ZooKeeper in cluster mode, the log dir on a single node).
    credentials: CredentialStore | None = None
    # Client quotas and where they are kept.
    quotas: QuotaStore | None = None
    # ACLs (authorizer.class.name set); None: every request is allowed.
    acls: AclStore | None = None
    # Each topic's part of a Metadata response, encoded (kept between requests).
    topic_encodings: TopicEncodings = field(default_factory=TopicEncodings)

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id


# The peer of the connection whose request is being handled, as Kafka prints
# it ("/127.0.0.1"; JoinGroup records it as the member's client host). Set by
# the server in each connection's task, so every request sees its own.
client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")


@dataclass(frozen=True, slots=True)
class Session:
    """One connection's side of a request: the listener it came through, its
    security protocol, and who it authenticated as (Kafka's principal)."""

    listener: str | None = None
    security_protocol: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    # The client's address (what ACL host entries match).
    host: str = ""


# The session of the connection whose request is being handled; set by the
# server in each connection's task (default: no listener, as in unit tests
# calling handlers directly, where brokers are reported as brokers see them).
NO_SESSION = Session()
session: contextvars.ContextVar[Session] = contextvars.ContextVar("session", default=NO_SESSION)


def current_listener() -> str | None:
    """The listener the request being handled came through."""
    return session.get().listener
