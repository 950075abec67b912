"""The aborted-transaction index: Kafka's .txnindex format, search rules, and the log's upkeep."""

from __future__ import annotations

import os
import struct

import pytest

from storage.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries
from tests.transactions.conftest import Producer, plain


def test_entry_golden_bytes():
    assert ENTRY_SIZE == 34
    assert AbortedTxn(producer_id=1000, first_offset=5, last_offset=9,
                      last_stable_offset=10).encode() == (
        b"\x00\x00"                    # version 0
        + struct.pack(">q", 1000)      # producerId
        + struct.pack(">q", 5)         # firstOffset
        + struct.pack(">q", 9)         # lastOffset (the ABORT marker)
        + struct.pack(">q", 10)        # lastStableOffset
    )


def test_decode_ignores_a_torn_tail_and_rejects_unknown_versions():
    a, b = AbortedTxn(1, 0, 3, 4), AbortedTxn(2, 5, 8, 9)
    data = a.encode() + b.encode()
    assert decode_entries(data) == [a, b]
    assert decode_entries(data + b"\x00" * 10) == [a, b]
    assert decode_entries(data[:40]) == [a]
    with pytest.raises(ValueError):
        decode_entries(b"\x00\x01" + data[2:])


def test_file_appears_on_first_abort(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path)
    assert index.existing_path is None and index.entries == [] and index.last_offset == -1
    index.append(AbortedTxn(1, 0, 3, 4))
    assert index.existing_path == path
    assert os.path.getsize(path) == ENTRY_SIZE
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 3, 4)]
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 1, 3, 4))  # marker offsets only increase


def test_collect_follows_kafkas_rules(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    e1 = AbortedTxn(1, 0, 10, 5)    # aborted while producer 2's transaction was open from 5
    e2 = AbortedTxn(2, 5, 20, 21)
    e3 = AbortedTxn(3, 30, 40, 41)
    for txn in (e1, e2, e3):
        index.append(txn)
    # overlapping: lastOffset >= fetch start and firstOffset < upper bound; the
    # search is complete at the first entry whose LSO reaches the upper bound
    assert index.collect(0, 6) == ([e1, e2], True)
    assert index.collect(11, 25) == ([e2], True)
    assert index.collect(41, 60) == ([], False)


def test_truncate_reset_delete(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    for txn in (AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21)):
        index.append(txn)
    index.truncate_to(20)
    assert TransactionIndex(index.path).entries == [AbortedTxn(1, 0, 10, 11)]
    index.reset()
    assert os.path.getsize(index.path) == 0 and index.entries == []
    index.delete()
    assert index.existing_path is None


# -- the log ------------------------------------------------------------------------------


def test_abort_marker_is_indexed_with_the_lso_at_the_time(env):
    lg = env.open()
    a, b = Producer(lg, 1), Producer(lg, 2)
    a.send(b"a0")            # 0: a's transaction
    b.send(b"b0")            # 1: b's transaction
    a.send(b"a1")            # 2
    a.end(committed=False)   # 3: abort a; b still open from 1 -> LSO 1
    b.end(committed=False)   # 4: abort b; nothing open -> LSO 5
    assert lg.active.txn_index.entries == [AbortedTxn(1, 0, 3, 1), AbortedTxn(2, 1, 4, 5)]


def test_commits_are_not_indexed(env):
    lg = env.open()
    a = Producer(lg, 1)
    a.send(b"a0")
    a.end(committed=True)
    assert lg.active.txn_index.existing_path is None


def test_a_transaction_spanning_segments_is_indexed_where_it_ends(env):
    lg = env.open(config={"segment_bytes": 250})
    a = Producer(lg, 1)
    first = a.send(b"x" * 100).first_offset
    a.send(b"y" * 100)
    plain(lg, b"z" * 100)
    marker = a.end(committed=False).first_offset
    assert len(lg.segments) > 1
    holder = next(s for s in lg.segments if s.base_offset <= marker <= s.last_offset)
    assert holder.txn_index.entries == [AbortedTxn(1, first, marker, marker + 1)]
    assert lg.collect_aborted(0, lg.end_offset) == [AbortedTxn(1, first, marker, marker + 1)]
    assert lg.collect_aborted(marker + 1, lg.end_offset + 1) == []


@pytest.mark.parametrize("clean", [True, False])
def test_index_is_rebuilt_after_recovery(env, clean):
    lg = env.open(config={"segment_bytes": 250})
    a = Producer(lg, 1)
    a.send(b"x" * 100)
    plain(lg, b"z" * 100)
    a.end(committed=False)
    expected = lg.collect_aborted(0, lg.end_offset)
    assert expected
    for seg in lg.segments:
        seg.txn_index.delete()
    lg.close()
    lg = env.open(clean_shutdown=clean)
    if clean:  # trusted segments keep whatever index they have on disk
        assert lg.collect_aborted(0, lg.end_offset) == []
    else:      # recovered segments are re-indexed by the producer-state replay
        assert lg.collect_aborted(0, lg.end_offset) == expected


def test_truncation_drops_entries_of_removed_markers(env):
    lg = env.open()
    a = Producer(lg, 1)
    a.send(b"a0")
    marker = a.end(committed=False).first_offset
    lg.truncate_to(marker)
    assert lg.active.txn_index.entries == []
    assert lg.first_unstable_offset == 0  # the transaction is open again


def _scan(entries: list[AbortedTxn], start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's collectAbortedTxns: every entry from the segment's first."""
    found = []
    for txn in entries:
        if txn.last_offset >= start and txn.first_offset < upper:
            found.append(txn)
        if txn.last_stable_offset >= upper:
            return found, True
    return found, False


def test_collect_by_binary_search_matches_a_full_scan() -> None:
    import random

    from storage.log.txn_index import collect_overlapping

    rng = random.Random(3)
    for _ in range(200):
        entries, offset, open_first = [], 0, None
        for _ in range(rng.randrange(0, 60)):
            first = offset + rng.randrange(0, 5)
            marker = first + rng.randrange(1, 30)
            # The LSO once this abort completes: an older open transaction's
            # first offset, or the log end (marker + 1).
            if open_first is None or rng.random() < 0.3:
                open_first = first if rng.random() < 0.3 else None
            lso = min(open_first, marker + 1) if open_first is not None else marker + 1
            entries.append(AbortedTxn(rng.randrange(9), first, marker, lso))
            offset = marker + 1
        for _ in range(20):
            start = rng.randrange(0, offset + 5)
            upper = start + 1 + rng.randrange(0, 80)
            assert collect_overlapping(entries, start, upper) == _scan(entries, start, upper)
