"""The log cleaner: compaction of logs with cleanup.policy=compact (Kafka's LogCleaner).

Theory of operation. Each of log.cleaner.threads cleaner tasks loops: pick
the filthiest compacted log no other task is cleaning, run one pass on it
(``storage.log.cleaner_pass``, in the task's worker process), swap each
cleaned group in (``Log.replace_segments``), checkpoint the new first dirty
offset in ``cleaner-offset-checkpoint``; with nothing to clean, sleep
log.cleaner.backoff.ms.

Choosing (``LogCleanerManager.grabFilthiestCompactedLog``): a log's
cleanable section is [first dirty, first uncleanable), where the first
dirty offset is the checkpointed one (the log start if none, or if it lies
outside the log), and the first uncleanable offset is the least of the last
stable offset (an open transaction's data is never cleaned; bounded by the
high watermark, so a follower cleans only what is committed), the active
segment's base offset, and the base of the first segment younger than
min.compaction.lag.ms. Its dirty ratio is the cleanable bytes over the
clean plus cleanable bytes; a log is cleaned when that ratio is above
min.cleanable.dirty.ratio, or when its oldest dirty record is older than
max.compaction.lag.ms. The filthiest goes first.

Concurrency: the tasks run on the event loop; only the worker processes
read and write segment files. Whatever the log did while a step ran in the
worker (retention, DeleteRecords, truncation, deletion of the partition),
``replace_segments`` refuses segments that are not the log's any more and
the pass ends without swapping them (no error: the next pass starts over).

Error handling: a corrupt batch, or any failure of a pass that the log's
own changes do not explain, marks the partition uncleanable (Kafka's
``uncleanable-partitions-count``) until the broker restarts; it is logged
with the cause. The cleaner never stops for one bad partition.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import structlog
import trio
from prometheus_client.core import GaugeMetricFamily, Metric

from config import BrokerConfig
from protocol.partition import TopicPartition
from storage.log import checkpoint, swap
from storage.log.cleaner_pass import PassSpec
from storage.log.cleaner_process import CleanerError, CleanerWorker
from storage.log.file_deleter import unlink_all
from storage.log.local_log import StaleSegments
from storage.log.log import Log
from storage.log.segment import LogSegment

log = structlog.get_logger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


@dataclass(frozen=True, slots=True)
class Cleanable:
    """A log's cleaning bounds and dirtiness, taken on the event loop."""

    tp: TopicPartition
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    overdue: bool  # max.compaction.lag.ms passed for its oldest dirty record

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """Kafka's LogCleaner / LogCleanerManager gauges at one instant. Replaced whole
    on the event loop (``dataclasses.replace``), so the scrape thread reads one
    consistent copy."""

    recopy_percent: float = 0.0
    max_buffer_utilization_percent: float = 0.0
    max_clean_time_secs: float = 0.0
    max_dirty_percent: float = 0.0
    uncleanable_partitions: int = 0
    last_run_monotonic: float = 0.0
    passes: int = 0
    bytes_cleaned: int = 0


def cleanable_bounds(tp: TopicPartition, lg: Log, first_dirty: int | None, high_watermark: int,
                     now_ms: int) -> Cleanable:
    """Where ``lg`` may be cleaned and how dirty it is (see the module doc)."""
    cfg = lg.config
    start = lg.log_start_offset
    dirty = start if first_dirty is None or not start <= first_dirty <= lg.end_offset \
        else first_dirty
    unstable = lg.first_unstable_offset
    bounds = [high_watermark, lg.active.base_offset]
    if unstable is not None:
        bounds.append(unstable)
    closed = lg.segments[:-1]
    if cfg.min_compaction_lag_ms > 0:
        young = next((s.base_offset for s in closed if s.last_offset >= dirty
                      and s.max_timestamp > now_ms - cfg.min_compaction_lag_ms), None)
        if young is not None:
            bounds.append(young)
    uncleanable = max(min(bounds), start)
    dirty = min(dirty, uncleanable)
    clean_bytes = sum(s.size for s in closed if s.last_offset < dirty)
    cleanable = [s for s in closed if s.last_offset >= dirty and s.base_offset < uncleanable]
    overdue = False
    if cleanable and cfg.max_compaction_lag_ms < 2**63 - 1:
        first_ts = cleanable[0].first_batch_timestamp
        overdue = first_ts is not None and 0 <= first_ts < now_ms - cfg.max_compaction_lag_ms
    return Cleanable(tp, lg, dirty, uncleanable, clean_bytes, sum(s.size for s in cleanable),
                     overdue)


def group_segments(segments: list[LogSegment], max_bytes: int, max_index_bytes: int
                   ) -> list[list[LogSegment]]:
    """Consecutive segments grouped so each group's cleaned copy fits one
    segment (Kafka's ``groupSegmentsBySize``): sizes within segment.bytes,
    offset index entries within segment.index.bytes, offsets within an int32
    of the group's base."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, index_bytes = segments[i].size, _index_bytes(segments[i])
        i += 1
        while i < len(segments):
            nxt = segments[i]
            if (size + nxt.size > max_bytes or index_bytes + _index_bytes(nxt) > max_index_bytes
                    or nxt.last_offset - group[0].base_offset > 2**31 - 1):
                break
            group.append(nxt)
            size += nxt.size
            index_bytes += _index_bytes(nxt)
            i += 1
        groups.append(group)
    return groups


def _changed(lg: Log, segments: list[LogSegment]) -> bool:
    """Whether any of ``segments`` left ``lg`` or changed size (the log moved on)."""
    live = {id(s): s.size for s in lg.segments}
    return any(live.get(id(s)) != s.size or s.fd < 0 for s in segments)


def _index_bytes(seg: LogSegment) -> int:
    return len(seg.index) * seg.index.entry.size


class LogCleaner:
    def __init__(self, config: BrokerConfig, logs: dict[TopicPartition, Log],
                 clock: Callable[[], int]) -> None:
        self.config = config
        self.logs = logs
        self.clock = clock
        self.enabled = config["log.cleaner.enable"] and config["log.cleaner.threads"] > 0
        self.threads = max(config["log.cleaner.threads"], 1)
        self.path = os.path.join(config.log_dir, CHECKPOINT_FILE)
        self.checkpoints: dict[TopicPartition, int] = checkpoint.read_offsets(self.path)
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        self.stats = CleanerStats()
        self._workers: list[CleanerWorker] = []
        self._nursery: trio.Nursery | None = None
        self._high_watermark: Callable[[TopicPartition], int] | None = None

    # -- the loop ---------------------------------------------------------------

    async def run(self, high_watermark: Callable[[TopicPartition], int]) -> None:
        """Run the cleaner tasks until cancelled (a no-op if log.cleaner.enable is off)."""
        if not self.enabled:
            return
        try:
            async with trio.open_nursery() as nursery:
                self._nursery, self._high_watermark = nursery, high_watermark
                self._start_tasks()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for worker in self._workers:
                worker.close()

    def resize(self, threads: int) -> None:
        """Run ``threads`` cleaner tasks (log.cleaner.threads changed): new tasks
        start at once; surplus ones stop after their current pass."""
        self.threads = max(threads, 1)
        if self._nursery is not None:
            self._start_tasks()

    def _start_tasks(self) -> None:
        assert self._nursery is not None and self._high_watermark is not None
        while len(self._workers) < self.threads:
            worker = CleanerWorker()
            worker.start()  # now, not in the middle of the first pass
            self._workers.append(worker)
            self._nursery.start_soon(self._task, worker, self._high_watermark)

    async def _task(self, worker: CleanerWorker,
                    high_watermark: Callable[[TopicPartition], int]) -> None:
        while self._workers.index(worker) < self.threads:
            try:
                picked = self.grab_filthiest(high_watermark)
            except Exception:  # our own bug: log it, never take the broker down
                log.exception("choosing a log to clean failed")
                picked = None
            if picked is None:
                await trio.sleep(self.config["log.cleaner.backoff.ms"] / 1000)
                continue
            self.in_progress.add(picked.tp)
            try:
                await self._clean(worker, picked)
            except StaleSegments as exc:
                log.info("cleaning pass abandoned: the log changed", topic=picked.tp[0],
                         partition=picked.tp[1], reason=str(exc))
            except CleanerError as exc:
                if self.logs.get(picked.tp) is not picked.log:
                    log.info("cleaning pass abandoned: the log is gone", topic=picked.tp[0],
                             partition=picked.tp[1])
                else:
                    self._mark_uncleanable(picked.tp, str(exc))
            except Exception as exc:  # our own bug: never let it take the broker down
                log.exception("cleaning pass failed", topic=picked.tp[0], partition=picked.tp[1])
                self._mark_uncleanable(picked.tp, f"{type(exc).__name__}: {exc}")
            finally:
                self.in_progress.discard(picked.tp)
            await trio.sleep(0)
        self._workers.remove(worker)
        worker.close()

    def _mark_uncleanable(self, tp: TopicPartition, reason: str) -> None:
        self.uncleanable.add(tp)
        self.stats = replace(self.stats, uncleanable_partitions=len(self.uncleanable))
        log.error("partition marked uncleanable", topic=tp[0], partition=tp[1], error=reason)

    def grab_filthiest(self, high_watermark: Callable[[TopicPartition], int]) -> Cleanable | None:
        """The compacted log most in need of cleaning, or None."""
        now = self.clock()
        best: Cleanable | None = None
        max_ratio = 0.0
        for tp, lg in list(self.logs.items()):
            if lg.truncated_below is not None:
                if tp in self.checkpoints:
                    self.checkpoints[tp] = min(self.checkpoints[tp], lg.truncated_below)
                lg.truncated_below = None
            if not lg.config.compact or tp in self.in_progress or tp in self.uncleanable:
                continue
            c = cleanable_bounds(tp, lg, self.checkpoints.get(tp), high_watermark(tp), now)
            max_ratio = max(max_ratio, c.ratio)
            if c.cleanable_bytes <= 0 or not (c.overdue or c.ratio > lg.config.min_cleanable_ratio):
                continue
            if best is None or c.ratio > best.ratio:
                best = c
        self.stats = replace(self.stats, max_dirty_percent=100 * max_ratio)
        return best

    # -- one pass ---------------------------------------------------------------

    def _spec(self, c: Cleanable, closed: list[LogSegment]) -> PassSpec:
        lg, cfg = c.log, c.log.config
        last_data = {pid: entry.batches[-1].last_offset
                     for pid, entry in lg.producers.producers.items() if entry.batches}
        aborted = lg.collect_aborted(closed[0].base_offset, c.first_uncleanable) if closed else []
        return PassSpec(
            directory=lg.directory, bases=[s.base_offset for s in closed],
            sizes=[s.size for s in closed], first_dirty=c.first_dirty,
            first_uncleanable=c.first_uncleanable, aborted=aborted, last_data_offsets=last_data,
            now_ms=self.clock(), delete_retention_ms=cfg.delete_retention_ms,
            map_memory_bytes=self.config["log.cleaner.dedupe.buffer.size"] // self.threads,
            map_load_factor=self.config["log.cleaner.io.buffer.load.factor"],
            io_buffer_bytes=max(self.config["log.cleaner.io.buffer.size"], 64 * 1024),
            io_max_bytes_per_second=self.config["log.cleaner.io.max.bytes.per.second"],
            max_message_bytes=cfg.max_message_bytes,
            index_interval_bytes=cfg.index_interval_bytes)

    async def _clean(self, worker: CleanerWorker, c: Cleanable) -> None:
        lg = c.log
        started = time.monotonic()
        closed = [s for s in lg.segments[:-1] if s.base_offset < c.first_uncleanable]
        try:
            await self._pass(worker, c, closed, started)
        except CleanerError as exc:
            if _changed(lg, closed):
                # The worker read files the log truncated or deleted meanwhile.
                raise StaleSegments(f"segments changed during the pass ({exc})") from None
            raise

    async def _pass(self, worker: CleanerWorker, c: Cleanable, closed: list[LogSegment],
                    started: float) -> None:
        lg = c.log
        mapped = await worker.call("build_map", self._spec(c, closed))
        upto = [s for s in closed if s.base_offset < mapped.map_end]
        bytes_in = bytes_out = 0
        retired: list[str] = []
        try:
            for group in group_segments(upto, lg.config.segment_bytes,
                                        lg.config.segment_index_bytes):
                result = await worker.call("clean_group", [s.base_offset for s in group])
                try:
                    retired += lg.replace_segments(group, result.base)
                except StaleSegments:
                    swap.remove_cleaned(lg.directory, result.base)
                    await worker.call("end_pass")
                    raise
                bytes_in += result.bytes_read
                bytes_out += result.bytes_written
            await worker.call("end_pass")
        finally:
            if retired:
                # The broker's deleter (an idle-class thread), as for retention.
                if lg.local.discard is not None:
                    lg.local.discard(retired)
                else:
                    await trio.to_thread.run_sync(unlink_all, retired)
        self.checkpoints[c.tp] = mapped.map_end
        await self.write_checkpoint()
        elapsed = time.monotonic() - started
        stats = self.stats
        self.stats = replace(
            stats, passes=stats.passes + 1, bytes_cleaned=stats.bytes_cleaned + bytes_in,
            recopy_percent=100 * bytes_out / bytes_in if bytes_in else 0.0,
            max_buffer_utilization_percent=100 * mapped.utilization,
            max_clean_time_secs=elapsed, last_run_monotonic=time.monotonic())
        log.info("cleaned log", topic=c.tp[0], partition=c.tp[1], first_dirty=c.first_dirty,
                 cleaned_up_to=mapped.map_end, bytes_in=bytes_in, bytes_out=bytes_out,
                 map_entries=mapped.entries, seconds=round(elapsed, 3),
                 mb_per_s=round(bytes_in / 1e6 / elapsed, 2) if elapsed else None)

    # -- checkpoint, lifecycle ----------------------------------------------------

    async def write_checkpoint(self) -> None:
        live = {tp: o for tp, o in self.checkpoints.items() if tp in self.logs}
        self.checkpoints = live
        await trio.to_thread.run_sync(checkpoint.write_offsets, self.path, live, True)

    def forget(self, tp: TopicPartition) -> None:
        """The partition's log was deleted or emptied: its checkpoint is void."""
        self.checkpoints.pop(tp, None)
        self.uncleanable.discard(tp)
        self.stats = replace(self.stats, uncleanable_partitions=len(self.uncleanable))

    # -- metrics (prometheus_client Collector) --------------------------------------

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        since = (time.monotonic() - s.last_run_monotonic) * 1000 if s.last_run_monotonic else 0.0
        for name, doc, value in (
                ("cleaner_recopy_percent", "Bytes written over bytes read in the last pass, %",
                 s.recopy_percent),
                ("max_buffer_utilization_percent", "Key map use in the last pass, %",
                 s.max_buffer_utilization_percent),
                ("max_clean_time_secs", "Duration of the last pass", s.max_clean_time_secs),
                ("max_dirty_percent", "Largest dirty ratio of a compacted log, %",
                 s.max_dirty_percent),
                ("uncleanable_partitions", "Partitions the cleaner gave up on",
                 s.uncleanable_partitions),
                ("time_since_last_run_ms", "Since the last pass ended", since),
                ("cleaner_passes", "Cleaning passes completed", s.passes),
                ("cleaner_bytes_cleaned", "Bytes of log read by cleaning passes",
                 s.bytes_cleaned)):
            yield GaugeMetricFamily(f"tierd_{name}", doc, value=value)
