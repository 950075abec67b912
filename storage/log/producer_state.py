"""Idempotent and transactional producer state of one partition (KIP-98).

For every producer id the log remembers its epoch and the last five
batches it appended (first/last sequence and offsets). A retried batch that
matches one of them is a duplicate: it is not appended again and the client
gets the original offset. A batch whose first sequence does not follow the
last one is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is fenced
(INVALID_PRODUCER_EPOCH). Five is Kafka's max.in.flight limit for
idempotence, hence the window.

Transactions: a producer's first transactional batch opens its transaction
here (``current_txn_first_offset``); the COMMIT or ABORT marker the
transaction coordinator appends closes it and comes back from ``update`` as
a ``CompletedTxn``, with the last stable offset at that moment (what the
aborted-transaction index records). ``first_undecided_offset`` is the first
offset of the oldest open transaction: the partition's last stable offset
cannot pass it. A producer with an open transaction may not write
non-transactional batches (INVALID_TXN_STATE); a marker from an older
coordinator epoch is TRANSACTION_COORDINATOR_FENCED.

Who may append what (``AppendOrigin``): clients send data with sequences and
never control batches; the coordinators append markers and transactional
offset commits without sequences. (Replicated batches are not checked, only
recorded with ``update``.) The state is saved to and restored from
``<offset>.snapshot`` files (``snapshot_entries`` / ``load_snapshot``); the
log replays the batches after the snapshot it restored.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from protocol.control import EndTxnMarker
from protocol.errors import ErrorCode, KafkaApiError
from protocol.records import BatchHeader
from storage.log.producer_snapshot import SnapshotEntry

# Batches remembered per producer: the client's max in-flight for idempotence.
DEDUP_WINDOW = 5
_INT_MAX = 2**31 - 1
NO_TXN = -1


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"


@dataclass(slots=True)
class _Batch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[_Batch] = field(default_factory=lambda: deque(maxlen=DEDUP_WINDOW))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_TXN

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    # The partition's LSO once this transaction is closed (Kafka's
    # ProducerStateManager.lastStableOffset(completedTxn)).
    last_stable_offset: int


def _next_seq(seq: int) -> int:
    return 0 if seq == _INT_MAX else seq + 1


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % (_INT_MAX + 1)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # first offset of every open transaction -> its producer id
        self.ongoing: dict[int, int] = {}

    def check(self, headers: list[BatchHeader], markers: list[EndTxnMarker | None] | None = None,
              origin: AppendOrigin = AppendOrigin.CLIENT) -> tuple[int, int] | None:
        """Validate the producer fields of one append.

        Args:
            headers: the batches, in order.
            markers: the decoded marker of each control batch (None elsewhere).
            origin: who appends (clients get sequence checks, no control batches).

        Returns:
            (first offset, last offset) of the original append if the whole
            request is a duplicate of a recent one, else None.

        Raises:
            KafkaApiError: INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
                INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED, or
                INVALID_RECORD for a control batch sent by a client.
        """
        pending: dict[int, tuple[int, int]] = {}
        for i, h in enumerate(headers):
            if h.is_control and origin is AppendOrigin.CLIENT:
                raise KafkaApiError(ErrorCode.INVALID_RECORD,
                                    "clients may not write control records")
            if h.producer_id < 0:
                continue
            entry = self.producers.get(h.producer_id)
            if entry is not None and h.producer_epoch < entry.epoch:
                raise KafkaApiError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                    f"epoch {h.producer_epoch} < {entry.epoch}")
            if h.is_control:
                self._check_marker(entry, markers[i] if markers else None)
                continue
            if (entry is not None and entry.current_txn_first_offset != NO_TXN
                    and not h.is_transactional):
                raise KafkaApiError(ErrorCode.INVALID_TXN_STATE,
                                    f"producer {h.producer_id} has an open transaction")
            if origin is not AppendOrigin.CLIENT:
                continue
            epoch, last = pending.get(h.producer_id, (entry.epoch, entry.last_seq) if entry
                                      else (-1, -1))
            dup = self._duplicate(entry, h)
            if dup is not None and len(headers) == 1:
                return dup
            if entry is None and h.producer_id not in pending:
                # Unknown producer (its state expired with retention): Kafka
                # accepts whatever sequence it continues with.
                pass
            elif h.producer_epoch != epoch:
                if h.base_sequence != 0:
                    raise KafkaApiError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        f"new epoch {h.producer_epoch} must start at sequence 0")
            elif h.base_sequence != _next_seq(last):
                raise KafkaApiError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    f"expected sequence {_next_seq(last)}, got {h.base_sequence}")
            pending[h.producer_id] = (h.producer_epoch, _last_seq(h))
        return None

    @staticmethod
    def _check_marker(entry: ProducerEntry | None, marker: EndTxnMarker | None) -> None:
        if marker is not None and entry is not None \
                and marker.coordinator_epoch < entry.coordinator_epoch:
            raise KafkaApiError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                f"coordinator epoch {marker.coordinator_epoch} < "
                                f"{entry.coordinator_epoch}")

    @staticmethod
    def _duplicate(entry: ProducerEntry | None, h: BatchHeader) -> tuple[int, int] | None:
        if entry is None or entry.epoch != h.producer_epoch:
            return None
        for b in entry.batches:
            if b.first_seq == h.base_sequence and b.last_seq == _last_seq(h):
                return b.first_offset, b.last_offset
        return None

    def update(self, headers: list[BatchHeader],
               markers: list[EndTxnMarker | None] | None = None) -> list[CompletedTxn]:
        """Record appended batches (offsets already assigned).

        Returns:
            The transactions the markers among ``headers`` closed, in order.
        """
        completed = []
        for i, h in enumerate(headers):
            if h.producer_id < 0:
                continue
            if h.is_control:
                done = self._apply_marker(h, markers[i] if markers else None)
                if done is not None:
                    completed.append(done)
                continue
            if h.base_sequence < 0 and not h.is_transactional:
                continue
            entry = self._entry(h.producer_id, h.producer_epoch)
            entry.last_timestamp = h.max_timestamp
            if h.base_sequence >= 0:
                entry.batches.append(_Batch(h.base_sequence, _last_seq(h), h.base_offset,
                                            h.last_offset))
            if h.is_transactional and entry.current_txn_first_offset == NO_TXN:
                entry.current_txn_first_offset = h.base_offset
                self.ongoing[h.base_offset] = h.producer_id
        return completed

    def _entry(self, producer_id: int, epoch: int) -> ProducerEntry:
        """The producer's entry at ``epoch``; a new epoch forgets the old batches
        (as Kafka's ProducerStateEntry.update) but keeps the transaction fields."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif entry.epoch != epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def _apply_marker(self, h: BatchHeader, marker: EndTxnMarker | None) -> CompletedTxn | None:
        entry = self._entry(h.producer_id, h.producer_epoch)
        entry.last_timestamp = h.max_timestamp
        if marker is None:
            return None
        entry.coordinator_epoch = marker.coordinator_epoch
        first = entry.current_txn_first_offset
        if first == NO_TXN:
            return None
        entry.current_txn_first_offset = NO_TXN
        self.ongoing.pop(first, None)
        others = [offset for offset, pid in self.ongoing.items() if pid != h.producer_id]
        lso = min(others) if others else h.base_offset + 1
        return CompletedTxn(h.producer_id, first, h.base_offset, not marker.committed, lso)

    def in_transaction(self, producer_id: int, epoch: int) -> bool:
        """Has this producer, at ``epoch``, an open transaction on this partition?
        (A leader verifies only the first batch of a transaction, KIP-890.)"""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.epoch == epoch \
            and entry.current_txn_first_offset != NO_TXN

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction, None if none is open."""
        return min(self.ongoing) if self.ongoing else None

    def truncate(self) -> None:
        self.producers.clear()
        self.ongoing.clear()

    # -- snapshots ---------------------------------------------------------------

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """Every producer as a snapshot entry (its newest batch only, as Kafka)."""
        out = []
        for pid, e in sorted(self.producers.items()):
            last = e.batches[-1] if e.batches else None
            out.append(SnapshotEntry(
                pid, e.epoch, last.last_seq if last else -1, last.last_offset if last else -1,
                last.last_offset - last.first_offset if last else 0, e.last_timestamp,
                e.coordinator_epoch, e.current_txn_first_offset))
        return out

    def load_snapshot(self, entries: list[SnapshotEntry]) -> None:
        """Replace the state with a snapshot's."""
        self.truncate()
        for s in entries:
            entry = ProducerEntry(s.producer_epoch, last_timestamp=s.timestamp,
                                  coordinator_epoch=s.coordinator_epoch,
                                  current_txn_first_offset=s.current_txn_first_offset)
            if s.last_offset >= 0:
                first_seq = (s.last_sequence - s.offset_delta) % (_INT_MAX + 1)
                entry.batches.append(_Batch(first_seq, s.last_sequence,
                                            s.last_offset - s.offset_delta, s.last_offset))
            self.producers[s.producer_id] = entry
            if s.current_txn_first_offset != NO_TXN:
                self.ongoing[s.current_txn_first_offset] = s.producer_id
