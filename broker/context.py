"""The broker's shared state handed to every request handler."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.client_telemetry import ClientTelemetry
from broker.coordinator import GroupCoordinator
from broker.dynamic_config import DynamicBrokerConfigs
from broker.features import ClusterFeatures
from broker.group_configs import GroupConfigs
from broker.metrics import BrokerMetrics
from broker.security.acl_store import AclStore
from broker.security.quotas import QuotaStore
from broker.security.scram import CredentialStore
from broker.topic_encodings import TopicEncodings
from broker.transactions import TransactionCoordinator
from broker.transactions.verifier import PartitionVerifier
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
    # Asks the transaction coordinator before transactional appends (KIP-890).
    txn_verifier: PartitionVerifier | None = None
    # Cluster mode (zookeeper.connect set); None on a single node.
    cluster: ClusterNode | None = None
    # SCRAM credentials (ZooKeeper in cluster mode, the log dir on a single node).
    credentials: CredentialStore | None = None
    # Client quotas and where they are kept.
    quotas: QuotaStore | None = None
    # ACLs (authorizer.class.name set); None: every request is allowed.
    acls: AclStore | None = None
    # Dynamic broker configs (kafka-configs --entity-type brokers); None: static only.
    dynamic: DynamicBrokerConfigs | None = None
    # The cluster's finalized feature levels (KIP-584); None: the config's seed.
    features: ClusterFeatures | None = None
    # Per-group configs (KIP-848); None: every group follows the broker's values.
    group_configs: GroupConfigs | None = None
    # KIP-714 client metrics; None: the telemetry requests are answered UNSUPPORTED_VERSION.
    client_telemetry: ClientTelemetry | None = None
    # Each topic's part of a Metadata response, encoded (kept between requests).
    topic_encodings: TopicEncodings = field(default_factory=TopicEncodings)

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id


@dataclass(frozen=True, slots=True)
class Session:
    """One connection's side of a request: the listener it came through, its
    security protocol, and who it authenticated as (Kafka's principal).

    The server passes each request's session to its handler explicitly (the
    handler's last argument); handlers called directly (unit tests) pass
    ``NO_SESSION``: no listener, so brokers are reported as brokers see them.
    """

    listener: str | None = None
    security_protocol: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    # The client's address (what ACL host entries match).
    host: str = ""
    # The client's address as Kafka prints it ("/127.0.0.1"; JoinGroup records
    # it as the member's client host).
    client_host: str = ""


NO_SESSION = Session()
