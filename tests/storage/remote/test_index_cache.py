"""RemoteIndexCache: byte bound, disk reuse across restarts, corrupt entries."""

from __future__ import annotations

import os
import struct

import pytest

from storage.remote.index_cache import CACHE_DIR, RemoteIndexCache, parse_indexes


def index_bytes(base: int, entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", off - base, pos) for off, pos in entries)


def time_bytes(base: int, entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", ts, off - base) for ts, off in entries)


class Downloads:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, base: int):  # type: ignore[no-untyped-def]
        def fetch() -> tuple[bytes, bytes]:
            self.count += 1
            return (index_bytes(base, [(base + 10, 4096), (base + 20, 8192)]),
                    time_bytes(base, [(1000, base + 5), (2000, base + 15)]))
        return fetch


def test_lookups_use_the_parsed_indexes():
    idx = parse_indexes(100, index_bytes(100, [(110, 4096), (120, 8192)]),
                        time_bytes(100, [(1000, 105), (2000, 115)]))
    assert idx.position_for(99) == 0
    assert idx.position_for(110) == 4096
    assert idx.position_for(119) == 4096
    assert idx.position_for(500) == 8192
    assert idx.offset_for_timestamp(500) == 100
    assert idx.offset_for_timestamp(1500) == 105


def test_corrupt_index_is_refused():
    with pytest.raises(ValueError):
        parse_indexes(0, index_bytes(0, [(10, 4096), (5, 8192)]), b"")


def test_bounded_by_bytes_and_evicts_files(tmp_path):
    entry = 2 * 8 + 2 * 12
    cache = RemoteIndexCache(str(tmp_path), max_bytes=3 * entry)
    fetch = Downloads()
    for i in range(10):
        cache.get(f"seg{i}", i * 100, fetch(i * 100))
    assert cache.size_bytes <= 3 * entry
    assert len(cache) == 3
    on_disk = os.listdir(tmp_path / CACHE_DIR)
    assert len(on_disk) == 6, on_disk  # .index + .timeindex of the 3 kept


def test_restart_reuses_disk_and_removes_temp_files(tmp_path):
    fetch = Downloads()
    cache = RemoteIndexCache(str(tmp_path), max_bytes=1 << 20)
    for i in range(3):
        cache.get(f"seg{i}", i * 100, fetch(i * 100))
    assert fetch.count == 3
    (tmp_path / CACHE_DIR / "junk.index.tmp").write_bytes(b"x")
    again = RemoteIndexCache(str(tmp_path), max_bytes=1 << 20)
    assert not (tmp_path / CACHE_DIR / "junk.index.tmp").exists()
    assert again.size_bytes == cache.size_bytes
    for i in range(3):
        assert again.get(f"seg{i}", i * 100, fetch(i * 100)).position_for(i * 100 + 25) == 8192
    assert fetch.count == 3, "restart downloaded again instead of reusing the disk"


def test_restart_with_a_smaller_bound_evicts_at_once(tmp_path):
    fetch = Downloads()
    cache = RemoteIndexCache(str(tmp_path), max_bytes=1 << 20)
    for i in range(5):
        cache.get(f"seg{i}", i * 100, fetch(i * 100))
    small = RemoteIndexCache(str(tmp_path), max_bytes=cache.size_bytes // 2)
    assert small.size_bytes <= cache.size_bytes // 2
    assert len(os.listdir(tmp_path / CACHE_DIR)) == 2 * len(small)
