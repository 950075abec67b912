"""Offset and time indexes: Kafka's file formats, lookups, truncation, sanity checks on load."""

from __future__ import annotations

import struct

import pytest

from storage.log.index import OffsetIndex, TimeIndex

BASE = 1000


@pytest.fixture
def offset_index(tmp_path):
    idx = OffsetIndex(str(tmp_path / "00000000000000001000.index"), BASE, 10 * 8)
    yield idx
    idx.close()


@pytest.fixture
def time_index(tmp_path):
    idx = TimeIndex(str(tmp_path / "00000000000000001000.timeindex"), BASE, 10 * 12)
    yield idx
    idx.close()


def _file(idx) -> bytes:
    with open(idx.path, "rb") as f:
        return f.read()


def test_offset_index_file_is_kafka_format(offset_index):
    offset_index.append(1004, 0)
    offset_index.append(1010, 4200)
    assert _file(offset_index) == (
        struct.pack(">ii", 4, 0)       # relative offset 4, position 0
        + struct.pack(">ii", 10, 4200)  # relative offset 10, position 4200
    )


def test_offset_index_lookup(offset_index):
    for off, pos in [(1004, 100), (1010, 200), (1020, 300)]:
        offset_index.append(off, pos)
    assert offset_index.lookup(999) == (BASE, 0)
    assert offset_index.lookup(1003) == (BASE, 0)
    assert offset_index.lookup(1004) == (1004, 100)
    assert offset_index.lookup(1015) == (1010, 200)
    assert offset_index.lookup(10**9) == (1020, 300)
    assert offset_index.last_offset == 1020


def test_offset_index_ignores_non_increasing_appends(offset_index):
    offset_index.append(1005, 10)
    offset_index.append(1005, 20)
    offset_index.append(1001, 30)
    assert list(offset_index.offsets) == [1005]
    assert len(_file(offset_index)) == 8


def test_offset_index_full(offset_index):
    for i in range(10):
        assert not offset_index.is_full
        offset_index.append(BASE + i, i * 10)
    assert offset_index.is_full


def test_offset_index_truncate_rewrites_file(offset_index):
    for off, pos in [(1004, 100), (1010, 200), (1020, 300)]:
        offset_index.append(off, pos)
    offset_index.truncate_to(1010)
    assert list(offset_index.offsets) == [1004]
    assert _file(offset_index) == struct.pack(">ii", 4, 100)
    offset_index.append(1008, 150)
    assert _file(offset_index) == struct.pack(">ii", 4, 100) + struct.pack(">ii", 8, 150)
    offset_index.reset()
    assert len(offset_index) == 0 and _file(offset_index) == b""


def test_offset_index_load(tmp_path, offset_index):
    for off, pos in [(1004, 100), (1010, 200)]:
        offset_index.append(off, pos)
    offset_index.close()
    fresh = OffsetIndex(offset_index.path, BASE, 80)
    assert fresh.load(log_size=1000)
    assert list(fresh.offsets) == [1004, 1010] and list(fresh.positions) == [100, 200]


@pytest.mark.parametrize("content, log_size", [
    (None, 1000),                                                  # missing file
    (struct.pack(">ii", 4, 100) + b"\x00\x00\x00", 1000),          # partial entry
    (struct.pack(">ii", 4, 100) + struct.pack(">ii", 3, 200), 1000),  # offsets go back
    (struct.pack(">ii", 4, 100) + struct.pack(">ii", 5, 100), 1000),  # positions repeat
    (struct.pack(">ii", -1, 100), 1000),                           # negative relative offset
    (struct.pack(">ii", 4, 1000), 1000),                           # position past the log
])
def test_offset_index_load_rejects_insane_files(tmp_path, content, log_size):
    path = tmp_path / "x.index"
    if content is not None:
        path.write_bytes(content)
    idx = OffsetIndex(str(path), BASE, 80)
    assert not idx.load(log_size)


def test_time_index_file_is_kafka_format(time_index):
    time_index.append(5000, 1002)
    time_index.append(6000, 1009)
    assert _file(time_index) == (
        struct.pack(">qi", 5000, 2)    # timestamp, relative offset
        + struct.pack(">qi", 6000, 9)
    )


def test_time_index_keeps_only_increasing_timestamps(time_index):
    time_index.append(5000, 1002)
    time_index.append(4000, 1003)
    time_index.append(5000, 1004)
    assert list(time_index.timestamps) == [5000]


def test_time_index_lookup_gives_a_safe_scan_start(time_index):
    for ts, off in [(5000, 1002), (6000, 1009), (7000, 1015)]:
        time_index.append(ts, off)
    assert time_index.lookup(100) == BASE
    assert time_index.lookup(5000) == BASE
    assert time_index.lookup(5001) == 1002
    assert time_index.lookup(7000) == 1009
    assert time_index.lookup(10**12) == 1015


def test_time_index_truncate_and_load(time_index):
    for ts, off in [(5000, 1002), (6000, 1009), (7000, 1015)]:
        time_index.append(ts, off)
    time_index.truncate_to(1009)
    assert list(time_index.offsets) == [1002]
    assert _file(time_index) == struct.pack(">qi", 5000, 2)
    time_index.close()
    fresh = TimeIndex(time_index.path, BASE, 120)
    assert fresh.load(last_offset=1005)
    assert list(fresh.timestamps) == [5000]
    again = TimeIndex(time_index.path, BASE, 120)
    assert not again.load(last_offset=1001)  # entry beyond the segment's last offset


def test_time_index_load_rejects_decreasing_timestamps(tmp_path):
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qi", 5000, 1) + struct.pack(">qi", 4000, 2))
    assert not TimeIndex(str(path), BASE, 120).load(2000)
