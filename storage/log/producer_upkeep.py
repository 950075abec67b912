"""Keeping one partition's producer state in step with its segments, and its
``<offset>.snapshot`` files in step with both.

Theory of operation. The producer state (``ProducerStateManager``: who
wrote what, which transactions are open) lives only in memory; what makes
it survive a restart is the snapshot files (``SnapshotFiles``), each the
state as it stood before the batches at its offset. This module owns the
pair and the rules that tie them to the local log:

- on open (and after a truncation) the newest usable snapshot is loaded and
  only the batches after it are replayed (``rebuild``); a snapshot that no
  longer matches the segments is deleted, a torn one skipped;
- every batch appended feeds the state (``update``), and an ABORT marker
  lands in the aborted-transaction index of the segment that holds it;
- a roll writes a snapshot at the new segment's base, which tiered storage
  ships with the segment just closed (``snapshot_for``); close writes one at
  the log end; old ones are pruned (``prune``), except those the remote tier
  has yet to copy.

It is apart from ``storage.log.log`` because none of this touches the log
start, the leader epochs or retention: the log tells it when the segments
changed, and for pruning how far the remote tier has copied, and nothing
more. It reads the segments through ``LocalLog`` and never imports the log
view.

Concurrency: event loop only, like the log that owns it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import structlog
import trio

from protocol import records
from protocol.control import EndTxnMarker, read_marker
from protocol.errors import KafkaApiError
from storage.log.local_log import LocalLog
from storage.log.producer_snapshot import CorruptSnapshot, SnapshotEntry, SnapshotFiles
from storage.log.producer_state import ProducerStateManager
from storage.log.segment import BatchPosition, LogSegment
from storage.log.txn_index import AbortedTxn

log = structlog.get_logger(__name__)

# Producer snapshots kept besides those tiered storage still has to copy:
# enough to fall back past a torn one and to reload after a short truncation
# without replaying the whole log.
_SNAPSHOTS_KEPT = 3


class ProducerUpkeep:
    """The producer state of the log over ``local`` and its snapshot files."""

    def __init__(self, local: LocalLog) -> None:
        self.local = local
        self.state = ProducerStateManager()
        self.snapshots = SnapshotFiles(local.directory)

    def rebuild(self, first_recovered: int | None = None) -> None:
        """Restore the latest usable snapshot, then replay the batches after it.

        Usable: at or below the log end, not below the first segment, and not
        above ``first_recovered``, the first segment recovery re-validated
        (the replay rebuilds those segments' aborted-transaction indexes).
        Snapshots beyond the log end or below its first segment describe data
        that is gone and are deleted; a corrupt one is deleted and the next
        older one tried.
        """
        end, first = self.local.end_offset, self.local.base_offset
        self.snapshots.delete_where(lambda o: o > end or o < first)
        ceiling = end if first_recovered is None else min(end, first_recovered)
        self.state.truncate()
        start = first
        for offset in reversed(self.snapshots.offsets()):
            if offset > ceiling:
                continue
            try:
                self.state.load_snapshot(self.snapshots.read(offset))
            except (CorruptSnapshot, OSError) as exc:
                log.warning("deleting unreadable producer snapshot", topic=self.local.topic,
                            partition=self.local.partition, offset=offset, error=str(exc))
                self.snapshots.delete(offset)
                continue
            start = offset
            break
        self._replay(start)

    def _replay(self, start: int) -> None:
        """Feed the producer state every batch header from ``start`` (a batch boundary)."""
        for seg, head, markers in _producer_batches(self.local.batches_from(start),
                                                    self.local.topic, self.local.partition):
            self.update(seg, [head], markers)

    def markers(self, data: bytes | bytearray, headers: list[records.BatchHeader]
                ) -> list[EndTxnMarker | None] | None:
        """The transaction marker of each control batch (None elsewhere; None if none)."""
        return _markers(data, headers, self.local.topic, self.local.partition)

    def update(self, seg: LogSegment, headers: list[records.BatchHeader],
               markers: list[EndTxnMarker | None] | None) -> None:
        """Update producer state; index aborts in ``seg`` (the segment holding the markers).

        Idempotent for replays: an abort already in the index is not added again.
        """
        for txn in self.state.update(headers, markers):
            if txn.aborted and txn.last_offset > seg.txn_index.last_offset:
                seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset,
                                                txn.last_offset, txn.last_stable_offset))

    def rolled(self, base: int, copy_floor: int | None) -> None:
        """A segment was rolled at ``base``: Kafka's roll-time snapshot, the
        producer state before ``base``. Tiered storage copies it with the
        segment just closed."""
        self.snapshots.write(base, self.state.snapshot_entries())
        self.prune(copy_floor)

    def prune(self, copy_floor: int | None) -> None:
        """Keep the newest few snapshots, and those tiered storage has yet to copy:
        above ``copy_floor``, the highest tiered offset + 1 (None: the log is not
        tiered). None below the first segment survives."""
        first = self.local.base_offset
        newest = set(self.snapshots.offsets()[-_SNAPSHOTS_KEPT:])
        self.snapshots.delete_where(
            lambda o: o < first or (o not in newest and (copy_floor is None or o <= copy_floor)))

    def snapshot_for(self, seg: LogSegment) -> str | None:
        """The snapshot taken when ``seg`` was rolled (at the next segment's base), if kept."""
        segments = self.local.segments
        i = next((n for n, s in enumerate(segments) if s is seg), len(segments))
        if i + 1 >= len(segments):
            return None
        return self.snapshots.existing(segments[i + 1].base_offset)

    def replay_for(self, seg: LogSegment) -> SnapshotReplay | None:
        """For a closed ``seg`` whose roll-time snapshot is gone (pruned before
        tiering was turned on for the topic, or lost in a crash): how to make
        it again, from the newest readable older snapshot (or the first
        segment) and the batches after it. None if it exists, or ``seg`` is
        the active segment."""
        segments = self.local.segments
        i = next((n for n, s in enumerate(segments) if s is seg), len(segments))
        if i + 1 >= len(segments):
            return None
        offset = segments[i + 1].base_offset
        if self.snapshots.existing(offset) is not None:
            return None
        start, entries = self.local.base_offset, []
        for older in reversed(self.snapshots.offsets()):
            if older > offset or older < start:
                continue
            try:
                entries = self.snapshots.read(older)
            except (CorruptSnapshot, OSError):
                continue
            start = older
            break
        covering = [s for n, s in enumerate(segments[:i + 1])
                    if segments[n + 1].base_offset > start]
        return SnapshotReplay(self.local.topic, self.local.partition, offset, start, entries,
                              covering)

    async def snapshot_ready(self, seg: LogSegment) -> str | None:
        """``snapshot_for``, made again if it is gone (a tiered segment must
        carry one: a follower rebuilt from the tier starts from it). The
        batches are replayed in a worker thread. None for the active segment,
        or if the segment went while it was being replayed."""
        path = self.snapshot_for(seg)
        if path is not None:
            return path
        plan = self.replay_for(seg)
        if plan is None:
            return None
        try:
            entries = await trio.to_thread.run_sync(plan.run)
        except OSError as exc:
            log.warning("producer snapshot could not be made again", topic=plan.topic,
                        partition=plan.partition, offset=plan.offset, error=str(exc))
            return None
        log.info("producer snapshot made again for a closed segment", topic=plan.topic,
                 partition=plan.partition, offset=plan.offset, replayed_from=plan.start)
        return self.save(plan.offset, entries)

    def save(self, offset: int, entries: list[SnapshotEntry]) -> str:
        """Write the snapshot at ``offset``; returns its path."""
        self.snapshots.write(offset, entries)
        return self.snapshots.path(offset)

    def reset(self, next_offset: int, entries: list[SnapshotEntry]) -> None:
        """The log restarts at ``next_offset`` with the producer state ``entries``
        (of data only the remote tier holds): it becomes the only snapshot."""
        self.snapshots.delete_where(lambda _: True)
        self.snapshots.write(next_offset, entries)
        self.state.load_snapshot(entries)

    def close(self) -> None:
        """Like Kafka, snapshot the producer state at the log end before closing
        (unless the log is empty or that snapshot exists)."""
        end = self.local.end_offset
        if (end > self.local.base_offset and os.path.isdir(self.local.directory)
                and self.snapshots.existing(end) is None):
            self.snapshots.write(end, self.state.snapshot_entries())


@dataclass(frozen=True, slots=True)
class SnapshotReplay:
    """The producer state at ``offset`` (a closed segment's end), to be made
    from the state at ``start`` and the batches of ``segments`` in between.

    Concurrency: ``run`` only reads closed segments, so it may run in a worker
    thread while the log takes appends; a segment deleted under it (retention)
    makes it raise OSError.
    """

    topic: str
    partition: int
    offset: int
    start: int
    entries: list[SnapshotEntry]
    segments: list[LogSegment]

    def run(self) -> list[SnapshotEntry]:
        state = ProducerStateManager()
        state.load_snapshot(self.entries)
        for _, head, markers in _producer_batches(self._batches(), self.topic, self.partition):
            state.update([head], markers)
        return state.snapshot_entries()

    def _batches(self) -> Iterator[tuple[LogSegment, BatchPosition]]:
        """The batches of ``segments`` from ``start`` up to ``offset``."""
        for seg in self.segments:
            position = seg.index.lookup(self.start)[1] if seg.base_offset <= self.start else 0
            for batch in seg.iter_batches(position):
                if batch.base_offset >= self.offset:
                    return
                if batch.base_offset >= self.start:
                    yield seg, batch


def _producer_batches(batches: Iterable[tuple[LogSegment, BatchPosition]], topic: str,
                      partition: int
                      ) -> Iterator[tuple[LogSegment, records.BatchHeader,
                                          list[EndTxnMarker | None] | None]]:
    """The batches of producers (with their transaction markers, for control
    batches): what rebuilding producer state reads."""
    for seg, batch in batches:
        head = seg.read_batch_bytes_header(batch)
        if head.producer_id < 0:
            continue
        markers = None
        if head.is_control:
            data = seg.read_batch_bytes(batch)
            markers = _markers(data, [records.parse_header(data, 0)], topic, partition)
        yield seg, head, markers


def _markers(data: bytes | bytearray, headers: list[records.BatchHeader], topic: str,
             partition: int) -> list[EndTxnMarker | None] | None:
    """The transaction marker of each control batch (None elsewhere; None if none)."""
    if not any(h.is_control for h in headers):
        return None
    out: list[EndTxnMarker | None] = []
    for h in headers:
        marker = None
        if h.is_control:
            try:
                marker = read_marker(data, h)
            except KafkaApiError as exc:
                log.warning("unreadable control batch", topic=topic, partition=partition,
                            offset=h.base_offset, error=exc.message)
        out.append(marker)
    return out
