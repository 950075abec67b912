"""The state of one transactional id: Kafka's TransactionMetadata and its state machine.

Theory of operation
-------------------
A transactional id moves through Kafka's states (ids are what
``__transaction_state`` stores)::

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit
      ^  ^                               |  |                            | markers written
      |  |                               |  +--EndTxn(abort)/timeout--> PrepareAbort
      |  |                               |                               | markers written
      |  |             InitProducerId    +--> PrepareEpochFence --> PrepareAbort
      |  |                                                               v
      |  +----- InitProducerId (epoch bump) ---- CompleteCommit / CompleteAbort
      |                                            |  (AddPartitions starts the next
      +------------------- expiry --> Dead <-------+   transaction straight from here)

* Prepare* states are written to the log before any marker: once
  PrepareCommit is durable the transaction will commit, even across a
  restart (the coordinator writes the markers again on load).
* PrepareEpochFence is never written: it is the in-memory step between an
  Ongoing transaction and its abort when a new producer instance (or the
  timeout) fences the old one; the abort that follows carries the bumped
  epoch, so the old instance's late writes are rejected.
* Dead: the id expired (transactional.id.expiration.ms); a tombstone follows.

* Transactions v2 (KIP-890 part 2): every EndTxn v5 writes its Prepare*
  under the next producer epoch, so the markers fence whatever the old
  epoch still sends; and an abort may start from Empty/Complete* (the
  client began a transaction whose partitions never reached the
  coordinator): PrepareAbort with no partitions, only the epoch bump.

``TRANSITIONS`` is Kafka's ``validPreviousStates`` inverted.
``TxnMetadata.prepare`` raises ``IllegalTxnTransition``
for anything else. Metadata is immutable once built: ``prepare`` returns the
next version, which the coordinator installs only after the log accepted
it (Kafka's TxnTransitMetadata).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from protocol.partition import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's TransactionMetadata.isEpochExhausted: the epoch of the next bump
# must still fit, with one left for fencing.
MAX_PRODUCER_EPOCH = 2**15 - 1


class TxnState(enum.Enum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


S = TxnState
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.DEAD: frozenset(),
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT}),
}
# States in which a transaction is open and may time out.
OPEN = frozenset({S.ONGOING})
# States waiting for markers to be written.
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
# States in which an idle transactional id may expire.
EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTxnTransition(RuntimeError):
    """A coordinator bug: a move the state machine does not allow."""


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    # Wall-clock ms: when the first partition joined the open transaction (-1: none open).
    start_timestamp: int = -1
    last_update_timestamp: int = -1
    # The epoch before the last bump, so a retried InitProducerId is recognised
    # (kept in memory only: value version 0 has no field for it, as in Kafka).
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # The producer in this transaction uses transactions v2 (its partitions came
    # implicitly, or its EndTxn was v5), so an EndTxn one epoch below is that
    # client retrying (Kafka's ClientTransactionVersion; value version 1 keeps it).
    client_tv2: bool = False
    # Transactions v2 ran out of epochs: the producer id the transaction moves
    # to (epoch 0) once its markers are written (Kafka's nextProducerId).
    next_producer_id: int = NO_PRODUCER_ID

    def prepare(self, state: TxnState, **changes: Any) -> TxnMetadata:
        """The next version of this metadata, in ``state``.

        Raises:
            IllegalTxnTransition: ``state`` is not reachable from the current one.
        """
        if state not in TRANSITIONS[self.state]:
            raise IllegalTxnTransition(f"transactional id {self.transactional_id!r}: "
                                       f"{self.state.kafka_name} -> {state.kafka_name}")
        return dataclasses.replace(self, state=state, **changes)

    def with_partitions(self, partitions: frozenset[TopicPartition]) -> TxnMetadata:
        """Same state, fewer partitions (markers written to the others)."""
        return dataclasses.replace(self, partitions=partitions)


def init_epoch_bump(txn: TxnMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """InitProducerId's epoch bump (Kafka's prepareIncrementProducerEpoch):
    (new epoch, last epoch), None if the caller is fenced."""
    if expected_epoch is None:
        return txn.producer_epoch + 1, NO_PRODUCER_EPOCH
    if txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
        return txn.producer_epoch + 1, txn.producer_epoch
    if expected_epoch == txn.last_producer_epoch:
        return txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump that worked
    return None
