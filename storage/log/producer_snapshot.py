"""Producer-state snapshots: ``<offset>.snapshot`` files in Kafka's format (version 1).

A snapshot holds the state of every producer after the batches below
``offset`` (the file name, 20 digits like segment names). The log writes one
when it rolls a segment (named after the new segment's base offset) and on
clean shutdown, and on load restores the latest snapshot at or below the log
end, then replays only the batches after it.

Layout (Kafka's ProducerStateManager PID_SNAPSHOT_MAP_SCHEMA)::

    version  int16    1
    crc      uint32   CRC-32C of every byte after this field
    entries  int32 count, then per producer (46 bytes):
        producerId            int64
        producerEpoch         int16
        lastSequence          int32   -1 if no data batch
        lastOffset            int64   last offset of the last data batch, -1 if none
        offsetDelta           int32   lastSequence - firstSequence of that batch
        timestamp             int64   max timestamp of that batch
        coordinatorEpoch      int32   of the last transaction marker, -1 if none
        currentTxnFirstOffset int64   first offset of the open transaction, -1 if none

A snapshot keeps one batch per producer, as Kafka's does; the dedup window
refills from the batches replayed after it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from storage.log.segment import filename_prefix

SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hIi")
_CRC_END = 6  # version + crc: the CRC covers everything after them
_ENTRY = struct.Struct(">qhiqiqiq")
_TMP = ".tmp"


class CorruptSnapshot(ValueError):
    """A snapshot with a bad version, CRC or length."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
                            e.offset_delta, e.timestamp, e.coordinator_epoch,
                            e.current_txn_first_offset)
    return struct.pack(">hI", VERSION, crc32c.crc32c(bytes(body))) + bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    """Parse a snapshot file's bytes.

    Raises:
        CorruptSnapshot: unknown version, CRC mismatch or wrong length.
    """
    if len(data) < _HEAD.size:
        raise CorruptSnapshot(f"snapshot of {len(data)} bytes is too short")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    if crc32c.crc32c(data[_CRC_END:]) != crc:
        raise CorruptSnapshot("snapshot CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshot(f"{count} entries do not fit {len(data)} bytes")
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size))
            for i in range(count)]


class SnapshotFiles:
    """The snapshot files of one partition directory.

    Concurrency: event loop only. Writes go to a temporary file renamed into
    place, so a crash leaves the old set or the new one; a snapshot torn by a
    crash fails its CRC on load and is skipped.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, filename_prefix(offset) + SUFFIX)

    def offsets(self) -> list[int]:
        """Offsets of every snapshot file, ascending."""
        return sorted(int(name[: -len(SUFFIX)]) for name in os.listdir(self.directory)
                      if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit())

    def write(self, offset: int, entries: list[SnapshotEntry]) -> None:
        target = self.path(offset)
        with open(target + _TMP, "wb") as f:
            f.write(encode(entries))
        os.replace(target + _TMP, target)

    def read(self, offset: int) -> list[SnapshotEntry]:
        """Raises CorruptSnapshot (or OSError if the file vanished)."""
        with open(self.path(offset), "rb") as f:
            return decode(f.read())

    def delete(self, offset: int) -> None:
        try:
            os.unlink(self.path(offset))
        except FileNotFoundError:
            pass

    def delete_where(self, doomed: Callable[[int], bool]) -> None:
        """Delete every snapshot whose offset satisfies ``doomed(offset)``."""
        for offset in self.offsets():
            if doomed(offset):
                self.delete(offset)

    def existing(self, offset: int) -> str | None:
        path = self.path(offset)
        return path if os.path.exists(path) else None
