"""__transaction_state key/value formats: golden bytes, round trips, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.transactions import records as rec
from broker.transactions.state import TxnMetadata, TxnState
from protocol import control

S = TxnState


def test_key_golden_bytes():
    assert rec.encode_key("tx-1") == (
        b"\x00\x00"  # record type 0: TransactionLogKey
        b"\x00\x04"  # transactionalId length
        b"tx-1"
    )
    assert rec.decode_key(rec.encode_key("tx-1")) == "tx-1"


def test_ongoing_value_golden_bytes():
    txn = TxnMetadata("tx-1", producer_id=1000, producer_epoch=3, timeout_ms=60_000,
                      state=S.ONGOING, partitions=frozenset({("b", 1), ("a", 2), ("a", 0)}),
                      start_timestamp=1_700_000_000_000, last_update_timestamp=1_700_000_000_500)
    expected = (
        b"\x00\x00"                          # value version 0
        + struct.pack(">q", 1000)            # producerId
        + struct.pack(">h", 3)               # producerEpoch
        + struct.pack(">i", 60_000)          # transactionTimeoutMs
        + b"\x01"                            # transactionStatus: Ongoing
        + struct.pack(">i", 2)               # two topics
        + b"\x00\x01a" + struct.pack(">iii", 2, 0, 2)   # topic a: partitions [0, 2]
        + b"\x00\x01b" + struct.pack(">ii", 1, 1)       # topic b: partitions [1]
        + struct.pack(">q", 1_700_000_000_500)          # lastUpdateTimestamp
        + struct.pack(">q", 1_700_000_000_000)          # startTimestamp
    )
    assert rec.encode_value(txn) == expected
    assert rec.decode_value("tx-1", expected) == txn


def test_empty_state_writes_null_partitions():
    txn = TxnMetadata("t", 5, 0, 1000, S.EMPTY, last_update_timestamp=9)
    data = rec.encode_value(txn)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"  # null array
    assert rec.decode_value("t", data) == txn


def test_complete_state_writes_an_empty_array():
    txn = TxnMetadata("t", 5, 0, 1000, S.COMPLETE_COMMIT, start_timestamp=3,
                      last_update_timestamp=9)
    data = rec.encode_value(txn)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\x00\x00\x00\x00"
    assert rec.decode_value("t", data) == txn


names = st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20)


@given(
    state=st.sampled_from([s for s in S if s is not S.PREPARE_EPOCH_FENCE]),
    pid=st.integers(0, 2**63 - 1), epoch=st.integers(-1, 2**15 - 1),
    timeout=st.integers(1, 2**31 - 1),
    partitions=st.frozensets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=6),
    start=st.integers(-1, 2**62), update=st.integers(-1, 2**62),
    tv2=st.booleans(), next_pid=st.sampled_from([-1, 0, 2**40]),
)
def test_round_trip(state, pid, epoch, timeout, partitions, start, update, tv2, next_pid):
    if state is S.EMPTY:
        partitions = frozenset()
    txn = TxnMetadata("id", pid, epoch, timeout, state, partitions, start, update,
                      client_tv2=tv2, next_producer_id=next_pid)
    data = rec.encode_value(txn)
    assert data[:2] == (b"\x00\x01" if tv2 or next_pid != -1 else b"\x00\x00")
    assert rec.decode_value("id", data) == txn


def test_flexible_value_golden_bytes():
    """Version 1, for a transactions-v2 client's id (Kafka's TransactionLogValue v1)."""
    txn = TxnMetadata("tx-1", producer_id=1000, producer_epoch=3, timeout_ms=60_000,
                      state=S.PREPARE_COMMIT, partitions=frozenset({("a", 0), ("a", 2)}),
                      start_timestamp=7, last_update_timestamp=9, client_tv2=True,
                      next_producer_id=1001)
    expected = (
        b"\x00\x01"                          # value version 1
        + struct.pack(">q", 1000)            # producerId
        + struct.pack(">h", 3)               # producerEpoch
        + struct.pack(">i", 60_000)          # transactionTimeoutMs
        + b"\x02"                            # transactionStatus: PrepareCommit
        + b"\x02"                            # compact array: one topic
        + b"\x02a"                           # compact string "a"
        + b"\x03" + struct.pack(">ii", 0, 2)  # compact array: partitions [0, 2]
        + b"\x00"                            # the entry's tagged fields: none
        + struct.pack(">q", 9)               # lastUpdateTimestamp
        + struct.pack(">q", 7)               # startTimestamp
        + b"\x02"                            # two tagged fields
        + b"\x01\x08" + struct.pack(">q", 1001)  # tag 1 NextProducerId
        + b"\x02\x02" + struct.pack(">h", 2)     # tag 2 ClientTransactionVersion 2
    )
    assert rec.encode_value(txn) == expected
    assert rec.decode_value("tx-1", expected) == txn
    # Unknown tags (PreviousProducerId, tag 0) are read past.
    with_previous = expected[:-15] + b"\x03" + b"\x00\x08" + struct.pack(">q", 5) + expected[-14:]
    assert rec.decode_value("tx-1", with_previous) == txn


@pytest.mark.parametrize("tv2", [False, True])
def test_every_truncation_is_rejected(tv2):
    data = rec.encode_value(TxnMetadata("t", 5, 0, 1000, S.ONGOING, frozenset({("a", 0)}), 1, 2,
                                        client_tv2=tv2))
    for cut in range(len(data)):
        with pytest.raises(rec.RecordFormatError):
            rec.decode_value("t", data[:cut])


@pytest.mark.parametrize("data, error", [
    (b"\x00\x02" + b"\x00" * 40, "version 2"),
    (b"\x00\x00" + struct.pack(">qhib", 1, 0, 1, 9) + b"\xff" * 4 + b"\x00" * 16, "state 9"),
])
def test_unknown_versions_and_states_are_rejected(data, error):
    with pytest.raises(rec.RecordFormatError, match=error):
        rec.decode_value("t", data)


def test_unknown_key_type_is_rejected():
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(b"\x00\x01\x00\x01a")


def test_marker_records_golden_bytes():
    assert control.encode_key(committed=True) == b"\x00\x00\x00\x01"   # version 0, COMMIT
    assert control.encode_key(committed=False) == b"\x00\x00\x00\x00"  # version 0, ABORT
    assert control.encode_value(7) == b"\x00\x00\x00\x00\x00\x07"       # version 0, epoch 7
    assert control.decode_marker(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07") == \
        control.EndTxnMarker(True, 7)
    assert control.decode_marker(b"\x00\x00\x00\x02", b"") is None      # LEADER_CHANGE
