"""RemoteLogManager: tiering tasks for leader partitions, and remote reads.

Theory of operation
-------------------
Every remote.log.manager.task.interval.ms the manager runs, for each leader
partition with tiering on, one cycle: copy eligible segments, then expire
remote segments. Each cycle follows Kafka's template: skip if the partition
was cancelled or its backoff has not elapsed; run; on success reset the
backoff; on a retriable storage error back off exponentially with jitter; on
anything else log it with its traceback, count it, and back off too, so a
poisoned partition never stops the others. Cycles of different partitions
run concurrently; the KIP's pools (copier, expiration, reader) are
``trio.CapacityLimiter``s around the blocking storage calls.

Reads: ``read`` answers a consumer fetch below the local log start. Reads are
de-duplicated while in flight (a client that gave up after
remote.fetch.max.wait.ms and asks again joins the same read) and their
result is kept briefly so the retry is served at once. At most
remote.log.reader.max.pending.tasks reads are queued; beyond that a read
fails at once with KAFKA_STORAGE_ERROR instead of stalling the fetch.

Remote storage being slow or down never blocks produce or local reads: no
call here runs on the event loop, and fetch handlers wait for remote results
only up to remote.fetch.max.wait.ms.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from protocol.errors import ErrorCode, KafkaApiError
from storage.log.log import Log
from storage.log.txn_index import AbortedTxn, CorruptTxnIndex, collect_overlapping, decode_entries
from storage.remote import reader
from storage.remote.audit import audit_partition
from storage.remote.backoff import Backoff
from storage.remote.chunk_cache import ChunkCache
from storage.remote.copier import copy_candidates, copy_segments
from storage.remote.expirer import expire_segments, sync_log_start
from storage.remote.index_cache import RemoteIndexCache
from storage.remote.lineage import highest_remote_offset, restore_remote_epochs
from storage.remote.metrics import BusyTracker, RemoteMetrics, chunk_cache_metrics
from storage.remote.naming import lacks_txn_index
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.quota import RateQuota
from storage.remote.remover import PartitionRemover, Removal
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]

# Remote segments whose parsed transaction index is kept in memory (entries
# are 34 bytes and rare; this bounds a pathological topic).
_TXN_INDEX_CACHE_SEGMENTS = 1024

# How long a finished remote read waits for the client's retry after
# remote.fetch.max.wait.ms expired on the first attempt (a result is parked
# only until one fetch takes it), and how many bytes such results may hold in
# all: beyond it the oldest are dropped (their fetch reads again).
_RESULT_TTL_S = 30.0
_PARKED_MAX_BYTES = 64 * 1024 * 1024

# (partition, offset, max bytes, min one batch): what a read returns depends on all four.
_ReadKey = tuple[TopicPartition, int, int, bool]


class RemovalPending(Exception):
    """Tiering of a partition waits for the removal of its old remote data."""


@dataclass(slots=True)
class _Read:
    done: trio.Event
    result: bytes | None = None
    error: KafkaApiError | None = None
    finished_at: float = 0.0


class RemoteLogManager:
    def __init__(self, config: Any, services: RemoteServices) -> None:
        self.config = config
        self.svc = services
        self.partitions: dict[TopicPartition, TieredPartition] = {}
        self._reads: dict[_ReadKey, _Read] = {}
        self._nursery: trio.Nursery | None = None
        self._wakeup = trio.Event()
        self._txn_entries: OrderedDict[uuid.UUID, list[AbortedTxn]] = OrderedDict()
        self._positions = reader.NextPositions()
        self.remover = PartitionRemover(services, self._topic_partition_removed)
        # Follower partitions with tiering on: (tip, log), by topic-partition.
        self.followers: dict[TopicPartition, tuple[TopicIdPartition, Log]] = {}
        # Read-only views of followed partitions, for consumers reading them.
        self._follower_views: dict[TopicPartition, TieredPartition] = {}
        # Called once a deleted partition's remote data is gone (the broker
        # clears its restart-safe record of the pending cleanup).
        self.on_partition_removed: Callable[[TopicIdPartition], Awaitable[None]] | None = None

    # -- partitions ----------------------------------------------------------------

    def start_partition(self, tip: TopicIdPartition, lg: Log,
                        last_stable_offset: Callable[[], int]) -> TieredPartition:
        """Begin tiering tasks for a leader partition; restores state from metadata."""
        tp = (tip.topic, tip.partition)
        existing = self.partitions.get(tp)
        if existing is not None and existing.tip == tip:
            return existing
        p = self._new_partition(tip, lg, last_stable_offset)
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.partitions[tp] = p
        self.wake()
        return p

    def _new_partition(self, tip: TopicIdPartition, lg: Log,
                       last_stable_offset: Callable[[], int]) -> TieredPartition:
        cfg = self.config

        def backoff() -> Backoff:
            return Backoff(cfg["remote.log.manager.task.retry.backoff.ms"],
                           cfg["remote.log.manager.task.retry.backoff.max.ms"],
                           cfg["remote.log.manager.task.retry.jitter"])

        return TieredPartition(tip, lg, last_stable_offset, backoff(), backoff())

    async def _readable(self, tp: TopicPartition) -> TieredPartition:
        """The partition as remote reads see it: a leader's, or a follower's
        (KIP-392: consumers of its rack read from it). A follower reads the
        tier through a view of its log that runs no task: it only waits for
        the metadata to catch up, and leaves the log's tiered state to the
        follower's own refresh.

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if the partition is not tiered
                here, KAFKA_STORAGE_ERROR if its metadata is not ready.
        """
        p = self.partitions.get(tp)
        if p is not None:
            await self._ready_or_storage_error(p)
            return p
        followed = self.followers.get(tp)
        if followed is None:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE, "partition is not tiered here")
        tip, lg = followed
        view = self._follower_views.get(tp)
        if view is None or view.tip != tip or view.log is not lg:
            view = self._new_partition(tip, lg, lambda: lg.end_offset)
            self._follower_views[tp] = view
        if not view.ready:
            try:
                await self.svc.rlmm.ensure_ready(tip)
            except Exception as exc:
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                    f"remote metadata not ready: {exc}") from None
            view.ready = True
        return view

    async def _ensure_ready(self, p: TieredPartition) -> None:
        """Catch the metadata up for ``p`` once, then restore its tiered state.

        Raises:
            RemovalPending: a removal of the partition's remote data (tiering
                was disabled with delete) has not finished; nothing may be
                copied until it has, or the removal would delete the copies.
        """
        if p.ready:
            return
        await self.svc.rlmm.ensure_ready(p.tip)
        if self.remover.is_pending(p.tip):
            # Resumes a removal recorded before a restart (a no-op if queued).
            self.remover.add(p.tip, Removal.TIERING_DISABLED)
            raise RemovalPending(f"{p.tip}: deletion of the remote data of before tiering "
                                 "was disabled has not finished")
        if not p.ready:
            self._restore(p)
            p.ready = True

    def _restore(self, p: TieredPartition) -> None:
        """Highest tiered offset (in this log's epoch lineage, so a new leader
        resumes copying where the tier ends for it) and, if unknown locally,
        the log start, from metadata."""
        finished = [m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        if not finished:
            return
        if restore_remote_epochs(finished, p.log):
            log.warning("leader epochs of the tiered data restored from the remote metadata",
                        partition=str(p.tip), first_epochs=p.log.epochs.entries[:3])
        p.log.highest_tiered_offset = max(p.log.highest_tiered_offset,
                                          highest_remote_offset(self.svc.rlmm, p.tip, p.log))
        sync_log_start(p, finished)

    def _adopt_rebuilt_metadata(self, p: TieredPartition) -> None:
        """While ``tierd.remote.metadata.rebuilding`` is on (``tierd admin
        rebuild-metadata``): nothing is copied or expired, and the log takes
        its start, leader epochs and tier boundary from the metadata as it is
        now, the start moving back to the earliest finished segment if a
        broker that had lost the metadata had moved it past them."""
        finished = [m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        if not finished:
            return
        lg = p.log
        before = lg.log_start_offset
        if lg.lower_log_start_offset(min(m.start_offset for m in finished)):
            log.warning("log start offset moved back to the rebuilt remote metadata",
                        partition=str(p.tip), old=before, new=lg.log_start_offset)
        self._restore(p)

    def stop_partition(self, tp: TopicPartition) -> None:
        self.followers.pop(tp, None)
        self._follower_views.pop(tp, None)
        p = self.partitions.pop(tp, None)
        if p is not None:
            p.cancelled = True

    def follow_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """A follower of a tiered partition: it reads the partition's remote
        metadata, so it knows where the tier ends and local retention frees
        the local segments at or below it (only the leader copies and expires)."""
        tp = (tip.topic, tip.partition)
        self.stop_partition(tp)
        self.svc.rlmm.on_partition_leadership_changes([], [tip])
        self.followers[tp] = (tip, lg)

    def _refresh_followers(self) -> None:
        for tip, lg in list(self.followers.values()):
            if not lg.config.remote_storage_enable or not self.svc.rlmm.is_ready(tip):
                continue
            try:
                highest = highest_remote_offset(self.svc.rlmm, tip, lg)
            except Exception as exc:
                log.info("follower tier boundary unknown", partition=str(tip), error=str(exc))
                continue
            if highest > lg.highest_tiered_offset:
                lg.highest_tiered_offset = highest

    def delete_partition(self, tip: TopicIdPartition) -> None:
        """A deleted topic's partition: remove all its remote data in the background
        (see ``storage.remote.remover``); a restart resumes it from the broker's
        record of deleted topics."""
        self.stop_partition((tip.topic, tip.partition))
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TOPIC_DELETED)
        self.wake()

    def disable_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """Tiering turned off with remote.log.delete.on.disable (KIP-950).

        Remote data is deleted in the background under partition delete
        markers, so a restart resumes it (``resume_disabled_partition``) and
        tiering re-enabled meanwhile waits for it; the log starts at its
        local start from now on.
        """
        self.stop_partition((tip.topic, tip.partition))
        lg.highest_tiered_offset = -1
        lg.advance_log_start_offset(lg.local_log_start_offset)
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TIERING_DISABLED)
        self.wake()

    def resume_disabled_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """At start: a leader partition whose tiering is off with
        remote.log.delete.on.disable; deletes what a removal interrupted by a
        restart (or a crash before it was marked) left in the tier."""
        if lg.config.remote_storage_enable:
            return
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TIERING_DISABLED)
        self.wake()

    async def _topic_partition_removed(self, tip: TopicIdPartition) -> None:
        if self.on_partition_removed is not None:
            await self.on_partition_removed(tip)

    async def _run_removals(self) -> None:
        """Run the queued removals; stop following the metadata of partitions
        that are gone from the tier and not tiered here."""
        for tip in await self.remover.run_once():
            tp = (tip.topic, tip.partition)
            if tp not in self.partitions and tp not in self.followers:
                self.svc.rlmm.on_stop_partitions([tip])

    def wake(self) -> None:
        """Run a cycle soon (new partition, config change, test hooks)."""
        self._wakeup.set()

    # -- the periodic cycle ----------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            interval = self.config["remote.log.manager.task.interval.ms"] / 1000
            while True:
                with trio.move_on_after(interval):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                await self._cycle_all()
                self._refresh_followers()
                await self._run_removals()
                self._forget_old_reads()

    async def _cycle_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for p in list(self.partitions.values()):
                nursery.start_soon(self._cycle, p)

    async def _cycle(self, p: TieredPartition) -> None:
        try:
            await self._ensure_ready(p)
        except RemovalPending:
            return  # the removal runs after this cycle
        except Exception as exc:
            log.warning("remote metadata not ready", partition=str(p.tip), error=str(exc))
            return
        if p.log.config.remote_metadata_rebuilding:
            self._adopt_rebuilt_metadata(p)
            return
        now = self.svc.clock()
        if not p.cancelled and p.copy_backoff.ready(now):
            await self._guarded(p, p.copy_backoff, "copy", copy_segments)
        if not p.cancelled and p.expire_backoff.ready(now):
            await self._guarded(p, p.expire_backoff, "expire", expire_segments)
        if not p.cancelled and self._audit_due(p, now):
            await self._audit(p)

    # -- the audit (storage.remote.audit) --------------------------------------------

    def _audit_due(self, p: TieredPartition, now_ms: int) -> bool:
        """Every tierd.remote.audit.interval.ms, the first one interval after
        leadership starts (a restart does not list every partition at once)."""
        interval = self.config["tierd.remote.audit.interval.ms"]
        if interval < 0 or not hasattr(self.svc.rsm, "list_objects"):
            return False
        if not p.next_audit:
            p.next_audit = now_ms + interval
        return now_ms >= p.next_audit

    async def _audit(self, p: TieredPartition) -> None:
        p.next_audit = self.svc.clock() + self.config["tierd.remote.audit.interval.ms"]
        await audit_partition(p, self.svc, self.config["tierd.remote.audit.grace.ms"])

    async def _guarded(self, p: TieredPartition, backoff: Backoff, what: str,
                       task: Callable[[TieredPartition, RemoteServices], Any]) -> None:
        try:
            await task(p, self.svc)
        except RemoteStorageError as exc:
            delay = backoff.failed(self.svc.clock())
            log.warning("remote task failed; backing off", task=what, topic=p.tip.topic,
                        partition=p.tip.partition, error=str(exc), retriable=exc.retriable,
                        retry_in_ms=delay)
        except Exception:
            delay = backoff.failed(self.svc.clock())
            log.exception("remote task crashed; backing off", task=what, topic=p.tip.topic,
                          partition=p.tip.partition, retry_in_ms=delay)
        else:
            backoff.succeeded()

    # -- reads ---------------------------------------------------------------------

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

    async def read(self, tp: TopicPartition, offset: int, max_bytes: int,
                   min_one_batch: bool, deadline: float) -> bytes | None:
        """Remote records from ``offset``; None if not ready by ``deadline`` (trio time).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE (no such remote data),
                KAFKA_STORAGE_ERROR (store down, object missing, queue full),
                CORRUPT_MESSAGE (remote bytes fail validation).
        """
        p = await self._readable(tp)
        if max_bytes <= 0 and not min_one_batch:
            return None  # no byte share for this partition: a read could return nothing
        key = (tp, offset, max_bytes, min_one_batch)
        entry = self._reads.get(key)
        if entry is None and self.svc.fetch_quota.exceeded():
            # KIP-956: over the remote fetch quota, no new remote reads; the
            # partition is answered empty and the client fetches again.
            return None
        if entry is not None and entry.done.is_set() and entry.error is not None:
            # A failure answers only the fetches that were waiting for it; a
            # new fetch tries the store again (it may have recovered).
            del self._reads[key]
            entry = None
        if entry is None:
            entry = self._start_read(p, key, offset, max_bytes, min_one_batch)
        with trio.move_on_at(deadline):
            await entry.done.wait()
        if not entry.done.is_set():
            return None
        if self._reads.get(key) is entry:
            del self._reads[key]  # delivered: fetches waiting on it hold the entry
        if entry.error is not None:
            raise entry.error
        return entry.result

    def _start_read(self, p: TieredPartition, key: _ReadKey, offset: int,
                    max_bytes: int, min_one_batch: bool) -> _Read:
        pending = sum(1 for r in self._reads.values() if not r.done.is_set())
        if pending >= self.svc.reader_max_pending or self._nursery is None:
            self.svc.metrics.fetch_errors.labels(p.tip.topic).inc()
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, "remote reader queue is full")
        md = self.segment_for(p, offset)
        entry = _Read(trio.Event())
        self._reads[key] = entry
        self._nursery.start_soon(self._do_read, p, md, entry, offset, max_bytes, min_one_batch)
        return entry

    async def _do_read(self, p: TieredPartition, md: RemoteLogSegmentMetadata, entry: _Read,
                       offset: int, max_bytes: int, min_one_batch: bool) -> None:
        svc = self.svc
        topic = p.tip.topic
        svc.metrics.fetch_requests.labels(topic).inc()
        started = time.monotonic()
        try:
            entry.result = reader.read_cached(svc.chunks, svc.index_cache, md, offset,
                                              max_bytes, min_one_batch, self._positions)
            if entry.result is None:
                entry.result = await trio.to_thread.run_sync(
                    _busy, svc.reader_busy, reader.read_blocking, svc.chunks or svc.rsm,
                    svc.index_cache, md, offset, max_bytes, min_one_batch, self._positions,
                    limiter=svc.reader_limiter)
            self._prefetch_next_segment(p, md)
            svc.metrics.fetch_bytes.labels(topic).inc(len(entry.result))
            svc.fetch_quota.record(len(entry.result))
        except reader.CorruptRemoteDataError as exc:
            entry.error = self._read_failed(p, md, exc, ErrorCode.CORRUPT_MESSAGE)
        except RemoteStorageError as exc:
            entry.error = self._read_failed(p, md, exc, ErrorCode.KAFKA_STORAGE_ERROR)
        except Exception as exc:
            log.exception("remote read crashed", segment=str(md.remote_log_segment_id))
            entry.error = self._read_failed(p, md, exc, ErrorCode.UNKNOWN_SERVER_ERROR)
        finally:
            entry.finished_at = time.monotonic()
            svc.metrics.fetch_latency.observe(entry.finished_at - started)
            entry.done.set()
            self._forget_old_reads()

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

    def _read_failed(self, p: TieredPartition, md: RemoteLogSegmentMetadata, exc: Exception,
                     code: ErrorCode) -> KafkaApiError:
        self.svc.metrics.fetch_errors.labels(p.tip.topic).inc()
        log.warning("remote read failed", segment=str(md.remote_log_segment_id),
                    start_offset=md.start_offset, end_offset=md.end_offset, error=str(exc),
                    answer=code.name)
        return KafkaApiError(code, str(exc))

    def _forget_old_reads(self) -> None:
        """Parked results older than _RESULT_TTL_S, then the oldest beyond
        _PARKED_MAX_BYTES, are dropped."""
        cutoff = time.monotonic() - _RESULT_TTL_S
        parked = sorted(((e.finished_at, k) for k, e in self._reads.items() if e.done.is_set()),
                        key=lambda item: item[0])
        total = sum(len(self._reads[k].result or b"") for _, k in parked)
        for finished_at, key in parked:
            if finished_at >= cutoff and total <= _PARKED_MAX_BYTES:
                break
            total -= len(self._reads.pop(key).result or b"")

    async def _ready_or_storage_error(self, p: TieredPartition) -> None:
        try:
            await self._ensure_ready(p)
        except Exception as exc:
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                f"remote metadata not ready: {exc}") from None

    async def collect_aborted(self, tp: TopicPartition, start: int,
                              upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper) for a read_committed
        fetch served from the remote tier (Kafka's collectAbortedTransactions).

        Remote segments' transaction indexes are searched from the one holding
        ``start`` until an entry's last stable offset shows nothing later can
        start below ``upper``; then the local segments.

        Raises:
            KafkaApiError: KAFKA_STORAGE_ERROR if an index cannot be read (the
                records must not be served without their abort list).
        """
        if tp not in self.partitions and tp not in self.followers:
            return []
        p = await self._readable(tp)
        finished = sorted((m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                           if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                           and m.end_offset >= start), key=lambda m: m.start_offset)
        out: list[AbortedTxn] = []
        for md in finished:
            found, complete = collect_overlapping(await self._aborted_entries(md), start, upper)
            out += found
            if complete:
                return out
        return out + p.log.collect_aborted(max(start, p.log.local_log_start_offset), upper)

    async def _aborted_entries(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        key = md.remote_log_segment_id.id
        cached = self._txn_entries.get(key)
        if cached is not None:
            self._txn_entries.move_to_end(key)
            return cached
        if lacks_txn_index(md):
            return []  # its manifest says so: no GET (most segments)
        try:
            data = await trio.to_thread.run_sync(self.svc.rsm.fetch_index, md,
                                                 IndexType.TRANSACTION,
                                                 limiter=self.svc.reader_limiter)
            entries = decode_entries(data)
        except RemoteResourceNotFoundError:
            entries = []  # the segment had no aborted transactions
        except (RemoteStorageError, CorruptTxnIndex) as exc:
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                f"transaction index of {md.remote_log_segment_id}: {exc}") from None
        self._txn_entries[key] = entries
        while len(self._txn_entries) > _TXN_INDEX_CACHE_SEGMENTS:
            self._txn_entries.popitem(last=False)
        return entries

    def remote_max_timestamp(self, tp: TopicPartition) -> int | None:
        """Largest record timestamp in the partition's readable remote segments."""
        p = self.partitions.get(tp)
        if p is None or not p.ready:
            return None
        stamps = [m.max_timestamp_ms for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                  if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                  and m.end_offset >= p.log.log_start_offset]
        return max(stamps) if stamps else None

    async def offset_for_timestamp(self, tp: TopicPartition,
                                   timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first remote record >= ``timestamp``, or None.

        Raises:
            KafkaApiError: KAFKA_STORAGE_ERROR if the remote tier cannot be read.
        """
        p = self.partitions.get(tp)
        if p is None:
            return None
        await self._ready_or_storage_error(p)
        finished = sorted((m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                           if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                           and m.end_offset >= p.log.log_start_offset
                           and m.max_timestamp_ms >= timestamp),
                          key=lambda m: m.start_offset)
        for md in finished:
            try:
                found = await trio.to_thread.run_sync(
                    reader.offset_for_timestamp_blocking, self.svc.chunks or self.svc.rsm,
                    self.svc.index_cache, md,
                    timestamp, p.log.log_start_offset, limiter=self.svc.reader_limiter)
            except RemoteStorageError as exc:
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
            if found is not None:
                return found
        return None

    # -- metrics -------------------------------------------------------------------

    def partition_gauges(self) -> list[tuple[str, int, dict[str, float]]]:
        out = []
        for (topic, partition), p in list(self.partitions.items()):
            if not p.ready:
                continue
            segments = list(self.svc.rlmm.list_remote_log_segments(p.tip))
            finished = [m for m in segments
                        if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            lag = copy_candidates(p) if not p.cancelled else []
            gauges = {
                "RemoteLogSizeBytes": float(sum(m.segment_size_in_bytes for m in finished)),
                "RemoteLogMetadataCount": float(len(segments)),
                "RemoteCopyLagBytes": float(sum(s.size for s in lag)),
                "RemoteCopyLagSegments": float(len(lag)),
            }
            if p.audit is not None:
                gauges.update({
                    "RemoteOrphanObjects": float(p.audit.orphan_objects),
                    "RemoteOrphanBytes": float(p.audit.orphan_bytes),
                    "RemoteMissingSegments": float(p.audit.missing_segments),
                    "RemoteSizeMismatchSegments": float(p.audit.size_mismatches),
                })
            out.append((topic, partition, gauges))
        return out

    def broker_gauges(self) -> dict[str, float]:
        return {
            "RemoteLogReaderTaskQueueSize": float(
                self.svc.reader_limiter.statistics().tasks_waiting),
            "RemoteLogReaderAvgIdlePercent": self.svc.reader_busy.idle_percent(),
            "RemoteLogManagerTasksAvgIdlePercent": self.svc.tasks_busy.idle_percent(),
            **chunk_cache_metrics(self.svc.chunks),
        }


def _busy(tracker: BusyTracker, fn: Callable[..., bytes], *args: Any) -> bytes:
    """Run ``fn`` in this worker thread, counting the time as busy."""
    token = tracker.start()
    try:
        return fn(*args)
    finally:
        tracker.stop(token)


def build_services(config: Any, log_dir: str, rsm: Any, rlmm: Any, registry: Any,
                   clock: Callable[[], int],
                   chunk_settings: Mapping[str, str] | None = None) -> RemoteServices:
    """Pools, caches and metrics from the broker config (Kafka's key names) and
    the chunk cache's stripped ``rsm.config.fetch.*`` settings."""
    readers = config["remote.log.reader.threads"]
    copiers = config["remote.log.manager.copier.thread.pool.size"]
    expirers = config["remote.log.manager.expiration.thread.pool.size"]
    return RemoteServices(
        rsm=rsm, rlmm=rlmm,
        index_cache=RemoteIndexCache(log_dir, config["remote.log.index.file.cache.total.size.bytes"]),
        metrics=RemoteMetrics(registry), node_id=config["node.id"], clock=clock,
        copier_limiter=trio.CapacityLimiter(copiers),
        expiration_limiter=trio.CapacityLimiter(expirers),
        reader_limiter=trio.CapacityLimiter(readers),
        reader_busy=BusyTracker(readers), tasks_busy=BusyTracker(copiers + expirers),
        reader_max_pending=config["remote.log.reader.max.pending.tasks"],
        copy_quota=RateQuota(config["remote.log.manager.copy.max.bytes.per.second"],
                             config["remote.log.manager.copy.quota.window.num"],
                             config["remote.log.manager.copy.quota.window.size.seconds"],
                             trio.current_time),
        fetch_quota=RateQuota(config["remote.log.manager.fetch.max.bytes.per.second"],
                              config["remote.log.manager.fetch.quota.window.num"],
                              config["remote.log.manager.fetch.quota.window.size.seconds"],
                              trio.current_time),
        chunks=ChunkCache(rsm, chunk_settings, log_dir))
