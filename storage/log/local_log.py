"""The local part of one partition's log: its segments on this broker's disk.

Theory of operation: a ``LocalLog`` is an ordered run of ``LogSegment``s
whose last one, the active segment, takes every append; the others are
immutable. Offsets arrive here already assigned and validated: this module
knows nothing of producers, leader epochs, the remote tier or the log start
offset (``storage.log.log`` keeps those, as Kafka's UnifiedLog does over its
LocalLog). What it owns:

- loading the segments of a directory, re-validating those the last
  shutdown may have torn (``load``), and the recovery point (below it every
  segment is on disk, fsynced);
- appending to the active segment, and rolling to a new one when the
  segment is full or old (``roll_due``, ``roll``); a roll seals the previous
  active segment (its largest timestamp goes to its time index);
- reading whole batches from the segments within an upper offset bound;
- offset and time lookups through the segment indexes, and the aborted
  transactions their transaction indexes hold;
- removing segments at the front (retention), at the back (truncation), all
  of them, or swapping in a cleaned copy (the cleaner);
- the flush policy (flush.messages / flush.ms, a roll) and the flush itself.

Concurrency: every method runs on the event loop except ``flush``'s worker
thread part (``_fsync_segments``), which only fsyncs descriptors.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator

import structlog
import trio

from config.topic import LogConfig
from protocol import records
from storage.log import swap
from storage.log.file_deleter import Discard
from storage.log.file_slice import FileSlice
from storage.log.segment import BatchPosition, LogSegment
from storage.log.txn_index import AbortedTxn

log = structlog.get_logger(__name__)

# Offsets within a segment are stored as int32 relative offsets, so a
# segment cannot span more than this many offsets (Kafka's limit too).
_MAX_RELATIVE_OFFSET = 2**31 - 1


class StaleSegments(Exception):
    """Segments a cleaner pass named are no longer the log's."""


class LocalLog:
    """One partition's segments on local disk. Build with ``LocalLog(...)``
    then ``load``; the log view (``storage.log.log.Log``) does both."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 clock: Callable[[], int], discard: Discard | None = None) -> None:
        self.directory = directory
        # Where a deleted segment's files go (None: unlinked at once).
        self.discard = discard
        self.topic = topic
        self.partition = partition
        self.config = config
        self._clock = clock
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.recovery_point = 0
        self._unflushed_messages = 0
        self.last_flush_ms = clock()
        # A roll makes the previous segment immutable; like Kafka we fsync it
        # soon after, so the recovery point keeps up without a flush policy.
        self._rolled_since_flush = False
        # The lowest offset truncation removed data from since the cleaner last
        # looked (None: none): its first-dirty checkpoint must not stay above it.
        self.truncated_below: int | None = None

    # -- loading ------------------------------------------------------------

    def load(self, recovery_point: int, clean_shutdown: bool) -> list[LogSegment]:
        """Open every segment; recover those the last shutdown may have torn.

        Segments wholly below the recovery point (or all, after a clean
        shutdown) are trusted if their indexes load; others are re-validated
        batch by batch. Once a segment loses its tail, every later segment is
        dropped: its offsets can no longer follow on.

        Returns:
            The re-validated segments, in offset order (their leader epochs,
            producer state and aborted-transaction indexes are the caller's
            to rebuild).
        """
        swap.recover(self.directory)
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(self.directory, name))
        bases = sorted(int(name[:-4]) for name in os.listdir(self.directory)
                       if name.endswith(".log") and name[:-4].isdigit())
        now = self._clock()
        truncated = False
        recovered: list[LogSegment] = []
        for base in bases:
            seg = LogSegment(self.directory, base, self.config.segment_index_bytes,
                             self.config.index_interval_bytes, now)
            if truncated or (self.segments and base <= self.segments[-1].last_offset):
                log.warning("dropping segment after a truncated one", segment=seg.log_path)
                seg.delete(self.discard)
                continue
            if seg.load_indexes() and (clean_shutdown or seg.last_offset < recovery_point):
                self._append_segment(seg)
                continue
            truncated = seg.recover(self.config.max_message_bytes) > 0
            self._append_segment(seg)
            recovered.append(seg)
        return recovered

    def _append_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    def add_segment(self, base_offset: int) -> LogSegment:
        """A new, empty active segment at ``base_offset``; the previous one is sealed."""
        if self.segments:
            self.segments[-1].seal()
        seg = LogSegment(self.directory, base_offset, self.config.segment_index_bytes,
                         self.config.index_interval_bytes, self._clock())
        self._append_segment(seg)
        return seg

    # -- state --------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def base_offset(self) -> int:
        """Base offset of the first segment: no offset below it is on local disk."""
        return self.segments[0].base_offset

    @property
    def end_offset(self) -> int:
        active = self.active
        if active.last_offset >= active.base_offset:
            return active.last_offset + 1
        return active.base_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def segments_from(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (the first if below) and every later one."""
        return self.segments[self._segment_for(offset):]

    def batches_from(self, start: int) -> Iterator[tuple[LogSegment, BatchPosition]]:
        """Every batch with a base offset >= ``start`` (a batch boundary), with
        its segment, found through the offset index."""
        for seg in self.segments_from(start):
            position = seg.index.lookup(start)[1] if seg.base_offset <= start else 0
            for batch in seg.iter_batches(position):
                if batch.base_offset >= start:
                    yield seg, batch

    def _segment_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # -- append and roll ----------------------------------------------------

    def append(self, data: bytes | bytearray, headers: list[records.BatchHeader]) -> LogSegment:
        """Append batches whose offsets are assigned; returns the segment written."""
        seg = self.active
        seg.append(data, headers)
        self._unflushed_messages += sum(h.records_count for h in headers)
        return seg

    def roll_due(self, size: int, headers: list[records.BatchHeader], now: int,
                 first_offset: int) -> bool:
        """Whether ``size`` bytes of ``headers`` starting at ``first_offset`` need
        a new segment: the active one would pass segment.bytes, is older than
        segment.ms, has a full index, or could not hold the relative offsets."""
        seg = self.active
        if seg.is_empty:
            return False
        last_relative = first_offset + sum(h.last_offset_delta + 1 for h in headers) - seg.base_offset
        rolling_ts = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else -1
        age_ms = now - (rolling_ts if rolling_ts > 0 else seg.created_ms)
        roll_ms = self.config.segment_ms
        if self.config.compact:
            # KIP-354: a record may wait at most max.compaction.lag.ms to be
            # cleanable, and the active segment never is.
            roll_ms = min(roll_ms, self.config.max_compaction_lag_ms)
        return (seg.size + size > self.config.segment_bytes
                or age_ms > roll_ms
                or seg.index.is_full or seg.time_index.is_full
                or last_relative > _MAX_RELATIVE_OFFSET)

    def roll(self, base: int) -> LogSegment | None:
        """Start a new active segment at ``base``; None if the active segment
        is empty and already starts there (nothing to roll)."""
        if self.active.is_empty and self.active.base_offset == base:
            return None
        seg = self.add_segment(base)
        self._rolled_since_flush = True
        log.debug("rolled segment", topic=self.topic, partition=self.partition, base_offset=base)
        return seg

    def collect_aborted(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper), from the segments'
        transaction indexes.

        Searches the segment holding ``start`` and later ones (an abort is
        indexed where its marker lies), stopping once an entry's LSO shows
        nothing later can start before ``upper``.
        """
        out: list[AbortedTxn] = []
        for seg in self.segments_from(start):
            found, complete = seg.txn_index.collect(start, upper)
            out += found
            if complete:
                break
        return out

    # -- flush --------------------------------------------------------------

    def flush_due(self, now: int) -> bool:
        """Whether the flush policy (flush.messages / flush.ms, a roll) wants an fsync now."""
        return (self._rolled_since_flush
                or self._unflushed_messages >= self.config.flush_messages
                or now - self.last_flush_ms >= self.config.flush_ms)

    async def flush(self) -> None:
        """fsync every segment written since the last flush, off the event loop."""
        end = self.end_offset
        if end <= self.recovery_point and not self._unflushed_messages:
            return
        dirty = [s for s in self.segments if s.last_offset >= self.recovery_point or s is self.active]
        self._unflushed_messages = 0
        self._rolled_since_flush = False
        self.last_flush_ms = self._clock()
        await trio.to_thread.run_sync(_fsync_segments, dirty)
        self.recovery_point = max(self.recovery_point, end)

    # -- read ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper: int, min_one_batch: bool,
             zero_copy: bool) -> bytes | FileSlice:
        """Whole batches from the one holding ``offset``, none holding only
        offsets >= ``upper``; the caller has checked ``offset`` is in the log.

        Returns:
            The bytes, or with ``zero_copy`` possibly a ``FileSlice`` of the
            segment; empty at the end, or when the batch holding ``offset``
            exceeds ``max_bytes`` and ``min_one_batch`` is off.
        """
        if offset >= upper:
            return b""
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            limit = _position_limit(seg, upper)
            got = seg.read(offset, max_bytes, limit, min_one_batch, zero_copy)
            if got is not None:
                # Possibly empty: the batch holding ``offset`` is over budget,
                # and later batches must not be returned in its place.
                return got[0]
            if limit is not None and limit < seg.size:
                break
            i += 1
        return b""

    # -- timestamps -----------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int, start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start`` with
        timestamp >= ``timestamp``, found through the time and offset indexes."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            first = max(seg.time_index.lookup(timestamp), start)
            for batch in seg.iter_batches(seg.index.lookup(first)[1]):
                if batch.last_offset < first:
                    continue
                data = seg.read_batch_bytes(batch)
                header = records.parse_header(data, 0)
                if header.max_timestamp < timestamp:
                    continue
                for rec in records.decode_records(data, header):
                    ts = header.max_timestamp if header.attributes & records.ATTR_LOG_APPEND_TIME \
                        else rec.timestamp
                    if ts >= timestamp and rec.offset >= start:
                        return rec.offset, ts
        return None

    def max_timestamp_offset(self, start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start`` holding
        the largest timestamp of the segments."""
        best: LogSegment | None = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        return self.offset_for_timestamp(best.max_timestamp, start)

    # -- removing segments --------------------------------------------------

    def remove_first_segment(self) -> LogSegment:
        """Delete the first segment (retention, a moved log start); returns it, closed."""
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.delete(self.discard)
        return seg

    def truncate_to(self, offset: int) -> None:
        """Remove every batch with a base offset >= ``offset`` (at or above the
        first segment's base), dropping the segments that start there."""
        self._note_truncation(offset)
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete(self.discard)
        self.active.truncate_to(offset)
        self.recovery_point = min(self.recovery_point, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; restart with an empty one at ``offset``."""
        self._note_truncation(min(offset, self.segments[0].base_offset if self.segments else offset))
        for seg in self.segments:
            seg.delete(self.discard)
        self.segments = []
        self._bases = []
        self.add_segment(offset)
        self.recovery_point = offset

    def _note_truncation(self, offset: int) -> None:
        if self.truncated_below is None or offset < self.truncated_below:
            self.truncated_below = offset

    def replace_segments(self, old: list[LogSegment], base: int) -> list[str]:
        """Swap the cleaned copy of ``old`` (consecutive segments, not the active
        one) in for them (``storage.log.swap``); its files are
        ``<base>.*.cleaned``, ``base`` being ``old[0]``'s base offset.

        Returns:
            The retired files, to delete off the event loop.

        Raises:
            StaleSegments: ``old`` are no longer this log's segments as they
                were (retention, truncation or deletion ran meanwhile); the
                cleaned files are left for the caller to remove.
        """
        i = next((n for n, s in enumerate(self.segments) if s is old[0]), None)
        if (i is None or self.segments[i:i + len(old)] != old or old[-1] is self.active
                or base != old[0].base_offset or any(s.fd < 0 for s in old)):
            raise StaleSegments(f"segments from {base} changed while being cleaned")
        swap.commit(self.directory, base)
        retired: list[str] = []
        for seg in old:
            seg.close()
            retired += swap.retire(self.directory, seg.base_offset)
        swap.finish(self.directory, base)
        new = LogSegment(self.directory, base, self.config.segment_index_bytes,
                         self.config.index_interval_bytes, old[0].created_ms)
        if not new.load_indexes():
            new.recover(self.config.max_message_bytes)
        self.segments[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [base]
        return retired

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete_files(self) -> None:
        for seg in self.segments:
            seg.delete(self.discard)


def _position_limit(seg: LogSegment, upper: int) -> int | None:
    """File position in ``seg`` of the batch holding ``upper``; None if beyond the segment."""
    if upper > seg.last_offset:
        return None
    return seg.position_of(upper)


def _fsync_segments(segments: list[LogSegment]) -> None:
    for seg in segments:
        seg.fsync()
