"""Transaction state in the internal topic ``__transaction_state``: write, and replay on start.

Each transactional id lives in partition
``(javaStringHashCode(id) & 0x7fffffff) % transaction.state.log.num.partitions``,
as in Kafka. Every state change the coordinator makes durable is one
uncompressed, non-transactional batch holding one record (key: the id,
value: the metadata, see ``records``), appended through
the internal-topic module so it shares the log's flushing and recovery. When
this broker becomes a partition's leader the coordinator replays it from
its log start (``load``): the last record for an id wins, a null value
(tombstone) removes it. Appends go to the local log at once; the
coordinator answers after ``wait_durable`` (see ``replication.internal_topics``). The topic is created with
cleanup.policy=compact, as Kafka does: retention never deletes it, and the
log cleaner keeps the last record per id, bounding the replay.

Error handling: an append failure comes back as the error code Kafka's
TransactionStateManager answers for it; an unreadable record during replay
is logged and skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.transactions import records as rec
from broker.transactions.state import TxnMetadata, TxnState
from protocol import records as batches
from protocol.errors import ErrorCode, KafkaApiError
from replication.internal_topics import TRANSACTION_TOPIC, InternalTopic

log = structlog.get_logger(__name__)

__all__ = ["TRANSACTION_TOPIC", "TxnLogStore"]

# Append errors -> what Kafka's TransactionStateManager answers the client.
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class TxnLogStore:
    def __init__(self, topic: InternalTopic, wall_clock: Callable[[], int]) -> None:
        self.topic = topic
        self.wall_clock = wall_clock

    @property
    def partitions(self) -> int:
        return self.topic.partitions

    def partition_of(self, transactional_id: str) -> int:
        return self.topic.partition_for(transactional_id)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's partition: the epoch markers carry."""
        return self.topic.leader_epoch(self.partition_of(transactional_id))

    async def ensure_topic(self) -> None:
        """Create __transaction_state (internal, compacted) if the cluster has none yet."""
        await self.topic.ensure()

    def append(self, txn: TxnMetadata | None, transactional_id: str) -> ErrorCode:
        """Write ``txn`` (None: a tombstone) for ``transactional_id``.

        Returns:
            NONE, or the code to answer the client with.
        """
        value = None if txn is None else rec.encode_value(txn)
        try:
            self.topic.append_records(self.partition_of(transactional_id),
                                      [(rec.encode_key(transactional_id), value)],
                                      self.wall_clock())
        except KafkaApiError as exc:
            log.warning("transaction log append failed", transactional_id=transactional_id,
                        error=exc.code.name, detail=exc.message)
            return _APPEND_ERRORS.get(exc.code, exc.code)
        return ErrorCode.NONE

    async def wait_durable(self, transactional_id: str, timeout_ms: int) -> ErrorCode:
        """Wait until the in-sync replicas have every append so far to the id's
        partition; NONE, or the code to answer the client with."""
        error = await self.topic.wait_durable(self.partition_of(transactional_id), timeout_ms)
        if error is not ErrorCode.NONE:
            log.warning("transaction log write not replicated",
                        transactional_id=transactional_id, error=error.name)
        return _APPEND_ERRORS.get(error, error)

    def load(self, partition: int) -> dict[str, TxnMetadata]:
        """Replay one partition; the last record for an id wins."""
        txns: dict[str, TxnMetadata] = {}
        count = 0
        for header, data in self.topic.replay(partition):
            if header.is_control:
                continue
            try:
                decoded = batches.decode_records(data, header)
            except KafkaApiError as exc:
                log.warning("skipping undecodable transaction log batch", partition=partition,
                            offset=header.base_offset, error=exc.message)
                continue
            for r in decoded:
                count += 1
                self._apply(txns, r.key, r.value, partition)
        if count:
            log.info("transaction state loaded", partition=partition, records=count,
                     transactional_ids=len(txns),
                     ongoing=sum(t.state is TxnState.ONGOING for t in txns.values()))
        return txns

    @staticmethod
    def _apply(txns: dict[str, TxnMetadata], key: bytes | None, value: bytes | None,
               partition: int) -> None:
        if key is None:
            return
        try:
            txn_id = rec.decode_key(key)
            if value is None:
                txns.pop(txn_id, None)
            else:
                txns[txn_id] = rec.decode_value(txn_id, value)
        except rec.RecordFormatError as exc:
            log.warning("skipping unreadable transaction log record", partition=partition,
                        error=str(exc))
