"""LogSegment: appends, offset lookup, bounded reads, recovery, truncation, reload."""

from __future__ import annotations

import os

import pytest

from protocol import records
from storage.log.segment import LogSegment, filename_prefix
from tests.helpers import T0, decode_all

BASE = 100


def _open(tmp_path, interval: int = 0, base: int = BASE) -> LogSegment:
    return LogSegment(str(tmp_path), base, 1 << 20, interval, T0)


def _append(seg: LogSegment, offset: int, n: int = 1, ts: int = T0, size: int = 10) -> bytes:
    data = records.build_batch([(None, bytes([offset % 256]) * size)] * n, base_offset=offset,
                               timestamp=ts)
    seg.append(data, records.validate_for_append(data, 1 << 20))
    return data


@pytest.fixture
def seg(tmp_path):
    s = _open(tmp_path)
    yield s
    s.close()


def _fill(seg: LogSegment, count: int = 10, per_batch: int = 2) -> list[bytes]:
    """Batches at BASE, BASE+2, ... with increasing timestamps."""
    return [_append(seg, BASE + i * per_batch, per_batch, ts=T0 + i) for i in range(count)]


def test_file_names_are_kafka_style(tmp_path, seg):
    assert filename_prefix(5) == "00000000000000000005"
    _append(seg, BASE)
    names = sorted(os.listdir(tmp_path))
    assert names == ["00000000000000000100.index", "00000000000000000100.log",
                     "00000000000000000100.timeindex"]  # both indexes, even if empty


def test_append_tracks_offsets_size_and_timestamps(seg):
    a = _append(seg, BASE, 3, ts=T0 + 5)
    b = _append(seg, BASE + 3, 1, ts=T0 + 2)
    assert seg.size == len(a) + len(b)
    assert seg.last_offset == BASE + 3
    assert seg.max_timestamp == T0 + 5 and seg.offset_of_max_timestamp == BASE + 2
    assert seg.first_batch_timestamp == T0 + 5
    with open(seg.log_path, "rb") as f:
        assert f.read() == a + b  # the .log file is the batches back to back


def test_index_entry_per_interval(tmp_path):
    seg = _open(tmp_path, interval=150)
    sizes = []
    for i in range(10):
        sizes.append(len(_append(seg, BASE + i, size=40)))
    # An entry is written once more than 150 bytes were appended since the last one.
    expected, since, pos = [], 0, 0
    for i, size in enumerate(sizes):
        if since > 150:
            expected.append((BASE + i, pos))
            since = 0
        since += size
        pos += size
    assert list(zip(seg.index.offsets, seg.index.positions, strict=True)) == expected
    assert expected  # the test exercised indexing
    seg.close()


def test_find_every_offset(seg):
    batches = _fill(seg, 10, 3)
    pos = 0
    for i, data in enumerate(batches):
        for k in range(3):
            found = seg.find(BASE + 3 * i + k)
            assert (found.position, found.base_offset, found.size) == (pos, BASE + 3 * i, len(data))
        pos += len(data)
    assert seg.find(BASE + 30) is None
    assert seg.find(0).base_offset == BASE
    assert seg.position_of(BASE + 30) == seg.size


def test_read_whole_batches_within_budget(seg):
    batches = _fill(seg, 5)
    data, pos = seg.read(BASE, len(batches[0]) + len(batches[1]) + 5, None, True)
    assert (data, pos) == (batches[0] + batches[1], 0)
    data, pos = seg.read(BASE + 5, 10**6, None, True)  # mid-batch offset: its whole batch
    assert data == b"".join(batches[2:]) and pos == len(batches[0]) * 2


def test_read_respects_max_position(seg):
    batches = _fill(seg, 5)
    limit = len(batches[0]) * 2
    data, _ = seg.read(BASE, 10**6, limit, True)
    assert data == batches[0] + batches[1]
    assert seg.read(BASE + 4, 10**6, limit, True) is None


def test_min_one_batch(seg):
    batches = _fill(seg, 3)
    data, _ = seg.read(BASE, 10, None, True)
    assert data == batches[0]
    # Over budget without min_one_batch: nothing, but the batch was found (so the
    # log does not move on to a later segment in its place).
    assert seg.read(BASE, 10, None, False) == (b"", 0)


def test_sequential_reads_follow_the_hint_and_random_reads_stay_right(seg):
    batches = _fill(seg, 20)
    offset, got = BASE, []
    while (res := seg.read(offset, len(batches[0]), None, True)) is not None:
        recs = decode_all(res[0])
        got.extend(r.offset for r in recs)
        offset = recs[-1].offset + 1
    assert got == list(range(BASE, BASE + 40))
    for target in (BASE + 17, BASE + 3, BASE + 39, BASE):
        data, _ = seg.read(target, 1, None, True)
        assert records.parse_header(data, 0).base_offset == target - (target - BASE) % 2


def test_iter_batches_and_header(seg):
    batches = _fill(seg, 4)
    listed = list(seg.iter_batches())
    assert [b.base_offset for b in listed] == [100, 102, 104, 106]
    assert [b.last_offset for b in listed] == [101, 103, 105, 107]
    assert seg.read_batch_bytes(listed[2]) == batches[2]
    assert seg.read_batch_bytes_header(listed[2]).base_timestamp == T0 + 2


def test_truncate_to_batch_boundary(seg):
    batches = _fill(seg, 6)
    removed = seg.truncate_to(BASE + 6)
    assert removed == sum(len(b) for b in batches[3:])
    assert seg.size == sum(len(b) for b in batches[:3])
    assert seg.last_offset == BASE + 5
    assert seg.max_timestamp == T0 + 2
    # Interval 0: an entry at every batch but the first; those below the cut stay.
    assert list(seg.time_index.offsets) == [BASE + 3, BASE + 5]
    assert seg.find(BASE + 6) is None
    assert seg.truncate_to(BASE + 100) == 0
    # Appending after the truncation continues cleanly, and the read hint is not stale.
    new = _append(seg, BASE + 6, 2, ts=T0 + 50)
    data, _ = seg.read(BASE + 6, 10**6, None, True)
    assert data == new


def test_time_index_is_as_sparse_as_the_offset_index_and_sealed_with_the_max(tmp_path):
    # Kafka's LogSegment: a time index entry (the largest timestamp so far) only
    # with an offset index entry, and the last one when the segment stops being
    # active: not a file write for every batch with a new timestamp.
    seg = _open(tmp_path, interval=150)
    for i in range(10):
        _append(seg, BASE + i, ts=T0 + i, size=40)
    assert len(seg.index) >= 2
    assert list(seg.time_index.offsets) == list(seg.index.offsets)
    assert list(seg.time_index.timestamps) == [T0 + o - BASE for o in seg.index.offsets]
    seg.seal()
    assert (seg.time_index.timestamps[-1], seg.time_index.offsets[-1]) == (T0 + 9, BASE + 9)
    seg.seal()  # nothing new: no second entry
    assert len(seg.time_index) == len(seg.index) + 1
    seg.close()


def test_truncate_everything(seg):
    _fill(seg, 3)
    seg.truncate_to(BASE)
    assert seg.is_empty and seg.last_offset == BASE - 1
    assert seg.max_timestamp == -1


def test_recover_intact_segment_rebuilds_indexes(tmp_path):
    seg = _open(tmp_path, interval=100)
    _fill(seg, 20)
    offsets, positions = list(seg.index.offsets), list(seg.index.positions)
    times = list(seg.time_index.timestamps)
    assert seg.recover(1 << 20) == 0
    assert (list(seg.index.offsets), list(seg.index.positions)) == (offsets, positions)
    assert list(seg.time_index.timestamps) == times
    assert seg.last_offset == BASE + 39
    seg.close()


def test_recover_truncates_torn_tail(seg):
    batches = _fill(seg, 5)
    with open(seg.log_path, "r+b") as f:
        f.truncate(seg.size - 7)
    seg.size -= 7
    assert seg.recover(1 << 20) == len(batches[-1]) - 7
    assert seg.size == sum(len(b) for b in batches[:4])
    assert seg.last_offset == BASE + 7
    assert os.path.getsize(seg.log_path) == seg.size


def _flip_byte(path: str, at: int) -> None:
    with open(path, "r+b") as f:  # not the segment's fd: it is O_APPEND
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


def test_recover_stops_at_corrupt_batch(seg):
    batches = _fill(seg, 5)
    at = len(batches[0]) + len(batches[1]) + 40  # inside batch 2's CRC'd bytes
    _flip_byte(seg.log_path, at)
    seg.recover(1 << 20)
    assert seg.size == len(batches[0]) + len(batches[1])
    assert seg.last_offset == BASE + 3


def test_recover_stops_at_non_increasing_offsets(seg):
    batches = _fill(seg, 2)
    _append(seg, BASE + 1)  # offsets go backwards
    seg.recover(1 << 20)
    assert seg.size == len(batches[0]) + len(batches[1])


def test_load_indexes_after_close(tmp_path):
    seg = _open(tmp_path, interval=100)
    batches = _fill(seg, 20)
    offsets = list(seg.index.offsets)
    seg.close()
    again = _open(tmp_path, interval=100)
    assert again.load_indexes()
    assert list(again.index.offsets) == offsets
    assert again.last_offset == BASE + 39
    assert again.max_timestamp == T0 + 19 and again.offset_of_max_timestamp == BASE + 39
    data, _ = again.read(BASE + 20, 10**6, None, True)
    assert data == b"".join(batches[10:])
    again.close()


def test_load_indexes_restores_max_timestamp(tmp_path):
    # Retention by time and timestamp lookups rely on these after a clean restart.
    seg = _open(tmp_path, interval=100)
    _fill(seg, 20)
    seg.close()
    again = _open(tmp_path, interval=100)
    assert again.load_indexes()
    assert again.max_timestamp == T0 + 19
    assert again.offset_of_max_timestamp == BASE + 39
    again.close()


def test_load_indexes_refuses_a_torn_tail(tmp_path):
    seg = _open(tmp_path, interval=100)
    _fill(seg, 5)
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 30)
    again = _open(tmp_path, interval=100)
    assert not again.load_indexes()
    again.close()


def test_delete_removes_files(tmp_path):
    seg = _open(tmp_path, interval=0)
    _fill(seg, 3)
    seg.delete()
    assert os.listdir(tmp_path) == []


def test_fsync_of_a_segment_closed_meanwhile_is_skipped(tmp_path):
    """A flush thread may reach a segment the event loop has just deleted (a
    follower rebuilt from the remote tier): skipped, not a crash of the broker."""
    seg = _open(tmp_path, interval=0)
    _fill(seg, 3)
    seg.delete()
    seg.fsync()


def test_a_zero_copy_read_is_a_slice_only_from_sendfile_min_bytes(seg):
    """Small reads come as bytes (one copy beats a dup, a sendfile and a close);
    large ones as a slice of the file; both are the same bytes."""
    from storage.log.file_slice import FileSlice
    from storage.log.segment import SENDFILE_MIN_BYTES

    small = _append(seg, BASE, size=100)
    big = _append(seg, BASE + 1, size=SENDFILE_MIN_BYTES)
    got, _ = seg.read(BASE, len(small), None, True, zero_copy=True)
    assert isinstance(got, bytes) and got == small
    got, _ = seg.read(BASE + 1, 1 << 20, None, True, zero_copy=True)
    assert isinstance(got, FileSlice) and got.read() == big
    got.close()
