"""File slices: their own descriptor, exact reads, short files detected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.log.file_slice import FileSlice, ShortFileSlice


def test_a_slice_outlives_the_descriptor_it_was_made_from(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(bytes(range(256)) * 4)
    fd = os.open(path, os.O_RDONLY)
    piece = FileSlice(fd, 10, 100, last_offset=5)
    os.close(fd)
    path.unlink()
    # Another file may now get the old descriptor number: the slice still reads its own.
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    os.write(other, b"z" * 200)
    try:
        assert piece.read() == (bytes(range(256)) * 4)[10:110]
        assert len(piece) == 100 and piece.last_offset == 5
    finally:
        os.close(other)
        piece.close()
    piece.close()  # idempotent
    assert piece.fd == -1


def test_a_file_truncated_under_a_slice_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"a" * 1000)
    fd = os.open(path, os.O_RDWR)
    piece = FileSlice(fd, 900, 100, last_offset=0)
    os.ftruncate(fd, 950)
    os.close(fd)
    with pytest.raises(ShortFileSlice):
        piece.read()
    piece.close()


def test_a_dropped_slice_closes_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"a" * 10)
    fd = os.open(path, os.O_RDONLY)
    piece = FileSlice(fd, 0, 10, last_offset=0)
    dup = piece.fd
    del piece
    with pytest.raises(OSError):
        os.fstat(dup)
    os.close(fd)


def test_cached_probes_each_page_once_and_sees_an_evicted_one(tmp_path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(os.urandom(8 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # only clean pages can be evicted
        os.pread(fd, 8 << 20, 0)
        assert FileSlice(fd, 100, 50, 0).cached()  # one page: one probe
        assert FileSlice(fd, 0, 0, 0).cached()  # nothing to send
        # Evicted from 4 MiB on (large page-cache folios: evict whole MiBs).
        os.posix_fadvise(fd, 4 << 20, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # and no readahead
        assert FileSlice(fd, (4 << 20) - 8192, 4096, 0).cached()
        # Shorter than a probe stride: its first page is resident, its last
        # is not, and the probe of its last page sees that.
        assert not FileSlice(fd, (4 << 20) - 8192, 16 << 10, 0).cached()
    finally:
        os.close(fd)
