"""Transaction state in ``__transaction_state``: its records, and their replay
when this broker becomes a partition's leader.

Each transactional id lives in partition
``(javaStringHashCode(id) & 0x7fffffff) % transaction.state.log.num.partitions``,
as in Kafka. Every state change the coordinator makes durable is one
uncompressed, non-transactional batch holding one record (key: the id,
value: the metadata, see ``records``), appended through the shared
coordinator store (``broker.coordinator_store``) so it shares the log's
flushing, recovery and error answers. The topic is created with
cleanup.policy=compact, as Kafka does: retention never deletes it, and the
log cleaner keeps the last record per id, bounding the replay.

Replay (``load_txns``): the last record for an id wins, a null value
(tombstone) removes it. An unreadable record is logged and skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.coordinator_store import CoordinatorStore, Record
from broker.transactions import records as rec
from broker.transactions.state import TxnMetadata, TxnState
from protocol.errors import ErrorCode
from replication.internal_topics import InternalTopic

log = structlog.get_logger(__name__)


def txn_store(topic: InternalTopic, wall_clock: Callable[[], int]) -> CoordinatorStore:
    """The store of ``__transaction_state``; a batch too large for the log is
    answered UNKNOWN_SERVER_ERROR, as Kafka's TransactionStateManager does."""
    return CoordinatorStore(topic, wall_clock, oversized=ErrorCode.UNKNOWN_SERVER_ERROR)


def txn_record(transactional_id: str, txn: TxnMetadata | None) -> Record:
    """The record of ``txn`` (None: the id's tombstone)."""
    return rec.encode_key(transactional_id), None if txn is None else rec.encode_value(txn)


def load_txns(store: CoordinatorStore, partition: int) -> dict[str, TxnMetadata]:
    """Replay one partition; the last record for an id wins."""
    txns: dict[str, TxnMetadata] = {}
    count = 0
    for key, value in store.records(partition):
        count += 1
        _apply(txns, key, value, partition)
    if count:
        log.info("transaction state loaded", partition=partition, records=count,
                 transactional_ids=len(txns),
                 ongoing=sum(t.state is TxnState.ONGOING for t in txns.values()))
    return txns


def _apply(txns: dict[str, TxnMetadata], key: bytes, value: bytes | None,
           partition: int) -> None:
    try:
        txn_id = rec.decode_key(key)
        if value is None:
            txns.pop(txn_id, None)
        else:
            txns[txn_id] = rec.decode_value(txn_id, value)
    except rec.RecordFormatError as exc:
        log.warning("skipping unreadable transaction log record", partition=partition,
                    error=str(exc))
