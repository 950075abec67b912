"""The reader pool: remote reads for consumer fetches below the local log start.

Theory of operation
-------------------
A fetch that needs remote data parks in the remote-fetch purgatory
(``replication.purgatory.RemoteFetchPurgatory``) and asks this pool to
``start`` the read, handing it the parked entry as a ``ReadCompletion``. The
read runs as a task of the pool: served from the chunk cache when it can be,
else in a worker thread of the reader pool (remote.log.reader.threads, a
``trio.CapacityLimiter``). Whatever happens, the task ends by calling
``complete`` exactly once with a ``RemoteReadResult``: the records, or the
Kafka error the fetch answers for this partition. Nothing raises into the
fetch path once a read has started.

The purgatory, not the pool, de-duplicates reads of the same ``ReadKey`` and
parks results for a client's retry; the pool only runs reads. Storage never
imports the purgatory: it knows only the ``ReadCompletion`` interface below.

Bounds: at most remote.log.reader.max.pending.tasks reads are in flight;
beyond that ``start`` fails at once with KAFKA_STORAGE_ERROR instead of
stalling the fetch. Over the KIP-956 fetch quota no read starts at all.

Prefetch: a read near the end of a segment fetches the next segments' first
chunks ahead (``_prefetch_next_segment``), so a sequential consumer crossing
a segment boundary pays no round trip.

Remote storage being slow or down never blocks produce or local reads: no
storage call runs on the event loop, and a fetch waits for a remote result
only up to remote.fetch.max.wait.ms (the purgatory's deadline).

Error handling: corrupt remote bytes answer CORRUPT_MESSAGE, a store that is
down or an object that is missing KAFKA_STORAGE_ERROR, a compressed or
encrypted chunk that does not decode (failed GCM tag, missing or wrong key
pair) KAFKA_STORAGE_ERROR too, also counted in RemoteFetchDecodeErrorsPerSec
(``codec_storage`` logs why), our own bugs
UNKNOWN_SERVER_ERROR (logged with the traceback); each is counted in
RemoteFetchErrorsPerSec and delivered as a value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import structlog
import trio

from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from storage.remote import reader
from storage.remote.metrics import BusyTracker
from storage.remote.partition_state import RemoteServices, TieredPartition, TieredPartitions
from storage.remote.segment_codec import CodecError
from storage.remote.types import RemoteLogSegmentMetadata, RemoteStorageError

log = structlog.get_logger(__name__)


class ReadKey(NamedTuple):
    """What a remote read returns depends on all four."""

    tp: TopicPartition
    offset: int
    max_bytes: int
    min_one_batch: bool


@dataclass(frozen=True, slots=True)
class RemoteReadResult:
    """The outcome of one remote read: records, or the error the fetch answers."""

    records: bytes = b""
    error: KafkaApiError | None = None


class ReadCompletion(Protocol):
    """Whoever waits for a read (the remote-fetch purgatory's entry)."""

    def complete(self, result: RemoteReadResult) -> None:
        """Called once, on the event loop, when the read has an outcome."""
        ...


class RemoteReadPool:
    """Runs remote reads and completes their waiters with values.

    Concurrency: every method runs on the event loop; the blocking reads run
    in worker threads under ``svc.reader_limiter``.
    """

    def __init__(self, services: RemoteServices, partitions: TieredPartitions) -> None:
        self.svc = services
        self.partitions = partitions
        self.in_flight = 0
        self._nursery: trio.Nursery | None = None
        self._positions = reader.NextPositions()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the reads until cancelled (reads outlive the fetch that started them)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def partition(self, tp: TopicPartition) -> TieredPartition:
        """The partition, ready for remote reads.

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if it is not tiered here,
                KAFKA_STORAGE_ERROR if its metadata is not ready.
        """
        return await self.partitions.readable(tp)

    def start(self, p: TieredPartition, key: ReadKey, done: ReadCompletion) -> bool:
        """Start reading ``key`` from ``p``'s remote tier; ``done`` gets the outcome.

        Returns:
            False if no read was started because the broker is over its
            remote fetch quota (KIP-956: the partition is answered empty and
            the client fetches again); True otherwise.

        Raises:
            KafkaApiError: KAFKA_STORAGE_ERROR if the reader queue is full,
                OFFSET_OUT_OF_RANGE if no remote segment holds the offset.
        """
        throttle = self.svc.fetch_quota.throttle_seconds()
        if throttle > 0:
            self.svc.metrics.fetch_throttle.observe(throttle)
            return False
        if self.in_flight >= self.svc.reader_max_pending or self._nursery is None:
            self.svc.metrics.fetch_errors.labels(p.tip.topic).inc()
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, "remote reader queue is full")
        md = self.segment_for(p, key.offset)
        self.in_flight += 1
        self._nursery.start_soon(self._read, p, md, key, done)
        return True

    def segment_for(self, p: TieredPartition, offset: int) -> RemoteLogSegmentMetadata:
        """The finished remote segment holding ``offset`` in this log's epoch lineage.

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if none does.
        """
        epoch = p.log.epochs.epoch_for_offset(offset)
        md = self.svc.rlmm.remote_log_segment_metadata(p.tip, epoch, offset)
        if md is None:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                f"no remote segment holds offset {offset} (epoch {epoch})")
        return md

    async def _read(self, p: TieredPartition, md: RemoteLogSegmentMetadata, key: ReadKey,
                    done: ReadCompletion) -> None:
        svc = self.svc
        topic = p.tip.topic
        svc.metrics.fetch_requests.labels(topic).inc()
        started = time.monotonic()
        try:
            data = reader.read_cached(svc.chunks, svc.index_cache, md, key.offset,
                                      key.max_bytes, key.min_one_batch, self._positions)
            if data is None:
                data = await trio.to_thread.run_sync(
                    _busy, svc.reader_busy, reader.read_blocking, svc.chunks or svc.rsm,
                    svc.index_cache, md, key.offset, key.max_bytes, key.min_one_batch,
                    self._positions, limiter=svc.reader_limiter)
            self._prefetch_next_segment(p, md)
            svc.metrics.fetch_bytes.labels(topic).inc(len(data))
            svc.fetch_quota.record(len(data))
            result = RemoteReadResult(data)
        except reader.CorruptRemoteDataError as exc:
            result = self._failed(p, md, exc, ErrorCode.CORRUPT_MESSAGE)
        except CodecError as exc:
            svc.metrics.fetch_decode_errors.labels(topic).inc()
            result = self._failed(p, md, exc, ErrorCode.KAFKA_STORAGE_ERROR)
        except RemoteStorageError as exc:
            result = self._failed(p, md, exc, ErrorCode.KAFKA_STORAGE_ERROR)
        except Exception as exc:
            log.exception("remote read crashed", segment=str(md.remote_log_segment_id))
            result = self._failed(p, md, exc, ErrorCode.UNKNOWN_SERVER_ERROR)
        finally:
            self.in_flight -= 1
            svc.metrics.fetch_latency.observe(time.monotonic() - started)
        done.complete(result)

    def _prefetch_next_segment(self, p: TieredPartition, md: RemoteLogSegmentMetadata) -> None:
        """A sequential read near the end of ``md``: fetch the next remote
        segments' first chunks ahead, so crossing segments costs no round
        trip. The budget is in bytes (prefetch chunks x chunk size): segments
        smaller than a chunk are prefetched several at a time."""
        chunks = self.svc.chunks
        if chunks is None or not chunks.wants_next_segment(md):
            return
        budget = chunks.prefetch_depth(md) * chunks.chunk_size
        following = md
        while budget > 0:
            try:
                following = self.segment_for(p, following.end_offset + 1)
            except KafkaApiError:
                return  # the next offsets are local (or not in this lineage)
            count = min(-(-budget // chunks.chunk_size), chunks.chunk_count(following))
            chunks.prefetch(following, 0, count)
            budget -= min(count * chunks.chunk_size, following.segment_size_in_bytes)

    def _failed(self, p: TieredPartition, md: RemoteLogSegmentMetadata, exc: Exception,
                code: ErrorCode) -> RemoteReadResult:
        self.svc.metrics.fetch_errors.labels(p.tip.topic).inc()
        log.warning("remote read failed", segment=str(md.remote_log_segment_id),
                    start_offset=md.start_offset, end_offset=md.end_offset, error=str(exc),
                    answer=code.name)
        return RemoteReadResult(error=KafkaApiError(code, str(exc)))


def _busy(tracker: BusyTracker, fn: Callable[..., bytes], *args: Any) -> bytes:
    """Run ``fn`` in this worker thread, counting the time as busy."""
    token = tracker.start()
    try:
        return fn(*args)
    finally:
        tracker.stop(token)
