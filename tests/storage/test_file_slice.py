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
