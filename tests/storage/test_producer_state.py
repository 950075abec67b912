"""Idempotent-producer state: duplicates, sequence gaps, epochs (KIP-98 rules)."""

from __future__ import annotations

import pytest

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.producer_state import DEDUP_WINDOW, ProducerStateManager

PID = 4242
_next_offset = [0]


def _headers(seq: int, n: int = 1, epoch: int = 0, pid: int = PID) -> list[records.BatchHeader]:
    buf = bytearray(records.build_batch([(None, b"v")] * n, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=seq))
    headers = records.validate_for_append(buf, 1 << 20)
    records.assign_offsets(buf, headers, _next_offset[0], 0, None)
    _next_offset[0] += n
    return headers


def _append(state: ProducerStateManager, seq: int, n: int = 1, epoch: int = 0,
            pid: int = PID) -> list[records.BatchHeader]:
    headers = _headers(seq, n, epoch, pid)
    assert state.check(headers) is None
    state.update(headers)
    return headers


def _error(state: ProducerStateManager, headers) -> ErrorCode:
    with pytest.raises(KafkaApiError) as info:
        state.check(headers)
    return info.value.code


@pytest.fixture
def state():
    return ProducerStateManager()


def test_in_sequence_batches_are_accepted(state):
    _append(state, 0, 3)
    _append(state, 3, 2)
    _append(state, 5, 1)
    assert state.producers[PID].last_seq == 5


def test_duplicate_returns_original_offsets(state):
    first = _append(state, 0, 3)[0]
    second = _append(state, 3, 2)[0]
    assert state.check(_headers(0, 3)) == (first.base_offset, first.last_offset)
    assert state.check(_headers(3, 2)) == (second.base_offset, second.last_offset)


def test_duplicates_are_remembered_for_five_batches(state):
    appended = [_append(state, i, 1)[0] for i in range(DEDUP_WINDOW + 1)]
    oldest_kept = appended[1]
    assert state.check(_headers(1)) == (oldest_kept.base_offset, oldest_kept.last_offset)
    assert _error(state, _headers(0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gap_is_out_of_order(state):
    _append(state, 0, 3)
    assert _error(state, _headers(4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _error(state, _headers(2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_stale_epoch_is_fenced(state):
    _append(state, 0, 1, epoch=3)
    assert _error(state, _headers(1, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero(state):
    _append(state, 0, 5, epoch=1)
    assert _error(state, _headers(5, epoch=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    _append(state, 0, 1, epoch=2)
    assert state.producers[PID].epoch == 2
    assert state.check(_headers(1, epoch=2)) is None


def test_sequence_wraps_after_int_max(state):
    state.update(_headers(2**31 - 2, 2))  # recorded as replayed from the log: 2147483646..7
    assert state.producers[PID].last_seq == 2**31 - 1
    assert state.check(_headers(0)) is None


def test_several_batches_of_one_request_chain(state):
    a, b = _headers(0, 2), _headers(2, 3)
    assert state.check(a + b) is None
    assert _error(state, _headers(0, 2) + _headers(3, 1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producers_are_independent(state):
    _append(state, 0, 3, pid=1)
    _append(state, 0, 1, pid=2)
    assert state.check(_headers(3, pid=1)) is None
    assert state.check(_headers(1, pid=2)) is None


def test_non_idempotent_batches_are_ignored(state):
    headers = _headers(-1, 2, epoch=-1, pid=-1)
    assert state.check(headers) is None
    state.update(headers)
    assert state.producers == {}


def test_truncate_forgets_everything(state):
    _append(state, 0, 3)
    state.truncate()
    assert state.producers == {}


def test_unknown_producer_accepts_any_sequence(state):
    # Kafka (ProducerAppendInfo.checkSequence) accepts any sequence from a producer it has
    # no state for: its batches may have been removed by retention or DeleteRecords.
    assert state.check(_headers(57, epoch=0)) is None
