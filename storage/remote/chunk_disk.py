"""The chunk cache's disk tier: chunks evicted from memory kept as files.

Theory of operation: a remote segment's bytes never change, so a chunk
(segment id, chunk index) once fetched stays right for as long as the
segment exists. Chunks the memory cache (``chunk_cache``) lets go are
written here, under ``<log.dir>/remote-chunk-cache/`` as
``<segment uuid>-<chunk index>.chunk``, bounded in total bytes by
rsm.config.fetch.chunk.cache.disk.size with least-recently-used eviction;
a memory miss looks here before going to the store. A re-read of a week-old
range (a backfill run again, a second consumer group) then costs a local
read instead of GETs.

Files are written to ``.tmp`` and renamed, so a crash leaves no half chunk;
``.tmp`` leftovers are removed at start and the rest are reused (oldest
first out). A file whose length is not the chunk's is deleted and counted
as a miss (the store is asked again); a chunk of a deleted segment is never
asked for again and ages out. Record batches read from here are checked by
their CRCs like any remote data.

Concurrency: called from reader and filler threads; a lock guards the LRU
bookkeeping, file I/O runs outside it. Two threads putting the same chunk
both write it (the rename makes that harmless).

Error handling: a failed write or read is logged and treated as absent: the
disk tier only ever saves GETs, it never fails a read.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

CACHE_DIR = "remote-chunk-cache"
_SUFFIX = ".chunk"

ChunkKey = tuple[uuid.UUID, int]


@dataclass(slots=True)
class DiskStats:
    hits: int = 0
    writes: int = 0
    evictions: int = 0
    errors: int = 0


def _name(key: ChunkKey) -> str:
    return f"{key[0]}-{key[1]}{_SUFFIX}"


def _parse(name: str) -> ChunkKey | None:
    if not name.endswith(_SUFFIX):
        return None
    seg, sep, index = name[:-len(_SUFFIX)].rpartition("-")
    try:
        return (uuid.UUID(seg), int(index)) if sep and index.isdigit() else None
    except ValueError:
        return None


class DiskChunkTier:
    """Chunks on local disk, bounded by ``max_bytes`` (see the module docstring)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.dir = directory
        self.max_bytes = max_bytes
        self.stats = DiskStats()
        self._sizes: OrderedDict[ChunkKey, int] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        os.makedirs(directory, exist_ok=True)
        self._scan()

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def _scan(self) -> None:
        found: list[tuple[float, ChunkKey, int]] = []
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".tmp"):
                os.unlink(entry.path)
                continue
            key = _parse(entry.name)
            if key is None:
                continue
            stat = entry.stat()
            found.append((stat.st_mtime, key, stat.st_size))
        for _, key, size in sorted(found):
            self._sizes[key] = size
            self._bytes += size
        self._evict()

    def get(self, key: ChunkKey, length: int) -> bytes | None:
        """The chunk's bytes, or None if not here (or not ``length`` long)."""
        with self._lock:
            if key not in self._sizes:
                return None
            self._sizes.move_to_end(key)
        path = os.path.join(self.dir, _name(key))
        try:
            with open(path, "rb") as f:
                data = f.read(length + 1)
        except FileNotFoundError:
            return None  # evicted by another thread since
        except OSError as exc:
            self._drop(key, f"cannot read: {exc}")
            return None
        if len(data) != length:
            self._drop(key, f"{len(data)} bytes, expected {length}")
            return None
        with self._lock:
            self.stats.hits += 1
        return data

    def put(self, key: ChunkKey, data: bytes | bytearray) -> None:
        """Keep the chunk (the oldest ones out beyond the bound)."""
        if len(data) > self.max_bytes:
            return
        with self._lock:
            if key in self._sizes:
                self._sizes.move_to_end(key)
                return
        path = os.path.join(self.dir, _name(key))
        tmp = f"{path}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write a chunk to the disk cache", path=path, error=str(exc))
            with self._lock:
                self.stats.errors += 1
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        with self._lock:
            if key not in self._sizes:
                self._sizes[key] = len(data)
                self._bytes += len(data)
                self.stats.writes += 1
        self._evict()

    def _drop(self, key: ChunkKey, why: str) -> None:
        log.warning("disk cache chunk dropped", chunk=_name(key), reason=why)
        with self._lock:
            size = self._sizes.pop(key, None)
            if size is not None:
                self._bytes -= size
            self.stats.errors += 1
        try:
            os.unlink(os.path.join(self.dir, _name(key)))
        except OSError:
            pass

    def _evict(self) -> None:
        gone = []
        with self._lock:
            while self._bytes > self.max_bytes and self._sizes:
                key, size = self._sizes.popitem(last=False)
                self._bytes -= size
                self.stats.evictions += 1
                gone.append(key)
        for key in gone:
            try:
                os.unlink(os.path.join(self.dir, _name(key)))
            except OSError:
                pass
