"""Producer-state snapshots: Kafka's file format, and the log's use of them."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest

from storage.log import producer_upkeep
from storage.log.producer_snapshot import (
    CorruptSnapshot,
    SnapshotEntry,
    SnapshotFiles,
    decode,
    encode,
)
from storage.log.producer_state import ProducerStateManager
from tests.transactions.conftest import Producer, plain

ENTRY_A = SnapshotEntry(producer_id=1000, producer_epoch=2, last_sequence=41, last_offset=99,
                        offset_delta=4, timestamp=1_700_000_000_123, coordinator_epoch=5,
                        current_txn_first_offset=95)
ENTRY_B = SnapshotEntry(2000, 0, -1, -1, 0, -1, -1, -1)


def test_golden_bytes():
    body = (
        struct.pack(">i", 2)                    # two producer entries
        + struct.pack(">q", 1000)               # producerId
        + struct.pack(">h", 2)                  # producerEpoch
        + struct.pack(">i", 41)                 # lastSequence
        + struct.pack(">q", 99)                 # lastOffset
        + struct.pack(">i", 4)                  # offsetDelta
        + struct.pack(">q", 1_700_000_000_123)  # timestamp
        + struct.pack(">i", 5)                  # coordinatorEpoch
        + struct.pack(">q", 95)                 # currentTxnFirstOffset
        + struct.pack(">qhiqiqiq", 2000, 0, -1, -1, 0, -1, -1, -1)
    )
    expected = (
        b"\x00\x01"                             # version 1
        + struct.pack(">I", crc32c.crc32c(body))  # CRC-32C of everything after it
        + body
    )
    assert len(body) == 4 + 2 * 46
    assert encode([ENTRY_A, ENTRY_B]) == expected
    assert decode(expected) == [ENTRY_A, ENTRY_B]


def test_empty_snapshot():
    data = encode([])
    assert data == b"\x00\x01" + struct.pack(">I", crc32c.crc32c(b"\x00" * 4)) + b"\x00" * 4
    assert decode(data) == []


def test_truncated_extended_and_flipped_snapshots_are_corrupt():
    data = encode([ENTRY_A, ENTRY_B])
    for cut in range(len(data)):
        with pytest.raises(CorruptSnapshot):
            decode(data[:cut])
    with pytest.raises(CorruptSnapshot):
        decode(data + b"\x00")
    for i in range(2, len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x40
        with pytest.raises(CorruptSnapshot):
            decode(bytes(flipped))
    with pytest.raises(CorruptSnapshot, match="version"):
        decode(b"\x00\x02" + data[2:])


def test_files_are_named_like_segments(tmp_path):
    files = SnapshotFiles(str(tmp_path))
    files.write(42, [ENTRY_A])
    assert os.listdir(tmp_path) == ["00000000000000000042.snapshot"]
    assert files.offsets() == [42]
    assert files.read(42) == [ENTRY_A]


# -- ProducerStateManager <-> snapshot ------------------------------------------------


def test_state_round_trips_through_entries(env):
    lg = env.open()
    a, b = Producer(lg, 1), Producer(lg, 2)
    a.send(b"a0", b"a1", transactional=False)
    a.send(b"a2", transactional=False)
    b.send(b"b0")  # open transaction from offset 3
    entries = lg.producers.snapshot_entries()
    assert entries == [SnapshotEntry(1, 0, 2, 2, 0, env.clock.now, -1, -1),
                       SnapshotEntry(2, 0, 0, 3, 0, env.clock.now, -1, 3)]
    restored = ProducerStateManager()
    restored.load_snapshot(entries)
    assert restored.first_undecided_offset() == 3
    assert restored.producers[1].last_seq == 2
    assert restored.producers[1].batches[-1].first_offset == 2


# -- the log's snapshots ----------------------------------------------------------------


def _idem(lg, seq, n=3, pid=9):
    p = Producer(lg, pid)
    p.seq = seq
    return p.send(*[f"v{seq + k}".encode() for k in range(n)], transactional=False)


def test_roll_writes_a_snapshot_at_the_new_base(env):
    lg = env.open()
    _idem(lg, 0)
    lg.roll()
    assert env.files(".snapshot") == ["00000000000000000003.snapshot"]
    assert lg.snapshots.read(3) == lg.producers.snapshot_entries()


def test_reopen_replays_only_after_the_latest_snapshot(env, monkeypatch):
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 30, 3):
        _idem(lg, seq)
    latest = lg.snapshots.offsets()[-1]
    assert latest > 0
    starts = []
    original = producer_upkeep.ProducerUpkeep._replay

    def spy(self, start):
        starts.append(start)
        return original(self, start)

    monkeypatch.setattr(producer_upkeep.ProducerUpkeep, "_replay", spy)
    lg.close()
    assert lg.end_offset != latest
    os.unlink(lg.snapshots.path(lg.end_offset))  # drop the close-time one: use the roll's
    lg = env.open(clean_shutdown=True)
    assert starts == [latest]
    retry = _idem(lg, 27)
    assert (retry.first_offset, retry.last_offset) == (27, 29)  # dedup survived
    assert _idem(lg, 30).first_offset == 30


def test_close_snapshots_the_log_end_and_reopen_replays_nothing(env, monkeypatch):
    lg = env.open()
    _idem(lg, 0)
    lg.close()
    assert env.files(".snapshot") == ["00000000000000000003.snapshot"]
    starts = []
    monkeypatch.setattr(producer_upkeep.ProducerUpkeep, "_replay", lambda self, s: starts.append(s))
    env.open(clean_shutdown=True)
    assert starts == [3]


def test_corrupt_latest_snapshot_falls_back_and_is_deleted(env):
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 30, 3):
        _idem(lg, seq)
    lg.close()
    latest = lg.snapshots.offsets()[-1]
    with open(lg.snapshots.path(latest), "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    lg = env.open(clean_shutdown=True)
    assert latest not in lg.snapshots.offsets()
    retry = _idem(lg, 27)
    assert (retry.first_offset, retry.last_offset) == (27, 29)


def test_snapshots_beyond_the_log_end_are_deleted(env):
    lg = env.open()
    _idem(lg, 0)
    lg.close()
    SnapshotFiles(env.dir).write(50, [])
    lg = env.open(clean_shutdown=True)
    assert lg.snapshots.offsets() == [3]


def test_only_a_few_snapshots_are_kept_and_none_below_the_first_segment(env):
    lg = env.open(config={"segment_bytes": 300, "retention_bytes": 600})
    for _ in range(20):
        plain(lg, b"x" * 100)
    assert len(lg.snapshots.offsets()) == producer_upkeep._SNAPSHOTS_KEPT
    lg.apply_retention(lg.end_offset)
    first = lg.segments[0].base_offset
    assert all(o >= first for o in lg.snapshots.offsets())


def test_truncation_deletes_later_snapshots_and_reloads(env):
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 30, 3):
        _idem(lg, seq)
    lg.truncate_to(12)
    assert all(o <= 12 for o in lg.snapshots.offsets())
    assert _idem(lg, 12).first_offset == 12


def test_unclean_reopen_ignores_snapshots_above_a_recovered_segment(env, monkeypatch):
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 30, 3):
        _idem(lg, seq)
    bases = [s.base_offset for s in lg.segments]
    starts = []
    original = producer_upkeep.ProducerUpkeep._replay

    def spy(self, start):
        starts.append(start)
        return original(self, start)

    monkeypatch.setattr(producer_upkeep.ProducerUpkeep, "_replay", spy)
    lg.close()
    # Recovery point in the middle: segments from bases[2] on are re-validated.
    lg = env.open(recovery_point=bases[2] + 1)
    assert starts and starts[0] <= bases[2]
    retry = _idem(lg, 27)
    assert (retry.first_offset, retry.last_offset) == (27, 29)


def test_each_closed_segment_has_the_snapshot_taken_when_it_was_rolled(env):
    """What tiered storage copies as the segment's producer_snapshot_index."""
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 12, 3):
        _idem(lg, seq)
    closed, active = lg.segments[-2], lg.segments[-1]
    assert lg.producer_snapshot_for(closed) == lg.snapshots.path(active.base_offset)
    assert lg.producer_snapshot_for(active) is None


@pytest.mark.parametrize("keep_older", [True, False])
async def test_a_closed_segments_lost_snapshot_is_made_again_by_replay(env, keep_older):
    """Tiered storage ships each closed segment with its roll-time snapshot; one
    that is gone is rebuilt from an older snapshot (or the first segment) and the
    batches in between, equal to the one the roll wrote."""
    lg = env.open()
    txn = Producer(lg, 77, epoch=3)
    _idem(lg, 0)
    lg.roll()
    txn.send(b"t1", b"t2")
    _idem(lg, 3)
    lg.roll()  # the transaction is open here
    _idem(lg, 6)
    txn.end(committed=False, coordinator_epoch=4)
    txn.send(b"t3")  # and a new one opens after the abort
    lg.roll()
    _idem(lg, 9)
    target = lg.segments[-2]  # closed; its snapshot is at the active segment's base
    offset = lg.segments[-1].base_offset
    rolled = lg.snapshots.read(offset)
    assert any(e.producer_id == 77 and e.current_txn_first_offset >= 0 for e in rolled)
    for older in lg.snapshots.offsets():
        if older == offset or not keep_older:
            lg.snapshots.delete(older)
    assert lg.producer_snapshot_for(target) is None
    path = await lg.producer_snapshot_ready(target)
    assert path == lg.snapshots.path(offset)
    assert lg.snapshots.read(offset) == rolled
    assert await lg.producer_snapshot_ready(lg.segments[-1]) is None  # the active one


async def test_the_copier_ships_a_lost_snapshot_made_again(env):
    lg = env.open(config={"segment_bytes": 300})
    for seq in range(0, 12, 3):
        _idem(lg, seq)
    closed = lg.segments[-2]
    lg.snapshots.delete(lg.segments[-1].base_offset)
    # What copier._copy_one hands the storage manager as producer_snapshot_index.
    assert await lg.producer_snapshot_ready(closed) == lg.snapshots.path(lg.segments[-1].base_offset)
