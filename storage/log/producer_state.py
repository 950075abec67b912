"""Idempotent-producer state of one partition (KIP-98 sequence checks).

For every producer id the log remembers its epoch and the last five
batches it appended (first/last sequence and offsets). A retried batch that
matches one of them is a duplicate: it is not appended again and the client
gets the original offset. A batch whose first sequence does not follow the
last one is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is fenced
(INVALID_PRODUCER_EPOCH). Five is Kafka's max.in.flight limit for
idempotence, hence the window.

Rebuilt on load by reading batch headers (no decompression).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from protocol.errors import ErrorCode, KafkaApiError
from protocol.records import BatchHeader

# Batches remembered per producer: the client's max in-flight for idempotence.
DEDUP_WINDOW = 5
_INT_MAX = 2**31 - 1


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == _INT_MAX else seq + 1


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % (_INT_MAX + 1)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, headers: list[BatchHeader]) -> tuple[int, int] | None:
        """Validate the idempotent batches of one produce request.

        Returns:
            (first offset, last offset) of the original append if the whole
            request is a duplicate of a recent one, else None.

        Raises:
            KafkaApiError: INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER.
        """
        pending: dict[int, tuple[int, int]] = {}
        for h in headers:
            if h.producer_id < 0:
                continue
            entry = self.producers.get(h.producer_id)
            epoch, last = pending.get(h.producer_id, (entry.epoch, entry.last_seq) if entry
                                      else (-1, -1))
            if entry is not None and h.producer_epoch < entry.epoch:
                raise KafkaApiError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                    f"epoch {h.producer_epoch} < {entry.epoch}")
            dup = self._duplicate(entry, h)
            if dup is not None and len(headers) == 1:
                return dup
            if h.producer_epoch != epoch:
                if h.base_sequence != 0:
                    raise KafkaApiError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        f"new epoch {h.producer_epoch} must start at sequence 0")
            elif h.base_sequence != _next_seq(last):
                raise KafkaApiError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    f"expected sequence {_next_seq(last)}, got {h.base_sequence}")
            pending[h.producer_id] = (h.producer_epoch, _last_seq(h))
        return None

    @staticmethod
    def _duplicate(entry: ProducerEntry | None, h: BatchHeader) -> tuple[int, int] | None:
        if entry is None or entry.epoch != h.producer_epoch:
            return None
        for b in entry.batches:
            if b.first_seq == h.base_sequence and b.last_seq == _last_seq(h):
                return b.first_offset, b.last_offset
        return None

    def update(self, headers: list[BatchHeader]) -> None:
        """Record appended batches (offsets already assigned)."""
        for h in headers:
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            entry = self.producers.get(h.producer_id)
            if entry is None or entry.epoch != h.producer_epoch:
                entry = ProducerEntry(h.producer_epoch)
                self.producers[h.producer_id] = entry
            entry.batches.append(_Batch(h.base_sequence, _last_seq(h), h.base_offset,
                                        h.last_offset))

    def truncate(self) -> None:
        self.producers.clear()
