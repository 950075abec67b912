"""A partition leader's question to the transaction coordinator before it
appends a transactional batch (KIP-890): is this partition in the
producer's open transaction (part 1, verification), or, for a
transactions-v2 client, please add it (part 2, Produce v12 and
TxnOffsetCommit v5 add their partitions implicitly).

Theory of operation: the coordinator of a transactional id is the leader of
its ``__transaction_state`` partition. When that is this broker, the
coordinator is asked in process; otherwise one AddPartitionsToTxn v5
request (the batched broker form: ``verify_only`` true to verify, false to
add) goes to it over a connection kept per broker, separate from the
marker writer's so neither waits behind the other.

Error handling: the coordinator's answer is translated for the produce
response as Kafka's ReplicaManager does: retriable coordinator trouble
(moved, loading, unreachable, a transaction still completing) becomes
NOT_ENOUGH_REPLICAS, an error every client retries without a metadata
refresh; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (Produce has no
PRODUCER_FENCED); INVALID_TXN_STATE stays: the partition is not in the
transaction, and appending would leave a transaction no marker closes.

Known gap (Kafka's VerificationGuard): the answer is not pinned to the
producer state. A marker that lands between the answer and the append
under a newer epoch (a timeout's fencing abort, any transactions-v2 end)
still refuses the batch through the log's epoch check; only a v1 client
ending its own transaction while its batch is in flight is not caught.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from broker.transactions.coordinator import TransactionCoordinator
from protocol.errors import ErrorCode, error_code
from protocol.partition import TopicPartition
from replication.internal_topics import TRANSACTION_TOPIC
from replication.metadata_cache import MetadataCache
from replication.peer import Connector, PeerError, PeerPool

log = structlog.get_logger(__name__)

E = ErrorCode
# AddPartitionsToTxn version sent to coordinators (Kafka 4's broker form).
ADD_PARTITIONS_VERSION = 5
# Coordinator answers a client retries as they are, for a produce: NOT_ENOUGH_REPLICAS.
_RETRIABLE = frozenset({E.CONCURRENT_TRANSACTIONS, E.NETWORK_EXCEPTION,
                        E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                        E.NOT_COORDINATOR})


def for_produce(code: ErrorCode, retriable: ErrorCode = E.NOT_ENOUGH_REPLICAS) -> ErrorCode:
    """A coordinator's answer as a produce partition error (TxnOffsetCommit
    passes COORDINATOR_LOAD_IN_PROGRESS as ``retriable``: its clients retry that)."""
    if code in _RETRIABLE:
        return retriable
    if code is E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    return code


class PartitionVerifier:
    """Verifies or adds the partitions of a transactional append.

    Concurrency: calls for different requests run at once; requests to one
    coordinator broker share its connection and go one at a time.
    """

    def __init__(self, node_id: int, coordinator: TransactionCoordinator,
                 metadata: MetadataCache, timeout_ms: int,
                 connector: Connector | None = None) -> None:
        self.node_id = node_id
        self.coordinator = coordinator
        self.metadata = metadata
        self.timeout_ms = timeout_ms
        self._peers = PeerPool(metadata, f"txn-verifier-{node_id}", timeout_ms, connector)

    def coordinator_node(self, txn_id: str) -> int | None:
        """The broker coordinating ``txn_id`` (None: no leader known)."""
        if self.coordinator.owns(txn_id):
            return self.node_id
        partition = self.coordinator.store.partition_of(txn_id)
        state = self.metadata.partition((TRANSACTION_TOPIC, partition))
        if state is None or state.leader < 0:
            return None
        return int(state.leader)

    async def check(self, txn_id: str | None, producer_id: int, epoch: int,
                    partitions: Iterable[TopicPartition],
                    add: bool) -> dict[TopicPartition, ErrorCode]:
        """Verify (``add`` false) or add (``add`` true, transactions v2) the
        partitions; the coordinator's error per partition, untranslated."""
        tps = set(partitions)
        if not txn_id:
            return dict.fromkeys(tps, E.INVALID_TXN_STATE)
        node = self.coordinator_node(txn_id)
        if node is None:
            return dict.fromkeys(tps, E.COORDINATOR_NOT_AVAILABLE)
        if node == self.node_id:
            if add:
                code = await self.coordinator.add_partitions(txn_id, producer_id, epoch, tps,
                                                             tv2=True)
                return dict.fromkeys(tps, code)
            return self.coordinator.verify_partitions(txn_id, producer_id, epoch, tps)
        return await self._ask(node, txn_id, producer_id, epoch, tps, add)

    async def _ask(self, node: int, txn_id: str, producer_id: int, epoch: int,
                   tps: set[TopicPartition], add: bool) -> dict[TopicPartition, ErrorCode]:
        peer = self._peers.get(node)
        if peer is None:
            return dict.fromkeys(tps, E.COORDINATOR_NOT_AVAILABLE)
        req = AddPartitionsToTxnRequest[ADD_PARTITIONS_VERSION]
        txn_cls = req.AddPartitionsToTxnTransaction
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        body = req(transactions=[txn_cls(
            transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch,
            verify_only=not add,
            topics=[txn_cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])])
        try:
            resp = await peer.request(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
                                      ADD_PARTITIONS_VERSION, body,
                                      timeout_s=self.timeout_ms / 1000)
        except PeerError as exc:
            log.info("AddPartitionsToTxn to the coordinator failed", coordinator=node,
                     transactional_id=txn_id, error=str(exc))
            return dict.fromkeys(tps, E.NETWORK_EXCEPTION)
        if resp.error_code:
            return dict.fromkeys(tps, error_code(resp.error_code))
        out = dict.fromkeys(tps, E.UNKNOWN_SERVER_ERROR)
        for result in resp.results_by_transaction:
            for topic in result.topic_results:
                for part in topic.results_by_partition:
                    if (topic.name, part.partition_index) in out:
                        out[(topic.name, part.partition_index)] = error_code(
                            part.partition_error_code)
        return out

    async def close(self) -> None:
        await self._peers.close()

