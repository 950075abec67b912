"""ChunkCache over the real storage managers (a directory, and S3 on moto over
HTTP): exact bytes for any range, chunk-aligned GETs, one GET per chunk for a
sequential read, single flight, the byte bound, failures not cached, prefetch
that follows reads and stops with them."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest

from storage.remote.chunk_cache import ChunkCache, split_settings
from storage.remote.types import RemoteLogSegmentMetadata, RemoteStorageError
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import SegmentFactory

CHUNK = 64 * 1024
SEGMENT = 10 * CHUNK + 1234  # ten whole chunks and a short last one


class Recording:
    """The real storage manager, with every ``fetch_log_segment`` range
    recorded; ``delay_s`` holds each GET, ``fail`` makes the next ones raise."""

    def __init__(self, rsm: Any, delay_s: float = 0.0) -> None:
        self.rsm = rsm
        self.delay_s = delay_s
        self.fail = 0
        self.ranges: list[tuple[int, int | None]] = []
        self._lock = threading.Lock()
        if hasattr(rsm, "open_log_segment"):  # S3 streams; the chunk cache uses it
            self.open_log_segment = self._open

    def _record(self, start: int, end: int | None) -> bool:
        """Record a GET of ``start..end``; True if it must fail."""
        with self._lock:
            self.ranges.append((start, end))
            failing = self.fail > 0
            self.fail -= failing
        time.sleep(self.delay_s)
        return failing

    def _open(self, md: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> Any:
        if self._record(start, end):
            raise RemoteStorageError("store down", retriable=True)
        return self.rsm.open_log_segment(md, start, end)

    def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start: int,
                          end: int | None = None) -> bytes:
        if self._record(start, end):
            raise RemoteStorageError("store down", retriable=True)
        return self.rsm.fetch_log_segment(md, start, end)

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: Any) -> bytes:
        return self.rsm.fetch_index(md, index_type)


def cache(rsm: Recording, size: int = 1 << 30, prefetch: int = 0) -> ChunkCache:
    return ChunkCache(rsm, {"fetch.chunk.size": str(CHUNK), "fetch.chunk.cache.size": str(size),
                            "fetch.prefetch.chunks": str(prefetch)})


@pytest.fixture
def stored(backend: Backend, segments: SegmentFactory) -> tuple[Recording, Any]:
    seg = segments.make(SEGMENT)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    return Recording(backend.rsm), seg


def test_any_range_reads_exact_bytes_with_chunk_aligned_gets(stored: tuple[Recording, Any]
                                                              ) -> None:
    rsm, seg = stored
    chunks = cache(rsm)
    rng = random.Random(7)
    cases = [(0, None), (0, 0), (CHUNK - 1, CHUNK), (SEGMENT - 1, None), (5, SEGMENT + 999)]
    for _ in range(40):
        start = rng.randrange(SEGMENT)
        cases.append((start, start + rng.randrange(3 * CHUNK)))
    for start, end in cases:
        want = seg.log[start:] if end is None else seg.log[start:end + 1]
        assert chunks.fetch_log_segment(seg.metadata, start, end) == want, (start, end)
    assert all(start % CHUNK == 0 and (end + 1) % CHUNK in (0, SEGMENT % CHUNK)
               for start, end in rsm.ranges if end is not None), rsm.ranges
    # Every chunk fetched once: the rest were hits.
    assert sorted(rsm.ranges) == sorted(set(rsm.ranges)) and len(rsm.ranges) == 11
    assert chunks.stats.misses == 11 and chunks.stats.hits > 40
    with pytest.raises(RemoteStorageError):
        chunks.fetch_log_segment(seg.metadata, SEGMENT)
    with pytest.raises(ValueError):
        chunks.fetch_log_segment(seg.metadata, 10, 9)


def test_a_sequential_read_costs_one_get_per_chunk_and_prefetch_stays_ahead(
        stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, prefetch=2)
    step = 20_000  # a consumer's fetches, smaller than a chunk
    got = b"".join(chunks.fetch_log_segment(seg.metadata, pos, pos + step - 1)
                   for pos in range(0, SEGMENT, step))
    chunks.close(wait=True)
    assert got == seg.log
    starts = [start for start, _ in rsm.ranges]
    assert sorted(starts) == [i * CHUNK for i in range(11)]  # each chunk once
    assert chunks.stats.prefetches >= 1
    assert chunks.stats.misses + chunks.stats.prefetches == 11


def test_prefetches_run_as_background_threads_and_reads_do_not(
        stored: tuple[Recording, Any]) -> None:
    """Reading ahead gives way to the event loop (the idle scheduling class);
    the chunk a reader waits for is fetched at normal priority."""
    rsm, seg = stored
    policies: dict[str, set[int]] = {"prefetch": set(), "read": set()}
    real_record = rsm._record

    def record(start: int, end: int | None) -> bool:  # every GET, streamed or not
        kind = "prefetch" if threading.current_thread().name.startswith("remote-prefetch") \
            else "read"
        policies[kind].add(os.sched_getscheduler(0))
        return real_record(start, end)

    rsm._record = record  # type: ignore[method-assign]
    chunks = cache(rsm, prefetch=2)
    chunks.fetch_log_segment(seg.metadata, 0, 1000)
    chunks.close(wait=True)
    assert policies == {"prefetch": {os.SCHED_IDLE}, "read": {os.SCHED_OTHER}}


def test_prefetch_follows_reads_and_stops_with_them(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, prefetch=2)
    chunks.fetch_log_segment(seg.metadata, 0, 1000)
    chunks.close(wait=True)
    # The read's chunk and the two after it, nothing more.
    assert sorted(start for start, _ in rsm.ranges) == [0, CHUNK, 2 * CHUNK]
    # A read jumping elsewhere (a seek) prefetches nothing.
    rsm2 = Recording(rsm.rsm)
    seeking = cache(rsm2, prefetch=2)
    seeking.fetch_log_segment(seg.metadata, 0, 10)
    seeking.fetch_log_segment(seg.metadata, 7 * CHUNK + 5, 7 * CHUNK + 10)
    seeking.close(wait=True)
    assert sorted(start for start, _ in rsm2.ranges) == [0, CHUNK, 2 * CHUNK, 7 * CHUNK]


def test_a_reader_that_catches_up_with_its_prefetches_deepens_them(
        stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = ChunkCache(rsm, {"fetch.chunk.size": str(CHUNK), "fetch.prefetch.chunks": "1",
                              "fetch.prefetch.max.chunks": "2"})
    chunks.fetch_log_segment(seg.metadata, 5, CHUNK - 1)  # a seek (no prefetch) and a miss
    assert chunks.prefetch_depth(seg.metadata) == 1
    rsm.delay_s = 0.3
    chunks.fetch_log_segment(seg.metadata, 0, CHUNK - 1)  # a hit: prefetches chunk 1 (slow)
    # Chunk 1 is still on its way when read: the partition's depth doubles.
    assert chunks.fetch_log_segment(seg.metadata, CHUNK, 2 * CHUNK - 1) == \
        seg.log[CHUNK:2 * CHUNK]
    assert chunks.prefetch_depth(seg.metadata) == 2
    for i in range(2, 6):  # never beyond fetch.prefetch.max.chunks
        chunks.fetch_log_segment(seg.metadata, i * CHUNK, (i + 1) * CHUNK - 1)
        assert chunks.prefetch_depth(seg.metadata) == 2
    chunks.close(wait=True)
    starts = [start for start, _ in rsm.ranges]
    assert len(starts) == len(set(starts)), starts  # each chunk fetched once


def test_a_reader_behind_its_prefetches_keeps_the_depth(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, prefetch=2)
    for i in range(6):
        chunks.fetch_log_segment(seg.metadata, i * CHUNK, (i + 1) * CHUNK - 1)
        _prefetched(chunks, i + 2)  # a slow reader: what it reads next is in
    chunks.close(wait=True)
    assert chunks.prefetch_depth(seg.metadata) == 2
    assert chunks.max_prefetch_chunks == 8  # the default ceiling


def _prefetched(chunks: ChunkCache, last: int, timeout: float = 10.0) -> None:
    """Until chunks up to ``last`` are cached (what a slow reader would find)."""
    deadline = time.monotonic() + timeout
    while len(chunks._chunks) < last + 1:  # noqa: SLF001 - the cache's own table
        assert time.monotonic() < deadline, "prefetch did not finish"
        time.sleep(0.005)


def test_concurrent_readers_of_one_chunk_share_one_get(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    rsm.delay_s = 0.2
    chunks = cache(rsm)
    results: list[bytes] = []

    def read() -> None:
        results.append(chunks.fetch_log_segment(seg.metadata, 100, 5000))

    threads = [threading.Thread(target=read) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [seg.log[100:5001]] * 6
    assert rsm.ranges == [(0, CHUNK - 1)]


def test_the_cache_is_bounded_in_bytes(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, size=3 * CHUNK)
    for i in range(10):
        assert chunks.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 9) \
            == seg.log[i * CHUNK:i * CHUNK + 10]
        assert chunks.cached_bytes <= 3 * CHUNK
    assert chunks.stats.evictions == 7
    chunks.fetch_log_segment(seg.metadata, 0, 9)  # evicted: fetched again
    assert [start for start, _ in rsm.ranges].count(0) == 2


def test_evicted_buffers_are_reused_unless_something_still_views_them(
        stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, size=2 * CHUNK)
    reused: list[bool] = []
    new_buffer = chunks._buffer

    def counting(size: int) -> Any:
        spare = len(chunks._spare)
        buf = new_buffer(size)
        reused.append(len(chunks._spare) < spare)
        return buf

    chunks._buffer = counting  # type: ignore[method-assign]
    chunks.fetch_log_segment(seg.metadata, 0, 9)  # chunk 0 in
    # A read inside one cached chunk is a view of it: held, as a response being sent is.
    held = chunks.fetch_log_segment(seg.metadata, 10, 99)
    assert isinstance(held, memoryview) and held == seg.log[10:100]
    for i in range(1, 6):
        assert chunks.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 99) \
            == seg.log[i * CHUNK:i * CHUNK + 100]
    # Chunk 0 went out while viewed and was not reused; chunks 1 and 2 went out
    # unviewed and filled chunks 4 and 5.
    assert reused == [False, False, False, False, True, True]
    assert held == seg.log[10:100]


def test_a_failed_fetch_fails_its_readers_and_is_tried_again(stored: tuple[Recording, Any]
                                                             ) -> None:
    rsm, seg = stored
    chunks = cache(rsm)
    rsm.fail = 1
    with pytest.raises(RemoteStorageError, match="store down"):
        chunks.fetch_log_segment(seg.metadata, 0, 99)
    assert chunks.fetch_log_segment(seg.metadata, 0, 99) == seg.log[:100]
    assert rsm.ranges == [(0, CHUNK - 1), (0, CHUNK - 1)]


def test_a_short_chunk_is_an_error_and_not_cached(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored

    class Short(Recording):
        def fetch_log_segment(self, md, start, end=None):  # type: ignore[no-untyped-def]
            return super().fetch_log_segment(md, start, end)[:-1]

    short = Short(rsm.rsm)
    short.__dict__.pop("open_log_segment", None)  # whole-range reads, one byte short
    chunks = cache(short)
    with pytest.raises(RemoteStorageError, match="expected"):
        chunks.fetch_log_segment(seg.metadata, 0, CHUNK - 1)
    assert chunks.cached_bytes == 0


class _Gated:
    """A stream that hands out its first piece, then waits for ``gate``."""

    def __init__(self, data: bytes, gate: threading.Event, first: int) -> None:
        self.data, self.gate, self.first, self.pos = data, gate, first, 0

    def read(self, size: int) -> bytes:
        if self.pos >= self.first:
            assert self.gate.wait(10)
        piece = self.data[self.pos:self.pos + min(size, self.first if self.pos == 0 else size)]
        self.pos += len(piece)
        return piece

    def close(self) -> None:
        pass


def test_a_reader_gets_its_bytes_before_the_rest_of_the_chunk_arrives(
        stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    gate = threading.Event()
    whole = rsm.rsm.fetch_log_segment(seg.metadata, 0, None)

    class Streaming(Recording):
        def _open(self, md, start, end=None):  # type: ignore[no-untyped-def]
            self._record(start, end)
            return _Gated(whole[start:end + 1], gate, 4096)

    streaming = Streaming(rsm.rsm)
    streaming.open_log_segment = streaming._open
    chunks = cache(streaming)
    # The first 100 bytes are in the first piece: served while the rest is held.
    assert chunks.fetch_log_segment(seg.metadata, 0, 99) == whole[:100]
    assert chunks.cached_bytes == 0
    got: list[bytes] = []
    waiter = threading.Thread(target=lambda: got.append(
        chunks.fetch_log_segment(seg.metadata, 5000, 6000)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # its bytes are not in yet, and no second GET was made
    gate.set()
    waiter.join(10)
    assert got == [whole[5000:6001]]
    assert streaming.ranges == [(0, CHUNK - 1)]
    deadline = time.monotonic() + 10
    while chunks.cached_bytes != CHUNK and time.monotonic() < deadline:
        time.sleep(0.01)
    assert chunks.cached_bytes == CHUNK


def test_a_failed_prefetch_costs_only_a_later_fetch(stored: tuple[Recording, Any]) -> None:
    # The store fails everything but chunk 0 while the first read prefetches
    # chunks 1 and 2: that read succeeds, and the read needing chunk 1 later
    # (store back) fetches it again rather than seeing the prefetch's error.
    rsm, seg = stored

    class DownPastChunkZero(Recording):
        down = True

        def _record(self, start: int, end: int | None) -> bool:
            self.fail = int(self.down and start > 0)
            return super()._record(start, end)

    store = DownPastChunkZero(rsm.rsm)
    chunks = cache(store, prefetch=2)
    assert chunks.fetch_log_segment(seg.metadata, 0, 99) == seg.log[:100]
    chunks.close(wait=True)  # the two prefetches have run (and failed)
    assert sorted(start for start, _ in store.ranges) == [0, CHUNK, 2 * CHUNK]
    assert chunks.cached_bytes == CHUNK and chunks.stats.prefetches == 2
    store.down = False
    assert chunks.fetch_log_segment(seg.metadata, CHUNK, CHUNK + 9) == seg.log[CHUNK:CHUNK + 10]
    assert sorted(start for start, _ in store.ranges) == [0, CHUNK, CHUNK, 2 * CHUNK]


def test_size_zero_reads_straight_through(stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, size=0, prefetch=2)
    assert chunks.fetch_log_segment(seg.metadata, 10, 20) == seg.log[10:21]
    assert rsm.ranges == [(10, 20)]


def test_the_chunk_keys_are_split_from_the_storage_managers_settings() -> None:
    rsm, chunk = split_settings({"bucket": "b", "fetch.chunk.size": "1048576",
                                 "fetch.prefetch.chunks": "3"})
    assert rsm == {"bucket": "b"}
    assert chunk == {"fetch.chunk.size": "1048576", "fetch.prefetch.chunks": "3"}


def test_chunks_fetched_ahead_and_unread_take_at_most_half_the_cache(
        stored: tuple[Recording, Any]) -> None:
    rsm, seg = stored
    chunks = cache(rsm, size=4 * CHUNK, prefetch=8)
    chunks.fetch_log_segment(seg.metadata, 0, 10)
    chunks.close(wait=True)
    # Chunk 0 for the read, then two ahead (half of four chunks), not eight.
    assert sorted(start for start, _ in rsm.ranges) == [0, CHUNK, 2 * CHUNK]
    # Reading them frees the budget: the next sequential read prefetches again.
    rsm2 = Recording(rsm.rsm)
    more = cache(rsm2, size=4 * CHUNK, prefetch=8)
    for pos in range(0, 3 * CHUNK, CHUNK // 2):
        more.fetch_log_segment(seg.metadata, pos, pos + CHUNK // 2 - 1)
    more.close(wait=True)
    starts = sorted(start for start, _ in rsm2.ranges)
    assert starts == sorted(set(starts)) and starts[-1] >= 4 * CHUNK


def test_cached_only_reads_serve_memory_and_never_call_the_store(
        stored: tuple[Recording, Any]) -> None:
    from storage.remote.chunk_cache import NotCached

    rsm, seg = stored
    chunks = cache(rsm)
    chunks.fetch_log_segment(seg.metadata, 0, 10)  # chunk 0 is cached now
    with chunks.cached_only():
        assert chunks.fetch_log_segment(seg.metadata, 100, 200) == seg.log[100:201]
        with pytest.raises(NotCached):
            chunks.fetch_log_segment(seg.metadata, CHUNK - 10, CHUNK + 10)
    assert rsm.ranges == [(0, CHUNK - 1)]
    # Outside the block the same read goes to the store.
    assert chunks.fetch_log_segment(seg.metadata, CHUNK - 10, CHUNK + 10) == \
        seg.log[CHUNK - 10:CHUNK + 11]
    assert rsm.ranges == [(0, CHUNK - 1), (CHUNK, 2 * CHUNK - 1)]


def _disk_cache(rsm: Recording, log_dir: Any, disk: int, size: int = 2 * CHUNK) -> ChunkCache:
    return ChunkCache(rsm, {"fetch.chunk.size": str(CHUNK), "fetch.chunk.cache.size": str(size),
                            "fetch.prefetch.chunks": "0",
                            "fetch.chunk.cache.disk.size": str(disk)}, str(log_dir))


def test_chunks_let_go_from_memory_are_read_back_from_disk(stored: tuple[Recording, Any],
                                                          tmp_path: Any) -> None:
    rsm, seg = stored
    chunks = _disk_cache(rsm, tmp_path, disk=8 * CHUNK)
    for i in range(8):  # memory keeps the last 2, disk the 6 before them
        chunks.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 99)
    assert chunks.disk is not None
    assert chunks.disk.cached_bytes == 6 * CHUNK
    assert len(list((tmp_path / "remote-chunk-cache").iterdir())) == 6
    assert len(rsm.ranges) == 8
    for i in range(8):  # all 8 again: none from the store
        assert chunks.fetch_log_segment(seg.metadata, i * CHUNK + 7, i * CHUNK + 4000) \
            == seg.log[i * CHUNK + 7:i * CHUNK + 4001]
    assert len(rsm.ranges) == 8
    # 0-5 from disk, and 6-7 too: reading 0-5 back let them go from memory.
    assert chunks.disk.stats.hits == 8
    assert chunks.stats.misses == 8 and chunks.stats.hits == 8


def test_the_disk_tier_is_bounded_in_bytes(stored: tuple[Recording, Any], tmp_path: Any
                                           ) -> None:
    rsm, seg = stored
    chunks = _disk_cache(rsm, tmp_path, disk=3 * CHUNK + 10, size=CHUNK)
    for i in range(10):
        chunks.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 9)
        assert chunks.disk is not None and chunks.disk.cached_bytes <= 3 * CHUNK + 10
    assert len(list((tmp_path / "remote-chunk-cache").iterdir())) == 3
    assert chunks.disk.stats.evictions == 6
    # The newest three let go (6, 7, 8) are on disk; 0 comes from the store again.
    gets = len(rsm.ranges)
    chunks.fetch_log_segment(seg.metadata, 8 * CHUNK, 8 * CHUNK + 9)
    assert len(rsm.ranges) == gets
    chunks.fetch_log_segment(seg.metadata, 0, 9)
    assert len(rsm.ranges) == gets + 1


def test_the_disk_tier_survives_a_restart_and_drops_bad_files(stored: tuple[Recording, Any],
                                                              tmp_path: Any) -> None:
    rsm, seg = stored
    first = _disk_cache(rsm, tmp_path, disk=10 * CHUNK, size=CHUNK)
    for i in range(4):
        first.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 9)
    directory = tmp_path / "remote-chunk-cache"
    files = sorted(directory.iterdir())
    assert len(files) == 3  # chunk 3 is still only in memory
    files[0].write_bytes(b"short")  # a damaged chunk file
    (directory / "leftover.chunk.123.tmp").write_bytes(b"x")
    rsm2 = Recording(rsm.rsm)
    second = _disk_cache(rsm2, tmp_path, disk=10 * CHUNK, size=CHUNK)
    assert not (directory / "leftover.chunk.123.tmp").exists()
    for i in range(3):
        assert second.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 99) \
            == seg.log[i * CHUNK:i * CHUNK + 100]
    # The damaged one came from the store again; the others from disk.
    assert len(rsm2.ranges) == 1
    assert second.disk is not None and second.disk.stats.hits == 2
    assert second.disk.stats.errors == 1


def test_a_disk_tier_that_cannot_write_never_fails_a_read(stored: tuple[Recording, Any],
                                                          tmp_path: Any) -> None:
    rsm, seg = stored
    chunks = _disk_cache(rsm, tmp_path, disk=10 * CHUNK, size=CHUNK)
    # A file where the directory was: every write fails, for root too.
    directory = tmp_path / "remote-chunk-cache"
    directory.rmdir()
    directory.write_bytes(b"")
    for i in range(4):
        assert chunks.fetch_log_segment(seg.metadata, i * CHUNK, i * CHUNK + 9) \
            == seg.log[i * CHUNK:i * CHUNK + 10]
    assert chunks.disk is not None
    assert chunks.disk.stats.errors == 3 and chunks.disk.cached_bytes == 0
    assert chunks.disk.stats.writes == 0
