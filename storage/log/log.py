"""The log of one partition as the broker sees it: the local segments
(``storage.log.local_log``) plus the tier boundary, retention, producer state
and leader epochs, as Kafka's UnifiedLog over its LocalLog.

Theory of operation. Offsets: ``log_start_offset`` is the first readable
offset, local or remote (moved by retention and DeleteRecords);
``local_log_start_offset`` the first offset still on local disk (they differ
only for tiered topics, whose old segments live in the remote tier);
``end_offset`` (LEO) the next offset to assign. ``highest_tiered_offset`` is
the last offset copied to the remote tier (-1 if none); local retention
deletes only segments at or below it. The replica manager owns the high
watermark and passes it to ``read`` as the upper bound of what consumers
may see. A read below the local log start but not below the log start is
answered OFFSET_MOVED_TO_TIERED_STORAGE: the remote tier serves it.

Producer state (idempotence, transactions) and its ``<offset>.snapshot``
files are kept by ``storage.log.producer_upkeep`` (``producer_upkeep``).
``first_unstable_offset`` is where the oldest open transaction starts (the
last stable offset cannot pass it).

This class validates (with ``storage.log.validator``'s topic checks) and
assigns offsets, then hands the bytes to the local log; every change of the
segments (append, roll, truncation, deletion) goes through ``self.local``,
and this class keeps the epochs in step with it and tells the producer
upkeep. ``storage.log.local_log`` never imports this one.

Opening (recovery, epochs, log start, producer state: as Kafka's
LogLoader) is ``storage.log.loader``'s; retention (which applies, and
deleting expired segments from the front) is ``storage.log.retention``'s,
through the ``RetainedLog`` interface.

Concurrency: every method runs on the event loop; ``flush`` fsyncs in a
worker thread (``LocalLog.flush``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from config.topic import LogConfig
from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log import loader, retention, validator
from storage.log.epoch_cache import LeaderEpochCache
from storage.log.file_deleter import Discard
from storage.log.file_slice import FileSlice
from storage.log.local_log import LocalLog
from storage.log.producer_snapshot import SnapshotEntry, SnapshotFiles
from storage.log.producer_state import AppendOrigin, ProducerStateManager
from storage.log.producer_upkeep import ProducerUpkeep
from storage.log.segment import LogSegment
from storage.log.txn_index import AbortedTxn

log = structlog.get_logger(__name__)


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
    """One partition's log. Build with ``Log.open``."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 clock: Callable[[], int], discard: Discard | None = None) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._clock = clock
        self.local = LocalLog(directory, topic, partition, config, clock, discard)
        self._log_start_offset = 0
        # Called when the log start offset moves (set by the replica manager:
        # fetch sessions answer a partition whose log start changed).
        self.start_listener: Callable[[], None] | None = None
        self.highest_tiered_offset = -1
        self.epochs = LeaderEpochCache(directory)
        self.producer_upkeep = ProducerUpkeep(self.local)

    @property
    def log_start_offset(self) -> int:
        """The first offset of the log, local or remote."""
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            if self.start_listener is not None:
                self.start_listener()

    # -- construction -------------------------------------------------------

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig,
             clock: Callable[[], int], *, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False, discard: Discard | None = None) -> Log:
        """Open (or create) the log in ``directory``, recovering if needed
        (``storage.log.loader``). ``discard``: where deleted segments' files go
        to be unlinked off the event loop (``storage.log.file_deleter``; None:
        unlinked at once)."""
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, topic, partition, config, clock, discard)
        self.log_start_offset = loader.load(
            self.local, self.epochs, self.producer_upkeep, recovery_point=recovery_point,
            log_start_offset=log_start_offset, clean_shutdown=clean_shutdown)
        return self

    # -- state --------------------------------------------------------------

    @property
    def producers(self) -> ProducerStateManager:
        """The producer state (idempotence, transactions): ``ProducerUpkeep``'s."""
        return self.producer_upkeep.state

    @property
    def snapshots(self) -> SnapshotFiles:
        """The producer-state snapshot files: ``ProducerUpkeep``'s."""
        return self.producer_upkeep.snapshots

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self.local.config = config

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments

    @property
    def active(self) -> LogSegment:
        return self.local.active

    @property
    def end_offset(self) -> int:
        return self.local.end_offset

    @property
    def local_log_start_offset(self) -> int:
        return max(self.log_start_offset, self.local.base_offset)

    @property
    def size(self) -> int:
        return self.local.size

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self.local.last_flush_ms

    @property
    def truncated_below(self) -> int | None:
        """The lowest offset truncation removed data from since the cleaner
        last looked (None: none); the cleaner resets it."""
        return self.local.truncated_below

    @truncated_below.setter
    def truncated_below(self, offset: int | None) -> None:
        self.local.truncated_below = offset

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction; None if none is open."""
        return self.producers.first_undecided_offset()

    # -- append -------------------------------------------------------------

    def append_as_leader(self, data: bytearray, leader_epoch: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Validate, assign offsets and append a produced record set.

        ``origin`` COORDINATOR is for transaction markers and transactional
        offset commits (no sequence checks; control batches allowed).

        Raises:
            KafkaApiError: the record set is invalid (see
                ``records.validate_for_append``), fails the topic's checks
                (``validator.check_produced``: timestamps, keys of a
                compacted topic), or fails the producer checks (see
                ``ProducerStateManager.check``).
        """
        headers = records.validate_for_append(data, self.config.max_message_bytes)
        now = self._clock()
        validator.check_produced(data, headers, self.config, now, origin,
                                 f"{self.topic}-{self.partition}")
        markers = (self.producer_upkeep.markers(data, headers)
                   if origin is not AppendOrigin.CLIENT else None)
        duplicate = self.producers.check(headers, markers, origin)
        if duplicate is not None:
            return AppendResult(duplicate[0], duplicate[1], -1, self.log_start_offset, False)
        self._maybe_roll(len(data), headers, now, self.end_offset)
        first = self.end_offset
        records.assign_offsets(data, headers, first, leader_epoch,
                               now if self.config.log_append_time else None)
        self.epochs.assign(leader_epoch, first)
        seg = self.local.append(data, headers)
        self.producer_upkeep.update(seg, headers, markers)
        return AppendResult(first, headers[-1].last_offset,
                            now if self.config.log_append_time else -1,
                            self.log_start_offset, self.local.flush_due(now))

    def append_as_follower(self, data: bytearray) -> int:
        """Append batches that already carry offsets (replication); returns LEO.

        Raises:
            KafkaApiError: CORRUPT_MESSAGE or non-increasing offsets.
        """
        headers = records.validate_for_append(data, 2**31 - 1, produced=False)
        if headers[0].base_offset < self.end_offset:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "offsets go backwards")
        self._maybe_roll(len(data), headers, self._clock(), headers[0].base_offset)
        for h in headers:
            self.epochs.assign(h.leader_epoch, h.base_offset)
        seg = self.local.append(data, headers)
        self.producer_upkeep.update(seg, headers, self.producer_upkeep.markers(data, headers))
        return self.end_offset

    def _maybe_roll(self, size: int, headers: list[records.BatchHeader], now: int,
                    first_offset: int) -> None:
        if self.local.roll_due(size, headers, now, first_offset):
            self.roll(first_offset)

    def roll(self, next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``next_offset`` (default LEO)."""
        base = self.end_offset if next_offset is None else next_offset
        seg = self.local.roll(base)
        if seg is None:
            return self.active
        self.producer_upkeep.rolled(base, self._snapshot_copy_floor())
        return seg

    def _snapshot_copy_floor(self) -> int | None:
        """Producer snapshots above this offset tiered storage has yet to copy
        (None: the log is not tiered)."""
        return self.highest_tiered_offset + 1 if self.config.remote_storage_enable else None

    def producer_snapshot_for(self, seg: LogSegment) -> str | None:
        """The snapshot taken when ``seg`` was rolled (at the next segment's base), if kept."""
        return self.producer_upkeep.snapshot_for(seg)

    async def producer_snapshot_ready(self, seg: LogSegment) -> str | None:
        """``producer_snapshot_for``, made again if it is gone
        (``ProducerUpkeep.snapshot_ready``)."""
        return await self.producer_upkeep.snapshot_ready(seg)

    def collect_aborted(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper), for a read_committed
        fetch: ``LocalLog.collect_aborted``."""
        return self.local.collect_aborted(start, upper)

    # -- flush --------------------------------------------------------------

    def flush_due(self) -> bool:
        """Whether the flush policy (flush.messages / flush.ms, a roll) wants an fsync now."""
        return self.local.flush_due(self._clock())

    async def flush(self) -> None:
        """fsync every segment written since the last flush, off the event loop."""
        await self.local.flush()

    # -- read ---------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Read batches from ``offset``, never including offsets >= ``max_offset``.

        Returns:
            The bytes (possibly empty at the end of the log).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if ``offset`` is below the log
                start or above the log end; OFFSET_MOVED_TO_TIERED_STORAGE if
                below the local log start only.
        """
        data = self.read_for_send(offset, max_bytes, max_offset, min_one_batch, zero_copy=False)
        assert isinstance(data, bytes)
        return ReadResult(data, offset)

    def read_for_send(self, offset: int, max_bytes: int, max_offset: int | None,
                      min_one_batch: bool, zero_copy: bool) -> bytes | FileSlice:
        """``read``'s batches; with ``zero_copy`` a non-empty answer is a
        ``FileSlice`` of the segment, for the connection to sendfile.

        Raises:
            KafkaApiError: as ``read``.
        """
        end = self.end_offset
        local_start = self.local_log_start_offset
        if offset < local_start and offset >= self.log_start_offset:
            raise KafkaApiError(ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE,
                                f"offset {offset} is below the local log start {local_start}")
        if offset < self.log_start_offset or offset > end:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                f"offset {offset} not in [{self.log_start_offset}, {end}]")
        upper = end if max_offset is None else min(max_offset, end)
        return self.local.read(offset, max_bytes, upper, min_one_batch, zero_copy)

    def replace_segments(self, old: list[LogSegment], base: int) -> list[str]:
        """The cleaner's swap of cleaned segments: ``LocalLog.replace_segments``."""
        return self.local.replace_segments(old, base)

    # -- timestamps -----------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first local record with timestamp >= ``timestamp``."""
        return self.local.offset_for_timestamp(timestamp, self.local_log_start_offset)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first local record holding the largest timestamp."""
        return self.local.max_timestamp_offset(self.local_log_start_offset)

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

    def _delete_segments_below_start(self) -> None:
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self.remove_first_segment()

    def remove_first_segment(self) -> None:
        """Delete the first local segment, then prune the producer snapshots."""
        self.local.remove_first_segment()
        self.producer_upkeep.prune(self._snapshot_copy_floor())

    def apply_retention(self, high_watermark: int, limit: int | None = None) -> int:
        """Delete local segments beyond retention (``storage.log.retention``),
        at most ``limit`` of them if given; returns how many went."""
        return retention.apply_retention(self, self._clock, high_watermark, limit)

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the global log start forward (remote expiration); never back."""
        if offset > self.log_start_offset:
            self.log_start_offset = min(offset, self.end_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
            self._delete_segments_below_start()

    def lower_log_start_offset(self, offset: int) -> bool:
        """Move a tiered log's start back to ``offset`` (never above the local
        log start): only when lost remote metadata is rebuilt and the log start
        had moved past data the remote tier still holds. True if it moved."""
        offset = min(offset, self.local_log_start_offset)
        if not self.config.remote_storage_enable or offset < 0 or offset >= self.log_start_offset:
            return False
        self.log_start_offset = offset
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or above ``offset`` (follower divergence)."""
        if offset >= self.end_offset:
            # No record to remove, but an epoch may start at the log end with
            # none written in it (this broker led it, then lost the lead before
            # an append): as Kafka does, drop it, or the leader would find that
            # epoch missing from its log and answer the same divergence forever.
            self.epochs.truncate_from_end(self.end_offset)
            return
        if offset < self.local.base_offset:
            # Below the local log (a tiered log keeps only its tail): nothing
            # local survives. As Kafka's truncateTo, restart the log empty at
            # ``offset``, keeping the log start (the rest is in the remote
            # tier); the follower then refetches or rebuilds from the tier.
            # Cutting only the first segment would leave the log end at its
            # base, above ``offset``: the leader would answer the same
            # divergence again and again.
            start = self.log_start_offset
            self._truncate_fully_and_start_at(offset)
            self.log_start_offset = min(start, offset)
            return
        self.local.truncate_to(offset)
        self.epochs.truncate_from_end(offset)
        self.producer_upkeep.rebuild()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower behind the leader's start)."""
        self._truncate_fully_and_start_at(offset)
        self.log_start_offset = offset

    def reset_from_remote(self, log_start: int, next_offset: int,
                          epochs: list[tuple[int, int]],
                          producers: list[SnapshotEntry]) -> None:
        """A follower rebuilt from the remote tier (BuildingRemoteLogAuxState):
        empty the local log and restart it at ``next_offset``, with the leader
        epochs and producer state of the data below it, which lives only in
        the remote tier; the log starts at ``log_start`` (the leader's)."""
        self._truncate_fully_and_start_at(next_offset)
        self.log_start_offset = min(log_start, next_offset)
        self.epochs.replace([(e, o) for e, o in epochs if o < next_offset])
        self.epochs.truncate_from_start(self.log_start_offset)
        self.producer_upkeep.reset(next_offset, producers)
        self.highest_tiered_offset = next_offset - 1

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        loader.start_afresh(self.local, self.epochs, self.producer_upkeep, offset)

    def close(self) -> None:
        """Close the files, snapshotting the producer state at the log end first
        (``ProducerUpkeep.close``)."""
        self.producer_upkeep.close()
        self.local.close()

    def delete_files(self) -> None:
        self.local.delete_files()
