"""RemoteIndexCache: remote segments' offset and time indexes, cached on local disk.

A remote read must map an offset to a byte position without downloading the
segment; the offset index does that. Fetching it from the remote store on
every read would double the latency of a cold read, so index files are kept
under ``<log.dir>/remote-log-index-cache/`` as
``<start offset>_<segment uuid>.index`` / ``.timeindex``, bounded in total
bytes (remote.log.index.file.cache.total.size.bytes) with least-recently-used
eviction, and reused across restarts. Files are written to ``.tmp`` and
renamed, so a crash leaves no half file; ``.tmp`` leftovers are removed on
start.

Concurrency: ``get`` is called from reader worker threads; a lock guards the
LRU bookkeeping, and two threads missing the same entry both download it
(the rename makes that harmless).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

CACHE_DIR = "remote-log-index-cache"
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


@dataclass(slots=True)
class CachedIndexes:
    """Parsed indexes of one remote segment."""

    base_offset: int
    offsets: array
    positions: array
    timestamps: array
    time_offsets: array
    size: int

    def position_for(self, offset: int) -> int:
        """Byte position of the last indexed batch at or below ``offset`` (0 if none)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def offset_for_timestamp(self, timestamp: int) -> int:
        """Offset to start scanning from for the first record >= ``timestamp``."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.time_offsets[i] if i >= 0 else self.base_offset


def parse_indexes(base_offset: int, offset_index: bytes, time_index: bytes) -> CachedIndexes:
    """Parse Kafka index bytes; trailing partial entries are ignored.

    Raises:
        ValueError: entries that go backwards (a corrupt index).
    """
    offsets, positions = array("q"), array("q")
    usable = len(offset_index) - len(offset_index) % _OFFSET_ENTRY.size
    for rel, pos in _OFFSET_ENTRY.iter_unpack(offset_index[:usable]):
        if rel == 0 and pos == 0 and offsets:
            break  # preallocated zero tail of a Kafka-written index
        if offsets and (base_offset + rel <= offsets[-1] or pos <= positions[-1]):
            raise ValueError("offset index entries go backwards")
        offsets.append(base_offset + rel)
        positions.append(pos)
    timestamps, time_offsets = array("q"), array("q")
    usable = len(time_index) - len(time_index) % _TIME_ENTRY.size
    for ts, rel in _TIME_ENTRY.iter_unpack(time_index[:usable]):
        if timestamps and ts <= timestamps[-1]:
            break
        timestamps.append(ts)
        time_offsets.append(base_offset + rel)
    return CachedIndexes(base_offset, offsets, positions, timestamps, time_offsets,
                         len(offset_index) + len(time_index))


@dataclass(slots=True)
class _Slot:
    base_offset: int
    size: int
    parsed: CachedIndexes | None = None


class RemoteIndexCache:
    """Bounded LRU of remote segment indexes; every byte on disk is accounted for.

    Entries found on disk at start are registered (oldest first by mtime)
    without being parsed; they are parsed on first use.
    """

    def __init__(self, log_dir: str, max_bytes: int) -> None:
        self.dir = os.path.join(log_dir, CACHE_DIR)
        self.max_bytes = max_bytes
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        os.makedirs(self.dir, exist_ok=True)
        self._scan_disk()

    def _scan_disk(self) -> None:
        found: dict[str, tuple[int, int, float]] = {}
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if name.endswith(".tmp"):
                os.unlink(path)
                continue
            stem, _, suffix = name.rpartition(".")
            base, sep, key = stem.partition("_")
            if suffix not in ("index", "timeindex") or not sep or not base.isdigit():
                continue
            st = os.stat(path)
            size, _, mtime = found.get(key, (0, 0, 0.0))
            found[key] = (size + st.st_size, int(base), max(mtime, st.st_mtime))
        for key, (total, base_offset, _) in sorted(found.items(), key=lambda kv: kv[1][2]):
            self._slots[key] = _Slot(base_offset, total)
            self._bytes += total
        self._evict()

    def _paths(self, base_offset: int, key: str) -> tuple[str, str]:
        stem = os.path.join(self.dir, f"{base_offset:020d}_{key}")
        return stem + ".index", stem + ".timeindex"

    def get(self, key: str, base_offset: int,
            download: Callable[[], tuple[bytes, bytes]]) -> CachedIndexes:
        """The indexes of segment ``key``, from memory, local disk, or ``download``.

        Args:
            key: the remote segment's unique id (string form).
            base_offset: the segment's start offset.
            download: blocking call returning (offset index, time index) bytes.

        Raises:
            Whatever ``download`` raises; ValueError for a corrupt index.
        """
        with self._lock:
            slot = self._slots.get(key)
            if slot is not None:
                self._slots.move_to_end(key)
                if slot.parsed is not None:
                    self.hits += 1
                    return slot.parsed
        self.misses += 1
        entry = self._load_from_disk(key, base_offset) if slot is not None else None
        if entry is None:
            offset_index, time_index = download()
            entry = parse_indexes(base_offset, offset_index, time_index)
            self._store_files(key, base_offset, offset_index, time_index)
        self._insert(key, entry)
        return entry

    def _load_from_disk(self, key: str, base_offset: int) -> CachedIndexes | None:
        index_path, time_path = self._paths(base_offset, key)
        try:
            with open(index_path, "rb") as f:
                offset_index = f.read()
            with open(time_path, "rb") as f:
                time_index = f.read()
        except FileNotFoundError:
            return None
        try:
            return parse_indexes(base_offset, offset_index, time_index)
        except ValueError:
            log.warning("dropping corrupt cached remote index", key=key)
            self._remove_files(key, base_offset)
            return None

    def _store_files(self, key: str, base_offset: int, offset_index: bytes,
                     time_index: bytes) -> None:
        for path, data in zip(self._paths(base_offset, key), (offset_index, time_index),
                              strict=True):
            tmp = f"{path}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)

    def _remove_files(self, key: str, base_offset: int) -> None:
        for path in self._paths(base_offset, key):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _insert(self, key: str, entry: CachedIndexes) -> None:
        with self._lock:
            old = self._slots.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            self._slots[key] = _Slot(entry.base_offset, entry.size, entry)
            self._bytes += entry.size
        self._evict()

    def _evict(self) -> None:
        evicted: list[tuple[str, _Slot]] = []
        with self._lock:
            while self._bytes > self.max_bytes and len(self._slots) > 1:
                key, slot = self._slots.popitem(last=False)
                self._bytes -= slot.size
                evicted.append((key, slot))
        for key, slot in evicted:
            self._remove_files(key, slot.base_offset)

    def remove(self, key: str, base_offset: int) -> None:
        """Forget a deleted remote segment."""
        with self._lock:
            old = self._slots.pop(key, None)
            if old is not None:
                self._bytes -= old.size
        self._remove_files(key, base_offset)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._slots)
