"""The aborted-transaction index of one segment: ``<base offset>.txnindex``.

Kafka's format: entries back to back, no header, 34 bytes each::

    version          int16   0
    producerId       int64
    firstOffset      int64   first offset of the aborted transaction
    lastOffset       int64   offset of its ABORT marker
    lastStableOffset int64   the partition's LSO once the abort completed

An entry is written to the index of the segment that holds the ABORT marker,
so a transaction whose data started in an earlier segment is indexed where
it ended. A read_committed fetch asks every segment from the one holding the
fetch offset for the aborted transactions overlapping its range; it may stop
at the first entry whose lastStableOffset reaches the range's end (nothing
aborted later can start before it).

The file is created on the first abort, as in Kafka; ``existing_path`` is
None until then (tiered storage copies it only if it exists).

Concurrency: event loop only, except ``fsync`` (called from the flush thread).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
CURRENT_VERSION = 0


class CorruptTxnIndex(ValueError):
    """An entry with a version this broker does not know."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                          self.last_offset, self.last_stable_offset)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """Every whole entry of ``data`` (a torn trailing entry is ignored).

    Raises:
        CorruptTxnIndex: an entry with an unknown version.
    """
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version > CURRENT_VERSION:
            raise CorruptTxnIndex(f"aborted transaction version {version} at byte {pos}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_overlapping(entries: list[AbortedTxn], fetch_offset: int, upper_bound: int
                        ) -> tuple[list[AbortedTxn], bool]:
    """The entries (ordered by marker offset, as a segment's index is) of
    transactions overlapping [fetch_offset, upper_bound), found by binary
    search rather than a scan from the segment's first abort.

    An entry whose marker lies below ``fetch_offset`` cannot overlap, and its
    last stable offset (at most its marker + 1) cannot reach a real upper
    bound, so the search starts at the first marker at or above it.

    Returns:
        (entries, complete): complete means an entry's last stable offset
        reached ``upper_bound``, so no later segment can hold one that starts
        below it.
    """
    found = []
    for i in range(bisect.bisect_left(entries, fetch_offset, key=_marker), len(entries)):
        txn = entries[i]
        if txn.first_offset < upper_bound:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound:
            return found, True
    return found, False


def _marker(txn: AbortedTxn) -> int:
    return txn.last_offset


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        """The entries, read from the file on first use."""
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    self._entries = decode_entries(f.read())
            except FileNotFoundError:
                self._entries = []
        return self._entries

    @property
    def last_offset(self) -> int:
        """lastOffset of the newest entry, -1 if none."""
        return self.entries[-1].last_offset if self.entries else -1

    @property
    def existing_path(self) -> str | None:
        return self.path if os.path.exists(self.path) else None

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; marker offsets only increase within a segment.

        Raises:
            ValueError: ``txn`` does not end after the newest entry (a log bug).
        """
        if txn.last_offset <= self.last_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is not after "
                             f"{self.last_offset} in {self.path}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.encode())
        finally:
            os.close(fd)
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound).

        Returns:
            (entries, complete): complete means later segments need not be searched.
        """
        return collect_overlapping(self.entries, fetch_offset, upper_bound)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        with open(self.path, "r+b") as f:
            f.truncate(len(keep) * ENTRY_SIZE)
        self._entries = keep

    def reset(self) -> None:
        """Forget every entry (the segment is being recovered and re-indexed)."""
        if os.path.exists(self.path):
            os.truncate(self.path, 0)
        self._entries = []

    def fsync(self) -> None:
        """Flush the file to disk (blocking; call off the loop). No-op if absent."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = []
