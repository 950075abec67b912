"""Transaction markers: COMMIT/ABORT control batches on every partition of a
transaction, written by each partition's leader.

Theory of operation: the transaction coordinator hands a prepared
transaction to ``MarkerWriter.write``, which groups its partitions by
leader. Partitions this broker leads get the marker in process
(``write_local``); every other leader gets one WriteTxnMarkers request
(Kafka's API 27) over a connection kept per broker, and its handler calls
``write_local`` there. ``write_local`` appends the marker as a coordinator
append (no sequence checks, control batches allowed) and answers once the
in-sync replicas have it, as Kafka's acks=all marker appends do. When the
marker lands on a ``__consumer_offsets`` partition, that broker's group
coordinator applies or drops the transaction's offsets at once (it may not
be the transaction coordinator's broker).

The log closes the producer's transaction on each partition, indexes aborts
in ``.txnindex`` and moves the last stable offset.

Error handling, as Kafka's TransactionMarkerRequestCompletionHandler: a
partition whose topic no longer exists is dropped; a marker the log rejects
for a newer producer epoch or coordinator epoch is dropped too (a later
marker already closed that transaction); anything else (no leader known,
the leader moved, a broker that does not answer, replication timing out)
is returned as owed, and the coordinator retries it later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog
import trio
from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.transactions.state import TxnMetadata
from protocol import control
from protocol.errors import ErrorCode, KafkaApiError, error_code
from protocol.partition import TopicPartition
from replication.internal_topics import OFFSETS_TOPIC
from replication.metadata_cache import MetadataCache
from replication.peer import Connector, PeerError, PeerPool
from replication.replica_manager import ACKS_ALL, ReplicaManager
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

# Marker append errors after which retrying cannot help.
_DROP = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                   ErrorCode.TRANSACTION_COORDINATOR_FENCED})
# WriteTxnMarkers version we send (v1 is Kafka 4's baseline, flexible).
WRITE_TXN_MARKERS_VERSION = 1

# (producer id, committed, __consumer_offsets partition): a marker landed there.
CompleteOffsets = Callable[[int, bool, int], None]


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int


async def write_local(replicas: ReplicaManager, complete_offsets: CompleteOffsets | None,
                      tp: TopicPartition, marker: Marker, now_ms: int,
                      timeout_ms: int) -> ErrorCode:
    """Append ``marker`` to ``tp`` as its leader; NONE once the ISR has it."""
    batch = control.marker_batch(marker.producer_id, marker.producer_epoch, marker.committed,
                                 marker.coordinator_epoch, now_ms)
    try:
        result = replicas.append_local(tp, bytearray(batch), AppendOrigin.COORDINATOR, ACKS_ALL)
    except KafkaApiError as exc:
        return exc.code
    if tp[0] == OFFSETS_TOPIC and complete_offsets is not None:
        complete_offsets(marker.producer_id, marker.committed, tp[1])
    return (await replicas.followers.wait_replicated({tp: result.last_offset + 1}, timeout_ms))[tp]


class MarkerWriter:
    """Writes markers to the leaders of a transaction's partitions.

    Concurrency: ``write`` may run for several transactions at once; the
    requests to one broker share its connection and go one at a time.
    """

    def __init__(self, node_id: int, replicas: ReplicaManager, metadata: MetadataCache,
                 timeout_ms: int, connector: Connector | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.metadata = metadata
        self.timeout_ms = timeout_ms
        # Set by the wiring once the group coordinator exists.
        self.complete_offsets: CompleteOffsets | None = None
        self._peers = PeerPool(metadata, f"txn-marker-sender-{node_id}", timeout_ms, connector)

    async def write(self, txn: TxnMetadata, committed: bool, coordinator_epoch: int,
                    now_ms: int) -> frozenset[TopicPartition]:
        """Write the marker to every partition of ``txn``.

        Returns:
            The partitions whose marker must be retried (empty when all landed).
        """
        marker = Marker(txn.producer_id, txn.producer_epoch, committed, coordinator_epoch)
        by_leader: dict[int, list[TopicPartition]] = {}
        results: dict[TopicPartition, ErrorCode] = {}
        for tp in sorted(txn.partitions):
            if self.replicas.leads(tp):
                by_leader.setdefault(self.node_id, []).append(tp)
            elif not self.metadata.has_partition(tp) and self.metadata.topic(tp[0]) is None:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                state = self.metadata.partition(tp)
                leader = state.leader if state is not None else -1
                if leader < 0 or leader == self.node_id:
                    results[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                else:
                    by_leader.setdefault(leader, []).append(tp)

        async def to_leader(leader: int, tps: list[TopicPartition]) -> None:
            if leader == self.node_id:
                for tp in tps:
                    results[tp] = await write_local(self.replicas, self.complete_offsets, tp,
                                                    marker, now_ms, self.timeout_ms)
            else:
                results.update(await self._send(leader, tps, marker))

        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                nursery.start_soon(to_leader, leader, tps)
        retry = set()
        for tp, code in sorted(results.items()):
            if code is ErrorCode.NONE:
                continue
            dropped = code in _DROP
            log.warning("transaction marker not written", transactional_id=txn.transactional_id,
                        topic=tp[0], partition=tp[1], error=code.name, retry=not dropped)
            if not dropped:
                retry.add(tp)
        return frozenset(retry)

    async def _send(self, leader: int, tps: list[TopicPartition],
                    marker: Marker) -> dict[TopicPartition, ErrorCode]:
        """One WriteTxnMarkers request to ``leader``; an error code per partition."""
        peer = self._peers.get(leader)
        if peer is None:
            return dict.fromkeys(tps, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        req = WriteTxnMarkersRequest[WRITE_TXN_MARKERS_VERSION]
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        body = req(markers=[req.WritableTxnMarker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.committed, coordinator_epoch=marker.coordinator_epoch,
            topics=[req.WritableTxnMarker.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()])])
        try:
            resp = await peer.request(WriteTxnMarkersRequest, WriteTxnMarkersResponse,
                                      WRITE_TXN_MARKERS_VERSION, body,
                                      timeout_s=self.timeout_ms / 1000 + 5)
        except PeerError as exc:
            log.info("WriteTxnMarkers failed", leader=leader, error=str(exc))
            return dict.fromkeys(tps, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        out = dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR)
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = error_code(p.error_code)
        return out

    async def close(self) -> None:
        await self._peers.close()

