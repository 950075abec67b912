"""ChunkCache: remote segment bytes read in fixed chunks, cached, fetched once, prefetched.

Theory of operation
-------------------
A remote ``.log`` is read in chunks of rsm.config.fetch.chunk.size bytes
(default 4 MiB), each one ranged GET aligned to a chunk boundary (the last
chunk of a segment is shorter). A read of any byte range is served from the
chunks covering it, so consecutive fetches of a consumer (1 MiB each by
default) cost one GET per chunk instead of one per fetch, and the slack a
reader asks for past its budget is not fetched twice.

* Cache: chunks are kept in memory, least recently used first out, bounded
  in bytes by rsm.config.fetch.chunk.cache.size (default 64 MiB; 0 turns the
  cache and prefetch off, every read then goes to the store as asked).
  Hits, misses, evictions and prefetches are counted. With
  rsm.config.fetch.chunk.cache.disk.size set, chunks let go from memory go to
  a disk tier (``chunk_disk``), which a miss reads before the store.
* Single flight: a chunk is never fetched twice at once. A reader that
  needs a chunk already being fetched (by another reader or by prefetch)
  waits for that fetch; a failed fetch fails its waiters and is forgotten,
  so the next read tries the store again.
* Streaming: a chunk arrives in pieces (the storage manager's
  ``open_log_segment`` stream, where it has one), and a reader waits only
  for the bytes it needs: a cold read's first batch is served one GET
  latency after it asks, not after the whole chunk has crossed the network.
  The reader that started a fetch hands the rest of the stream to the filler
  threads once its own range is in; the chunk is cached once complete.
* Prefetch: a read that continues where the previous read of the same
  segment ended (or starts a segment at byte 0) schedules the next chunks
  on the prefetch pool, its own threads, so prefetching never takes a
  reader slot from a first read. It does so once its own request is out
  (the first byte has come, or the chunk is cached or in flight) and before
  it waits for the rest, so the prefetches' requests are prepared while it
  waits: not before its own, which they would slow (the GIL), nor while its
  answer is being sent. Near a segment's end the reader also asks for the
  next segment's first chunks (``wants_next_segment``, ``prefetch``).
* Prefetch depth: rsm.config.fetch.prefetch.chunks chunks (default 2) per
  partition to start with. A reader that catches up with its prefetches
  (it needs a chunk fetched ahead that is still on its way) doubles its
  partition's depth, up to rsm.config.fetch.prefetch.max.chunks (default
  8): one connection to S3 carries tens of MB/s, so a consumer reading
  faster needs more chunks on their way at once.
* Prefetch budget: chunks fetched ahead and not read yet take at most half
  the cache: many partitions read at once share that, and none of them
  evicts what another fetched ahead before it is read. Prefetch only
  follows reads: a partition that stops reading stops prefetching after at
  most its depth in chunks, and a chunk already cached or in flight is not
  fetched again.

Concurrency: ``fetch_log_segment`` is called from reader worker threads and
blocks; one lock guards the cache and the in-flight table, and store calls
run outside it.

Error handling: store errors propagate unchanged (``RemoteStorageError``);
a chunk whose length differs from what the metadata says raises
``RemoteStorageError`` and is not cached.

Why one module over ~450 lines: the cache, its in-flight table (a chunk
fetched once) and the prefetch share one lock and one accounting of bytes;
split, those invariants would span files (the disk tier is already
``chunk_disk``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from config.defs import ConfigDef
from config.defs import ConfigType as T
from storage.remote.chunk_disk import CACHE_DIR as DISK_DIR
from storage.remote.chunk_disk import DiskChunkTier
from storage.remote.rsm import RSM_CONFIG_PREFIX, parse_rsm_config
from storage.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)
from storage.worker_priority import started_pool

log = structlog.get_logger(__name__)

CONFIG_DEFS: list[ConfigDef] = [
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.chunk.size", T.INT, 4 * 1024 * 1024,
              "Remote segments are read in ranged GETs of this many bytes, aligned to it.",
              at_least=4096),
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.chunk.cache.size", T.LONG, 64 * 1024 * 1024,
              "Bytes of remote segment chunks kept in memory (least recently used out); "
              "0 turns the chunk cache and prefetch off.", at_least=0),
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.chunk.cache.disk.size", T.LONG, 0,
              "Bytes of chunks kept on local disk (under <log.dir>/remote-chunk-cache/) once "
              "the memory cache lets them go, read before going to the store; 0: no disk "
              "tier.", at_least=0),
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.prefetch.chunks", T.INT, 2,
              "Chunks fetched ahead of a sequential remote read; 0 turns prefetch off.",
              at_least=0),
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.prefetch.max.chunks", T.INT, 8,
              "Deepest prefetch: a sequential reader that catches up with its prefetches "
              "(waits for a chunk fetched ahead that is still on its way) doubles its "
              "partition's depth, from fetch.prefetch.chunks up to this many chunks.",
              at_least=0),
    ConfigDef(RSM_CONFIG_PREFIX + "fetch.prefetch.threads", T.INT, 4,
              "Threads fetching chunks ahead (their own pool, apart from the readers).",
              at_least=1),
]
# The stripped keys the chunk cache takes from the rsm.config.* settings
# (the storage managers never see them).
KEYS = frozenset(d.name.removeprefix(RSM_CONFIG_PREFIX) for d in CONFIG_DEFS)
# Segments whose last read position is remembered to recognise sequential reads.
_TRACKED_SEGMENTS = 4096
# A chunk is read from its stream in pieces this large: a reader waiting for the
# first bytes of a chunk gets them after one piece, not the whole chunk.
_STREAM_PIECE = 256 * 1024
# Threads finishing chunks whose first reader went on (at least; more with more
# prefetch threads), so a reader never waits for a chunk's tail it does not need.
_MIN_FILLERS = 4

_ChunkKey = tuple[uuid.UUID, int]


# A chunk's memory: bytes (read back from the disk tier) or a filled buffer.
Buffer = bytearray

# Buffers of evicted chunks kept for the next chunks to fill, at most.
_SPARE_BUFFERS = 8


class NotCached(Exception):
    """A read inside ``cached_only`` needs a chunk that is not in the cache."""


class _Filling:
    """A chunk on its way in: readers wait for the bytes they need.

    Concurrency: one thread adds; any number wait. The buffer never moves, and
    bytes below ``filled`` never change.
    """

    __slots__ = ("buf", "filled", "error", "cond")

    def __init__(self, buf: Buffer) -> None:
        self.buf = buf
        self.filled = 0
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def add(self, piece: bytes) -> None:
        with self.cond:
            self.buf[self.filled:self.filled + len(piece)] = piece
            self.filled += len(piece)
            self.cond.notify_all()

    def read_from(self, stream: Any, size: int) -> int:
        """Up to ``size`` more bytes read by ``stream.readinto`` straight into
        the buffer (no piece copied in); returns how many came (0: the end).
        Only the filling thread writes, and only above ``filled``, which no
        reader looks at, so the read runs without the lock."""
        with memoryview(self.buf) as view:
            got: int = stream.readinto(view[self.filled:self.filled + size])
        if got:
            with self.cond:
                self.filled += got
                self.cond.notify_all()
        return got

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error = exc
            self.cond.notify_all()

    def wait_for(self, lo: int, hi: int) -> bytes:
        """Bytes ``lo..hi`` once they are in.

        Raises:
            The fetch's error, if it failed before they arrived.
        """
        with self.cond:
            self.cond.wait_for(lambda: self.filled >= hi or self.error is not None)
            if self.filled < hi:
                assert self.error is not None
                raise self.error
            return bytes(memoryview(self.buf)[lo:hi])  # one copy


@dataclass(slots=True)
class ChunkStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    prefetches: int = 0
    fetch_bytes: int = 0


def split_settings(settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the storage manager's settings, the chunk cache's) from stripped rsm.config.* ones."""
    rsm = {k: v for k, v in settings.items() if k not in KEYS}
    chunk = {k: v for k, v in settings.items() if k in KEYS}
    return rsm, chunk


class ChunkCache:
    """Reads of remote ``.log`` bytes through a chunk cache in front of ``rsm``.

    Offers ``fetch_log_segment`` with the storage manager's contract, so the
    reader uses either interchangeably.
    """

    def __init__(self, rsm: Any, settings: Mapping[str, str] | None = None,
                 log_dir: str | None = None) -> None:
        values = parse_rsm_config(CONFIG_DEFS, dict(settings or {}))
        self.rsm = rsm
        self.chunk_size: int = values["fetch.chunk.size"]
        self._spare: list[Buffer] = []  # see _buffer
        self.max_bytes: int = values["fetch.chunk.cache.size"]
        self.prefetch_chunks: int = values["fetch.prefetch.chunks"] if self.max_bytes else 0
        self.max_prefetch_chunks = (max(self.prefetch_chunks, values["fetch.prefetch.max.chunks"])
                                    if self.prefetch_chunks else 0)
        # Prefetch depth per partition, deeper than prefetch_chunks once its
        # reader has caught up with what was fetched ahead.
        self._depths: OrderedDict[TopicIdPartition, int] = OrderedDict()
        self.stats = ChunkStats()
        self._chunks: OrderedDict[_ChunkKey, bytes | Buffer] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[_ChunkKey, _Filling] = {}
        # Chunks prefetched (queued, in flight or cached) that no reader has read
        # yet, with their sizes: at most half the cache, so that prefetch for many
        # partitions at once never evicts what was fetched ahead before it is read.
        self._ahead: dict[_ChunkKey, int] = {}
        self._ahead_bytes = 0
        self._next_position: OrderedDict[uuid.UUID, int] = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = False
        # Reading ahead is background work: its threads give way to the event loop.
        self._prefetcher = started_pool(values["fetch.prefetch.threads"], "remote-prefetch",
                                         background=True) if self.prefetch_chunks else None
        # Finish the chunks whose first reader has its bytes and went on.
        self._fillers = started_pool(max(_MIN_FILLERS, values["fetch.prefetch.threads"]),
                                      "remote-chunk-fill") if self.max_bytes else None
        disk_bytes = values["fetch.chunk.cache.disk.size"]
        self.disk = (DiskChunkTier(os.path.join(log_dir, DISK_DIR), disk_bytes)
                     if disk_bytes and self.max_bytes and log_dir is not None else None)

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def stats_copy(self) -> ChunkStats:
        """The counts at one instant (reader threads change them under the lock)."""
        with self._lock:
            return replace(self.stats)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes | memoryview:
        """Bytes ``start_position..end_position`` (inclusive; None = to the end) of
        the .log; within one cached chunk, a read-only view of it (no copy).

        Raises:
            ValueError: negative start, or end before start.
            RemoteStorageError: as the storage manager's ``fetch_log_segment``.
        """
        size = metadata.segment_size_in_bytes
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"bad range {start_position}..{end_position}")
        if not self.max_bytes:
            return bytes(self.rsm.fetch_log_segment(metadata, start_position, end_position))
        if start_position >= size:
            raise RemoteStorageError(f"position {start_position} past the end ({size} bytes) "
                                     f"of {metadata.remote_log_segment_id}")
        end = size - 1 if end_position is None else min(end_position, size - 1)
        first, last = start_position // self.chunk_size, end // self.chunk_size
        seg = metadata.remote_log_segment_id.id
        # A sequential read prefetches once its own request is out (its first
        # byte has come) but before it waits for the rest: the prefetches'
        # requests are prepared while it waits, neither before its own (they
        # would hold the GIL against it) nor after (when its answer is due).
        prefetch: Callable[[], None] | None = None
        if self._note_read(seg, start_position, end + 1):
            prefetch = functools.partial(self._prefetch, metadata, last + 1)
        parts = []
        for index in range(first, last + 1):
            base = index * self.chunk_size
            parts.append(self._range(metadata, index, max(start_position - base, 0),
                                     min(end + 1 - base, self.chunk_size), prefetch=False,
                                     on_open=prefetch))
            prefetch = None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @contextlib.contextmanager
    def cached_only(self) -> Iterator[None]:
        """Within the block, this thread's reads raise ``NotCached`` instead of
        going to the store (or waiting for a chunk in flight): the event loop
        serves a read from memory this way and hands it to a reader thread
        otherwise."""
        self._local.cached_only = True
        try:
            yield
        finally:
            self._local.cached_only = False

    def prefetch_depth(self, metadata: RemoteLogSegmentMetadata) -> int:
        """Chunks fetched ahead of a sequential read of ``metadata``'s partition."""
        tp = metadata.remote_log_segment_id.topic_id_partition
        with self._lock:
            return self._depths.get(tp, self.prefetch_chunks)

    def wants_next_segment(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Whether reading ``metadata`` has come within prefetch reach of its
        end, so the next segment's first chunks should be fetched ahead."""
        if not self.prefetch_chunks:
            return False
        depth = self.prefetch_depth(metadata)
        with self._lock:
            position = self._next_position.get(metadata.remote_log_segment_id.id)
        chunks = -(-metadata.segment_size_in_bytes // self.chunk_size)
        return position is not None and position // self.chunk_size + depth >= chunks - 1

    def chunk_count(self, metadata: RemoteLogSegmentMetadata) -> int:
        return -(-metadata.segment_size_in_bytes // self.chunk_size)

    def prefetch(self, metadata: RemoteLogSegmentMetadata, first_chunk: int = 0,
                 count: int | None = None) -> None:
        """Fetch ``count`` (default: the partition's prefetch depth) chunks of
        ``metadata`` from ``first_chunk`` on, ahead."""
        self._prefetch(metadata, first_chunk, count)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: Any) -> bytes:
        """The storage manager's ``fetch_index`` (indexes have their own cache)."""
        return bytes(self.rsm.fetch_index(metadata, index_type))

    def fetch_combined_indexes(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The storage manager's ``fetch_combined_indexes``.

        Raises:
            RemoteResourceNotFoundError: also when the storage manager has none.
        """
        fetch = getattr(self.rsm, "fetch_combined_indexes", None)
        if fetch is None:
            raise RemoteResourceNotFoundError("the storage manager keeps no indexes objects")
        return bytes(fetch(metadata))

    def close(self, wait: bool = False) -> None:
        """Stop prefetching: no new prefetches; queued ones are dropped, or with
        ``wait`` run, and every one running ends before this returns."""
        self._closed = True
        for pool in (self._prefetcher, self._fillers):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=not wait)

    # -- inside ------------------------------------------------------------------

    def _note_read(self, seg: uuid.UUID, start: int, end: int) -> bool:
        """Remember where this read of ``seg`` ended; True if it continued the
        previous one (or started the segment)."""
        with self._lock:
            previous = self._next_position.pop(seg, None)
            self._next_position[seg] = end
            while len(self._next_position) > _TRACKED_SEGMENTS:
                self._next_position.popitem(last=False)
        if start == 0:
            return True
        # A fetch asks again from the first batch it could not return whole,
        # so a continuation may start a little before the previous end.
        return previous is not None and previous - self.chunk_size <= start <= previous

    def _range(self, md: RemoteLogSegmentMetadata, index: int, lo: int, hi: int,
               prefetch: bool, on_open: Callable[[], None] | None = None
               ) -> bytes | memoryview:
        """Bytes ``lo..hi`` (exclusive) of chunk ``index``: from the cache, from a
        fetch in flight once they have arrived, or from a fetch started here.
        ``on_open`` is called once the bytes are on their way: at once for a
        cached chunk or one in flight, after the first byte of a fetch started
        here (not if it fails)."""
        key = (md.remote_log_segment_id.id, index)
        with self._lock:
            cached = self._chunks.get(key)
            if cached is None and getattr(self._local, "cached_only", False):
                raise NotCached(key)
            if not prefetch:
                if cached is None and key in self._ahead:
                    self._deepen(md)  # caught up with a chunk fetched ahead
                self._not_ahead(key)
            if cached is not None:
                self._chunks.move_to_end(key)
                if not prefetch:
                    self.stats.hits += 1
                # No copy: a read-only view of the chunk, which is never
                # written again (an evicted chunk lives on while viewed).
                data: bytes | memoryview = memoryview(cached).toreadonly()[lo:hi]
                filling = None
            else:
                filling = self._inflight.get(key)
                owner = filling is None
                if filling is None:
                    filling = _Filling(self._buffer(self._chunk_length(md, index)))
                    self._inflight[key] = filling
                    if prefetch:
                        self.stats.prefetches += 1
                    else:
                        self.stats.misses += 1
                elif not prefetch:
                    self.stats.hits += 1  # joins a fetch in flight: no GET of its own
        if filling is None:
            if on_open is not None:
                on_open()
            return data
        if not owner:
            if on_open is not None:
                on_open()
            return filling.wait_for(lo, hi)
        if self.disk is not None and self._from_disk(md, index, key, filling, prefetch):
            if on_open is not None:
                on_open()
            return filling.wait_for(lo, hi)
        try:
            stream = self._open(md, index)
        except BaseException as exc:
            self._failed(key, filling, exc)
            raise
        if on_open is not None:
            on_open()
        try:
            self._fill(md, index, filling, stream, hi)
        except BaseException as exc:
            stream.close()
            self._failed(key, filling, exc)
            raise
        if prefetch or filling.filled == len(filling.buf):
            self._finish(md, index, key, filling, stream)
        else:
            assert self._fillers is not None
            try:
                self._fillers.submit(self._finish, md, index, key, filling, stream)
            except RuntimeError as exc:  # shut down
                stream.close()
                self._failed(key, filling, RemoteStorageError(f"chunk cache closed: {exc}"))
        return filling.wait_for(lo, hi)

    def _from_disk(self, md: RemoteLogSegmentMetadata, index: int, key: _ChunkKey,
                   filling: _Filling, prefetch: bool) -> bool:
        """Fill an owned chunk from the disk tier; False if it is not there."""
        assert self.disk is not None
        data = self.disk.get(key, len(filling.buf))
        if data is None:
            return False
        filling.add(data)
        with self._lock:
            del self._inflight[key]
            if not prefetch:  # counted a miss when it started: it cost no GET
                self.stats.misses -= 1
                self.stats.hits += 1
            evicted = self._insert(key, filling.buf)
        self._to_disk(evicted)
        return True

    def _buffer(self, size: int) -> Buffer:
        """Memory for a chunk on its way in (lock held): an evicted chunk's
        buffer when one of the size is spare, else a new one.

        Why: a new 4 MiB buffer is memory the kernel must map and zero (its
        page faults taken while the filling thread holds the GIL): measured
        0.45 ms per MB written into fresh memory against 0.03 ms into a
        reused buffer, most of a cold read's CPU beyond a hot one's. Only
        the bytes below ``filled`` are ever read, so what a reused buffer
        held before does not matter."""
        if self._spare and len(self._spare[-1]) == size:
            return self._spare.pop()
        return bytearray(size)

    def _to_disk(self, evicted: list[tuple[_ChunkKey, bytes | Buffer]]) -> None:
        """Write evicted chunks to the disk tier, then keep their buffers for
        reuse when nothing else refers to them any more (no reader's view of
        the chunk, no response still being sent from it)."""
        while evicted:
            key, data = evicted.pop()
            if self.disk is not None:
                self.disk.put(key, data)
            # References: ``data`` here and getrefcount's argument; a
            # memoryview handed out adds one through its buffer's owner.
            if (isinstance(data, bytearray) and len(data) == self.chunk_size
                    and sys.getrefcount(data) == 2):
                with self._lock:
                    if len(self._spare) < _SPARE_BUFFERS:
                        self._spare.append(data)
            del data

    def _chunk_length(self, md: RemoteLogSegmentMetadata, index: int) -> int:
        start = index * self.chunk_size
        return min(start + self.chunk_size, md.segment_size_in_bytes) - start

    def _open(self, md: RemoteLogSegmentMetadata, index: int) -> Any:
        """A stream of chunk ``index``: the storage manager's own, or its whole
        ``fetch_log_segment`` answer for one without streams."""
        start = index * self.chunk_size
        end = start + self._chunk_length(md, index) - 1
        opener = getattr(self.rsm, "open_log_segment", None)
        if opener is not None:
            return opener(md, start, end)
        return io.BytesIO(bytes(self.rsm.fetch_log_segment(md, start, end)))

    def _fill(self, md: RemoteLogSegmentMetadata, index: int, filling: _Filling, stream: Any,
              until: int) -> None:
        """Read ``stream`` into ``filling`` until ``until`` bytes are in.

        Raises:
            RemoteStorageError: the store failed, or the stream ended early.
        """
        size = len(filling.buf)
        # A stream that can read into memory (the filesystem tier's) fills the
        # chunk's buffer directly: one copy per byte instead of three.
        direct = getattr(stream, "readinto_direct", False)
        while filling.filled < until:
            want = min(_STREAM_PIECE, size - filling.filled)
            if direct:
                got = filling.read_from(stream, want)
            else:
                piece = stream.read(want)
                if len(piece) > want:
                    raise RemoteStorageError(f"chunk {index} of {md.remote_log_segment_id}: "
                                             f"more than the expected {size} bytes")
                if piece:
                    filling.add(piece)
                got = len(piece)
            if not got:
                raise RemoteStorageError(f"chunk {index} of {md.remote_log_segment_id}: "
                                         f"{filling.filled} bytes, expected {size}")
            with self._lock:
                self.stats.fetch_bytes += got

    def _finish(self, md: RemoteLogSegmentMetadata, index: int, key: _ChunkKey,
                filling: _Filling, stream: Any) -> None:
        """Read the rest of the chunk and cache it (the caller owns ``stream``)."""
        try:
            self._fill(md, index, filling, stream, len(filling.buf))
            if stream.read(1):
                raise RemoteStorageError(f"chunk {index} of {md.remote_log_segment_id}: "
                                         f"more than the expected {len(filling.buf)} bytes")
        except BaseException as exc:
            self._failed(key, filling, exc)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            stream.close()
        with self._lock:
            del self._inflight[key]
            # The buffer itself: it is complete and never written again.
            evicted = self._insert(key, filling.buf)
        self._to_disk(evicted)

    def _failed(self, key: _ChunkKey, filling: _Filling, exc: BaseException) -> None:
        with self._lock:
            if self._inflight.get(key) is filling:
                del self._inflight[key]
            self._not_ahead(key)
        filling.fail(exc)

    def _deepen(self, md: RemoteLogSegmentMetadata) -> None:
        """Double the partition's prefetch depth, up to the maximum (lock held)."""
        tp = md.remote_log_segment_id.topic_id_partition
        depth = self._depths.pop(tp, self.prefetch_chunks)
        self._depths[tp] = min(max(2 * depth, 1), self.max_prefetch_chunks)
        while len(self._depths) > _TRACKED_SEGMENTS:
            self._depths.popitem(last=False)

    def _not_ahead(self, key: _ChunkKey) -> None:
        """``key`` was read, evicted or failed: no longer fetched ahead (lock held)."""
        size = self._ahead.pop(key, None)
        if size is not None:
            self._ahead_bytes -= size

    def _insert(self, key: _ChunkKey, data: bytes | Buffer
                ) -> list[tuple[_ChunkKey, bytes | Buffer]]:
        """Cache ``data`` (lock held); oldest chunks out beyond the byte bound.

        Returns:
            The chunks let go (for the disk tier, written outside the lock).
        """
        if len(data) > self.max_bytes:
            return [(key, data)]
        self._chunks[key] = data
        self._bytes += len(data)
        evicted = []
        while self._bytes > self.max_bytes:
            old_key, old = self._chunks.popitem(last=False)
            self._bytes -= len(old)
            self._not_ahead(old_key)
            self.stats.evictions += 1
            evicted.append((old_key, old))
        return evicted

    def _prefetch(self, md: RemoteLogSegmentMetadata, first: int, count: int | None = None
                  ) -> None:
        if self._prefetcher is None or self._closed:
            return
        seg = md.remote_log_segment_id.id
        ahead = self.prefetch_depth(md) if count is None else count
        for index in range(first, min(first + ahead, self.chunk_count(md))):
            key = (seg, index)
            size = self._chunk_length(md, index)
            with self._lock:
                if key in self._chunks or key in self._inflight or key in self._ahead:
                    continue
                if self._ahead_bytes + size > self.max_bytes // 2:
                    return  # enough is waiting to be read
                self._ahead[key] = size
                self._ahead_bytes += size
            try:
                self._prefetcher.submit(self._prefetch_one, md, index)
            except RuntimeError:
                with self._lock:
                    self._not_ahead(key)
                return  # shut down

    def _prefetch_one(self, md: RemoteLogSegmentMetadata, index: int) -> None:
        try:
            self._range(md, index, 0, 0, prefetch=True)
        except Exception as exc:  # the reader that needs it fetches it again
            log.info("remote chunk prefetch failed", segment=str(md.remote_log_segment_id),
                     chunk=index, error=str(exc))
