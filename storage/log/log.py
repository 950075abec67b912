"""The log of one partition: an ordered run of segments.

Offsets: ``log_start_offset`` is the first readable offset (moved by
retention and DeleteRecords), ``end_offset`` (LEO) the next offset to
assign. The replica manager owns the high watermark and passes it to
``read`` as the upper bound of what consumers may see.

Concurrency: every method runs on the event loop except ``flush``'s worker
thread part (``_fsync_segments``), which only fsyncs descriptors.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass

import structlog
import trio

from config.topic import LogConfig
from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.epoch_cache import LeaderEpochCache
from storage.log.producer_state import ProducerStateManager
from storage.log.segment import LogSegment

log = structlog.get_logger(__name__)

# Offsets within a segment are stored as int32 relative offsets, so a
# segment cannot span more than this many offsets (Kafka's limit too).
_MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    needs_flush: bool


@dataclass(slots=True)
class ReadResult:
    data: bytes
    first_offset: int


class Log:
    """One partition's local log. Build with ``Log.open``."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 clock: Callable[[], int]) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._clock = clock
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.epochs = LeaderEpochCache(directory)
        self.producers = ProducerStateManager()
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        # A roll makes the previous segment immutable; like Kafka we fsync it
        # soon after, so the recovery point keeps up without a flush policy.
        self._rolled_since_flush = False

    # -- construction -------------------------------------------------------

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig,
             clock: Callable[[], int], *, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False) -> Log:
        """Open (or create) the log in ``directory``, recovering if needed."""
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, topic, partition, config, clock)
        self._load_segments(recovery_point, clean_shutdown)
        if not self.segments:
            self._add_segment(max(log_start_offset, 0))
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.recovery_point = min(max(recovery_point, self.log_start_offset), self.end_offset)
        self.epochs.truncate_from_end(self.end_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state()
        return self

    def _rebuild_producer_state(self) -> None:
        """Replay batch headers so idempotent producers survive a restart."""
        self.producers.truncate()
        for seg in self.segments:
            for batch in seg.iter_batches(0):
                head = seg.read_batch_bytes_header(batch)
                if head.producer_id >= 0:
                    self.producers.update([head])

    def _load_segments(self, recovery_point: int, clean_shutdown: bool) -> None:
        """Open every segment; recover those the last shutdown may have torn.

        Segments wholly below the recovery point (or all, after a clean
        shutdown) are trusted if their indexes load; others are re-validated
        batch by batch. Once a segment loses its tail, every later segment is
        dropped: its offsets can no longer follow on.
        """
        for name in os.listdir(self.directory):
            if name.endswith((".tmp", ".deleted", ".cleaned", ".swap")):
                os.unlink(os.path.join(self.directory, name))
        bases = sorted(int(name[:-4]) for name in os.listdir(self.directory)
                       if name.endswith(".log") and name[:-4].isdigit())
        now = self._clock()
        truncated = False
        for base in bases:
            seg = LogSegment(self.directory, base, self.config.segment_index_bytes,
                             self.config.index_interval_bytes, now)
            if truncated or (self.segments and base <= self.segments[-1].last_offset):
                log.warning("dropping segment after a truncated one", segment=seg.log_path)
                seg.delete()
                continue
            if seg.load_indexes() and (clean_shutdown or seg.last_offset < recovery_point):
                self._append_segment(seg)
                continue
            truncated = seg.recover(self.config.max_message_bytes) > 0
            self._append_segment(seg)
            self._rebuild_epochs_from(seg)

    def _rebuild_epochs_from(self, seg: LogSegment) -> None:
        for batch in seg.iter_batches(0):
            header = seg.read_batch_bytes_header(batch)
            self.epochs.assign(header.leader_epoch, header.base_offset)

    def _append_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    def _add_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment(self.directory, base_offset, self.config.segment_index_bytes,
                         self.config.index_interval_bytes, self._clock())
        self._append_segment(seg)
        return seg

    # -- state --------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def end_offset(self) -> int:
        active = self.active
        if active.last_offset >= active.base_offset:
            return active.last_offset + 1
        return active.base_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # -- append -------------------------------------------------------------

    def append_as_leader(self, data: bytearray, leader_epoch: int) -> AppendResult:
        """Validate, assign offsets and append a produced record set.

        Raises:
            KafkaApiError: the record set is invalid (see
                ``records.validate_for_append``) or has a timestamp outside
                message.timestamp.before/after.max.ms.
        """
        headers = records.validate_for_append(data, self.config.max_message_bytes)
        now = self._clock()
        if not self.config.log_append_time:
            self._check_timestamps(headers, now)
        duplicate = self.producers.check(headers)
        if duplicate is not None:
            return AppendResult(duplicate[0], duplicate[1], -1, self.log_start_offset, False)
        self._maybe_roll(len(data), headers, now)
        first = self.end_offset
        records.assign_offsets(data, headers, first, leader_epoch,
                               now if self.config.log_append_time else None)
        self.epochs.assign(leader_epoch, first)
        self.active.append(data, headers)
        self.producers.update(headers)
        self._unflushed_messages += sum(h.records_count for h in headers)
        return AppendResult(first, headers[-1].last_offset,
                            now if self.config.log_append_time else -1,
                            self.log_start_offset, self._flush_due(now))

    def append_as_follower(self, data: bytearray) -> int:
        """Append batches that already carry offsets (replication); returns LEO.

        Raises:
            KafkaApiError: CORRUPT_MESSAGE or non-increasing offsets.
        """
        headers = records.validate_for_append(data, 2**31 - 1)
        if headers[0].base_offset < self.end_offset:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "offsets go backwards")
        self._maybe_roll(len(data), headers, self._clock(), headers[0].base_offset)
        for h in headers:
            self.epochs.assign(h.leader_epoch, h.base_offset)
        self.active.append(data, headers)
        self._unflushed_messages += sum(h.records_count for h in headers)
        return self.end_offset

    def _check_timestamps(self, headers: list[records.BatchHeader], now: int) -> None:
        lo = now - self.config.timestamp_before_max_ms
        hi = now + self.config.timestamp_after_max_ms
        for h in headers:
            if h.is_control:
                continue
            if h.max_timestamp > hi or (h.base_timestamp < lo and h.base_timestamp >= 0):
                raise KafkaApiError(ErrorCode.INVALID_TIMESTAMP,
                                    f"timestamp {h.max_timestamp} outside [{lo}, {hi}]")

    def _maybe_roll(self, size: int, headers: list[records.BatchHeader], now: int,
                    next_offset: int | None = None) -> None:
        seg = self.active
        if seg.is_empty:
            return
        first_offset = self.end_offset if next_offset is None else next_offset
        last_relative = first_offset + sum(h.last_offset_delta + 1 for h in headers) - seg.base_offset
        rolling_ts = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else -1
        age_ms = now - (rolling_ts if rolling_ts > 0 else seg.created_ms)
        if (seg.size + size > self.config.segment_bytes
                or age_ms > self.config.segment_ms
                or seg.index.is_full or seg.time_index.is_full
                or last_relative > _MAX_RELATIVE_OFFSET):
            self.roll(first_offset)

    def roll(self, next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``next_offset`` (default LEO)."""
        base = self.end_offset if next_offset is None else next_offset
        if self.active.is_empty and self.active.base_offset == base:
            return self.active
        seg = self._add_segment(base)
        self._rolled_since_flush = True
        log.debug("rolled segment", topic=self.topic, partition=self.partition, base_offset=base)
        return seg

    # -- flush --------------------------------------------------------------

    def _flush_due(self, now: int) -> bool:
        return (self._rolled_since_flush
                or self._unflushed_messages >= self.config.flush_messages
                or now - self._last_flush_ms >= self.config.flush_ms)

    async def flush(self) -> None:
        """fsync every segment written since the last flush, off the event loop."""
        end = self.end_offset
        if end <= self.recovery_point and not self._unflushed_messages:
            return
        dirty = [s for s in self.segments if s.last_offset >= self.recovery_point or s is self.active]
        self._unflushed_messages = 0
        self._rolled_since_flush = False
        self._last_flush_ms = self._clock()
        await trio.to_thread.run_sync(_fsync_segments, dirty)
        self.recovery_point = max(self.recovery_point, end)

    # -- read ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Read batches from ``offset``, never including offsets >= ``max_offset``.

        Returns:
            The bytes (possibly empty at the end of the log).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if ``offset`` is below the log
                start or above the log end.
        """
        end = self.end_offset
        if offset < self.log_start_offset or offset > end:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                f"offset {offset} not in [{self.log_start_offset}, {end}]")
        upper = end if max_offset is None else min(max_offset, end)
        if offset >= upper:
            return ReadResult(b"", offset)
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            limit = self._position_limit(seg, upper)
            got = seg.read(offset, max_bytes, limit, min_one_batch)
            if got is not None:
                return ReadResult(got[0], offset)
            if limit is not None and limit < seg.size:
                break
            i += 1
        return ReadResult(b"", offset)

    def _position_limit(self, seg: LogSegment, upper: int) -> int | None:
        if upper > seg.last_offset:
            return None
        return seg.position_of(upper)

    def iter_segments_from(self, offset: int) -> list[LogSegment]:
        return self.segments[self._segment_for(offset):]

    # -- timestamps -----------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            start = max(seg.time_index.lookup(timestamp), self.log_start_offset)
            for batch in seg.iter_batches(seg.index.lookup(start)[1]):
                if batch.last_offset < start:
                    continue
                data = seg.read_batch_bytes(batch)
                header = records.parse_header(data, 0)
                if header.max_timestamp < timestamp:
                    continue
                for rec in records.decode_records(data, header):
                    ts = header.max_timestamp if header.attributes & records.ATTR_LOG_APPEND_TIME \
                        else rec.timestamp
                    if ts >= timestamp and rec.offset >= self.log_start_offset:
                        return rec.offset, ts
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp."""
        best: LogSegment | None = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        found = self.offset_for_timestamp(best.max_timestamp)
        return found

    # -- retention, deletion, truncation ---------------------------------------

    def delete_records(self, offset: int, high_watermark: int) -> int:
        """Move the log start offset to ``offset`` (DeleteRecords).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if beyond the high watermark.
        """
        if offset < 0 or offset > high_watermark:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                f"{offset} beyond high watermark {high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)
            self._delete_segments_below_start()
        return self.log_start_offset

    def _delete_segments_below_start(self) -> int:
        removed = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._remove_first_segment()
            removed += 1
        return removed

    def _remove_first_segment(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.delete()

    def apply_retention(self, high_watermark: int) -> int:
        """Delete segments beyond retention.ms / retention.bytes; returns how many.

        Only segments wholly below the high watermark go. If the active
        segment itself has expired it is rolled first, as Kafka does.
        """
        if "delete" not in self.config.cleanup_policy:
            return 0
        now = self._clock()
        count = 0
        while self._first_segment_expired(now, high_watermark):
            if len(self.segments) == 1:
                self.roll()
            seg = self.segments[0]
            self.log_start_offset = max(self.log_start_offset, self.segments[1].base_offset)
            log.info("deleting segment by retention", topic=self.topic, partition=self.partition,
                     base_offset=seg.base_offset, size=seg.size)
            self._remove_first_segment()
            count += 1
        if count:
            self.epochs.truncate_from_start(self.log_start_offset)
        return count

    def _first_segment_expired(self, now: int, high_watermark: int) -> bool:
        seg = self.segments[0]
        if seg.is_empty or seg.last_offset >= high_watermark:
            return False
        cfg = self.config
        if cfg.retention_ms >= 0 and seg.max_timestamp >= 0 and now - seg.max_timestamp > cfg.retention_ms:
            return True
        return cfg.retention_bytes >= 0 and self.size - seg.size >= cfg.retention_bytes

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or above ``offset`` (follower divergence)."""
        if offset >= self.end_offset:
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete()
        self.active.truncate_to(offset)
        self.epochs.truncate_from_end(offset)
        self._rebuild_producer_state()
        self.recovery_point = min(self.recovery_point, offset)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete_files(self) -> None:
        for seg in self.segments:
            seg.delete()


def _fsync_segments(segments: list[LogSegment]) -> None:
    for seg in segments:
        seg.fsync()
