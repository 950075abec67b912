"""The log of a coordinator's state: one internal-topic partition per key, for
the group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) alike.

Theory of operation: a coordinator key (group id, transactional id) lives in
partition ``(javaStringHashCode(key) & 0x7fffffff) % partitions``, as in
Kafka. The coordinator appends its state changes to that partition as
key/value records (``append``; a prebuilt batch with ``append_batch``, for
transactional offsets), writing to the local log at once so its in-memory
state always matches the log, and answers its client after ``wait_durable``
says the in-sync replicas have the write (``replication.internal_topics``).
When it becomes a partition's leader it folds ``records`` into state; what
the records mean is the coordinator's business (``broker.coordinator.records``,
``broker.transactions.records``), not this module's.

Error handling: every append or replication failure is answered with the
code Kafka's coordinator answers for it, mapped here and nowhere else
(``answer_for``); an ``OSError`` from the local log is a KAFKA_STORAGE_ERROR,
so the client looks the coordinator up again. A batch we cannot decode
during replay is logged and skipped, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import structlog

from protocol import records as batches
from protocol.errors import ErrorCode, KafkaApiError
from replication.internal_topics import InternalTopic
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

E = ErrorCode

Record = tuple[bytes, bytes | None]

# Append and replication errors -> what Kafka's coordinators answer
# (GroupMetadataManager.storeGroup / storeOffsets, TransactionStateManager.
# appendTransactionToLog): the client retries (COORDINATOR_NOT_AVAILABLE) or
# looks the coordinator up again (NOT_COORDINATOR).
_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
}
# A batch the log refuses for its size: the one answer the coordinators differ
# on (``oversized``: INVALID_COMMIT_OFFSET_SIZE for groups, UNKNOWN_SERVER_ERROR
# for transactions, as in Kafka).
_OVERSIZED = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE})


def answer_for(error: ErrorCode, oversized: ErrorCode) -> ErrorCode:
    """The code a coordinator answers its client for an append or replication ``error``."""
    if error in _OVERSIZED:
        return oversized
    return _APPEND_ERRORS.get(error, error)


class CoordinatorStore:
    def __init__(self, topic: InternalTopic, wall_clock: Callable[[], int],
                 oversized: ErrorCode) -> None:
        """Args:
            wall_clock: stamps the batches (ms since the epoch).
            oversized: what the coordinator answers for a batch too large for the log.
        """
        self.topic = topic
        self.wall_clock = wall_clock
        self.oversized = oversized

    @property
    def partitions(self) -> int:
        return self.topic.partitions

    def partition_of(self, key: str) -> int:
        return self.topic.partition_for(key)

    def leader_epoch(self, key: str) -> int:
        """The leader epoch of the key's partition (the coordinator epoch markers carry)."""
        return self.topic.leader_epoch(self.partition_of(key))

    async def ensure_topic(self) -> None:
        """Create the topic (internal, compacted) if the cluster has none yet."""
        await self.topic.ensure()

    def forget(self, partition: int) -> None:
        """Leadership of ``partition`` moved away: its pending appends are moot."""
        self.topic.forget(partition)

    def append(self, key: str, records: Sequence[Record]) -> ErrorCode:
        """Append ``records`` to the key's partition as one uncompressed batch.

        Returns:
            NONE, or the code to answer the client with.
        """
        if not records:
            return E.NONE
        return self._append(key, lambda partition: self.topic.append_records(
            partition, records, self.wall_clock()))

    def append_batch(self, key: str, batch: bytes, origin: AppendOrigin) -> ErrorCode:
        """Append a prebuilt batch (transactional offsets) to the key's partition.

        Returns:
            NONE, or the code to answer the client with.
        """
        return self._append(key, lambda partition: self.topic.append(partition, batch, origin))

    def _append(self, key: str, write: Callable[[int], object]) -> ErrorCode:
        try:
            write(self.partition_of(key))
        except KafkaApiError as exc:
            log.warning("coordinator append failed", topic=self.topic.name, key=key,
                        error=exc.code.name, detail=exc.message)
            return answer_for(exc.code, self.oversized)
        except OSError:
            log.exception("coordinator append failed: storage error", topic=self.topic.name,
                          key=key)
            return answer_for(E.KAFKA_STORAGE_ERROR, self.oversized)
        return E.NONE

    async def wait_durable(self, key: str, timeout_ms: int) -> ErrorCode:
        """Wait until the in-sync replicas have every append made so far to the
        key's partition; NONE, or the code to answer the client with."""
        error = await self.topic.wait_durable(self.partition_of(key), timeout_ms)
        if error is not E.NONE:
            log.warning("coordinator write not replicated", topic=self.topic.name, key=key,
                        error=error.name)
        return answer_for(error, self.oversized)

    def records(self, partition: int) -> Iterator[Record]:
        """The keyed records of one partition from its log start, in log order.

        Markers and transactional batches (offsets of open transactions, replayed
        by ``broker.coordinator.txn_offsets``) are not the coordinator's state
        records and are skipped.
        """
        for header, data in self.topic.replay(partition):
            if header.is_control or header.is_transactional:
                continue
            try:
                decoded = batches.decode_records(data, header)
            except KafkaApiError as exc:
                log.warning("skipping undecodable coordinator batch", topic=self.topic.name,
                            partition=partition, offset=header.base_offset, error=exc.message)
                continue
            for r in decoded:
                if r.key is not None:
                    yield r.key, r.value
