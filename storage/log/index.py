"""Offset and time indexes of a segment, in Kafka's file formats.

``.index``: entries of (relative offset int32, position int32), big-endian.
``.timeindex``: entries of (timestamp int64, relative offset int32).

Kafka preallocates index files and memory-maps them; we keep the entries in
memory (one per ``index.interval.bytes`` of log, so a 1 GiB segment holds
about 260k) and append each new entry to the file, so the file is always a
valid Kafka index. Lookups bisect the in-memory arrays.

Error handling: ``load`` returns False for a file that is not a whole
number of entries or whose entries are not increasing; the segment then
rebuilds the index from the log instead of trusting it.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        # A segment always has both index files (the remote tier copies them);
        # one missing at open time must be rebuilt from the log, not trusted.
        self.existed = os.path.exists(path)
        self._fd: int | None = None
        self._open()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _write(self, data: bytes) -> None:
        os.write(self._open(), data)

    def _rewrite(self, data: bytes) -> None:
        fd = self._open()
        os.ftruncate(fd, 0)
        if data:
            os.write(fd, data)

    def _read_all(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def fsync(self) -> None:
        fd = self._fd  # once: ``close`` may run meanwhile (see LogSegment.fsync)
        if fd is not None:
            os.fsync(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class OffsetIndex(_IndexFile):
    """Maps offsets to byte positions in the segment's .log file."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self.offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self.offsets[-1] if self.offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= ``offset``, or (base_offset, 0)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= ``offset``."""
        keep = bisect.bisect_left(self.offsets, offset)
        if keep == len(self.offsets):
            return
        del self.offsets[keep:]
        del self.positions[keep:]
        self._rewrite(b"".join(_OFFSET_ENTRY.pack(o - self.base_offset, p)
                               for o, p in zip(self.offsets, self.positions, strict=True)))

    def reset(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        self._rewrite(b"")

    def load(self, log_size: int) -> bool:
        """Read entries from disk; False if missing or not a sane index."""
        data = self._read_all()
        if not self.existed or data is None or len(data) % _OFFSET_ENTRY.size:
            return False
        prev_off, prev_pos = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or off <= prev_off or pos <= prev_pos or pos >= log_size:
                return False
            self.offsets.append(off)
            self.positions.append(pos)
            prev_off, prev_pos = off, pos
        return True


class TimeIndex(_IndexFile):
    """Maps timestamps to the offset of the first batch at or after them."""

    entry = _TIME_ENTRY

    def __init__(self, path: str, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def is_full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    def append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp < ``timestamp`` (a safe scan start)."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else self.base_offset

    def truncate_to(self, offset: int) -> None:
        keep = bisect.bisect_left(self.offsets, offset)
        if keep == len(self.offsets):
            return
        del self.timestamps[keep:]
        del self.offsets[keep:]
        self._rewrite(b"".join(_TIME_ENTRY.pack(t, o - self.base_offset)
                               for t, o in zip(self.timestamps, self.offsets, strict=True)))

    def reset(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        self._rewrite(b"")

    def load(self, last_offset: int) -> bool:
        data = self._read_all()
        if not self.existed or data is None or len(data) % _TIME_ENTRY.size:
            return False
        prev_ts, prev_off = -(2**63), -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or ts <= prev_ts or off < prev_off or off > last_offset:
                return False
            self.timestamps.append(ts)
            self.offsets.append(off)
            prev_ts, prev_off = ts, off
        return True
