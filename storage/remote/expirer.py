"""Expiring remote segments: retention, log start offset, orphans, stale copies.

One run, for one leader partition, decides which remote segments must go and
deletes them oldest first (DELETE_SEGMENT_STARTED -> RSM delete ->
DELETE_SEGMENT_FINISHED):

- stale attempts: COPY_SEGMENT_STARTED segments this broker is not copying
  now (a crash, a failed cleanup or a deposed leader left them), once they are
  older than STALE_COPY_GRACE_MS, and DELETE_SEGMENT_STARTED ones whose delete
  never finished;
- superseded copies: finished segments no read reaches any more, because a
  later copy of the same offsets in the same epochs replaced them in the
  metadata cache (``superseded``);
- orphans: finished segments outside this log's leader-epoch lineage
  (``in_lineage``), once no leader can need them: wholly below the log start,
  or with every epoch older than the cache's first (the deep-dive's
  unreferenced files; Kafka's leader-epoch-cache truncation rule). Until
  then they stay, untouched by retention: after an unclean election they
  may be the only copy of another replica's history, which a later leader
  serves (KIP-405, scenario 5);
- below the log start offset (DeleteRecords, or local retention of an
  untiered topic moved it);
- retention.ms: segments whose newest record is older than the retention;
- retention.bytes: oldest segments while remote size plus the local bytes not
  yet tiered exceed the retention.

The log start offset follows the remote tier: it moves past the segments
deleted by retention, and up to where the remaining data begins (the
earliest live remote segment, else the local log start). That is re-derived
on every run and when tiering resumes (``sync_log_start``), as Kafka's
RemoteLogManager does, because the log-start checkpoint is written only
periodically: after a crash the log reopens at an older start whose remote
segments are gone, and only the remote tier can tell where the log begins.
The start only ever moves forward.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import structlog

from storage.log.log import Log
from storage.remote.copier import delete_remote_segment
from storage.remote.lineage import EpochEntries, in_lineage
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)

# How long an unfinished copy that this broker is not making is left alone
# before it counts as a stale attempt: right after a leadership change the new
# leader's view of the metadata may lag the old leader's COPY_SEGMENT_FINISHED
# (a new metadata-partition leader's high watermark catches up only as its
# followers fetch, well within a few fetch rounds), and a finished segment must
# never be deleted as stale; a deposed leader's last copy ends within it too.
STALE_COPY_GRACE_MS = 10_000

_S = RemoteLogSegmentState

def _in_history(md: RemoteLogSegmentMetadata, entries: EpochEntries, log_start_offset: int,
                log_end_offset: int) -> bool:
    """``in_lineage``, except that what the cache cannot judge is kept: a log
    without epochs, and segments below the cache's first epoch when the cache
    does not reach back to the log start (a lost or corrupt
    leader-epoch-checkpoint rebuilt from local segments only)."""
    if not entries:
        return True
    if entries[0][1] > log_start_offset and md.end_offset < entries[0][1]:
        return True
    return in_lineage(md, entries, log_end_offset)


def _unreferenced(md: RemoteLogSegmentMetadata, entries: EpochEntries,
                  log_start_offset: int) -> bool:
    """Whether a segment outside the lineage can go: it lies wholly below the
    log start, or its newest epoch is older than the cache's first."""
    if md.end_offset < log_start_offset:
        return True
    return bool(entries) and max(md.segment_leader_epochs) < entries[0][0]


def _data_start(lg: Log, live: list[RemoteLogSegmentMetadata]) -> int:
    """Where the log's data begins: the earliest live remote segment, else the
    local log start (Kafka's findLogStartOffset)."""
    return min((md.start_offset for md in live), default=lg.local_log_start_offset)


def _live(lg: Log, segments: Iterable[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    """Finished segments of the log's lineage not wholly below its start, by start offset."""
    entries = list(lg.epochs.entries)
    return sorted((md for md in segments
                   if md.state == _S.COPY_SEGMENT_FINISHED
                   and md.end_offset >= lg.log_start_offset
                   and _in_history(md, entries, lg.log_start_offset, lg.end_offset)),
                  key=lambda m: m.start_offset)


def sync_log_start(p: TieredPartition, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
    """Move the log start up to where the remaining data begins (never back).

    Called when tiering resumes for the partition (its remote metadata just
    loaded), so that a log start left behind by a crash is repaired before
    it is served.
    """
    _advance(p, _data_start(p.log, _live(p.log, segments)), "log start offset moved up to the "
             "earliest remaining data")


def _epoch_ranges(md: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
    """(epoch, first offset, last offset) of each epoch holding records in ``md``."""
    starts = sorted(md.segment_leader_epochs.items(), key=lambda e: (e[1], e[0]))
    ends = [nxt[1] - 1 for nxt in starts[1:]] + [md.end_offset]
    return [(epoch, start, end) for (epoch, start), end in zip(starts, ends, strict=True)
            if start <= end]


def superseded(rlmm: Any, tip: TopicIdPartition,
               segments: Iterable[RemoteLogSegmentMetadata]) -> set[RemoteLogSegmentId]:
    """Finished segments whose every epoch range the metadata cache serves
    from one other segment: a later copy of the same offsets replaced them.

    A leader killed just after appending COPY_SEGMENT_FINISHED leaves it
    uncommitted until the ISR of the metadata partition drops it; the new
    leader, not seeing it yet, copies the segment again. Reads go to the
    newer copy (the cache's rule); the older one is only wasted space.
    """
    out = set()
    for md in segments:
        if md.state != _S.COPY_SEGMENT_FINISHED:
            continue
        ranges = _epoch_ranges(md)
        if ranges and all(
                (first := rlmm.remote_log_segment_metadata(tip, epoch, start)) is not None
                and first.remote_log_segment_id != md.remote_log_segment_id
                and (last := rlmm.remote_log_segment_metadata(tip, epoch, end)) is not None
                and last.remote_log_segment_id == first.remote_log_segment_id
                for epoch, start, end in ranges):
            out.add(md.remote_log_segment_id)
    return out


def choose_expired(p: TieredPartition, segments: list[RemoteLogSegmentMetadata],
                   now_ms: int, replaced: Collection[RemoteLogSegmentId] = ()
                   ) -> tuple[list[RemoteLogSegmentMetadata], int]:
    """(segments to delete, new log start offset) for one expiration run;
    ``replaced``: the ``superseded`` segments."""
    lg: Log = p.log
    cfg = lg.config
    doomed: dict[object, RemoteLogSegmentMetadata] = {}
    live = [md for md in _live(lg, segments) if md.remote_log_segment_id not in replaced]
    live_ids = {md.remote_log_segment_id for md in live}
    entries = list(lg.epochs.entries)
    for md in segments:
        key = md.remote_log_segment_id
        if (md.state == _S.COPY_SEGMENT_STARTED and key.id not in p.copying
                and now_ms - md.event_timestamp_ms > STALE_COPY_GRACE_MS):
            doomed[key] = md
        elif md.state == _S.DELETE_SEGMENT_STARTED or key in replaced:
            doomed[key] = md
        elif (md.state == _S.COPY_SEGMENT_FINISHED and key not in live_ids
              and _unreferenced(md, entries, lg.log_start_offset)):
            if md.end_offset >= lg.log_start_offset:
                log.info("remote segment is an orphan", segment=str(key),
                         epochs=md.segment_leader_epochs)
            doomed[key] = md
    new_start = -1
    retention_deleted = set()
    if cfg.retention_ms >= 0:
        for md in live:
            if now_ms - md.max_timestamp_ms > cfg.retention_ms:
                retention_deleted.add(md.remote_log_segment_id)
            else:
                break
    if cfg.retention_bytes >= 0:
        untiered = sum(s.size for s in lg.segments if s.last_offset > lg.highest_tiered_offset)
        total = untiered + sum(m.segment_size_in_bytes for m in live
                               if m.remote_log_segment_id not in retention_deleted)
        for md in live:
            if md.remote_log_segment_id in retention_deleted:
                continue
            if total - md.segment_size_in_bytes < cfg.retention_bytes:
                break
            total -= md.segment_size_in_bytes
            retention_deleted.add(md.remote_log_segment_id)
    for md in live:
        if md.remote_log_segment_id in retention_deleted:
            doomed[md.remote_log_segment_id] = md
            new_start = max(new_start, md.end_offset + 1)
    survivors = [md for md in live if md.remote_log_segment_id not in retention_deleted]
    new_start = max(new_start, _data_start(lg, survivors))
    return sorted(doomed.values(), key=lambda m: m.start_offset), new_start


def _advance(p: TieredPartition, offset: int, why: str) -> None:
    if offset > p.log.log_start_offset:
        p.log.advance_log_start_offset(offset)
        log.info(why, topic=p.tip.topic, partition=p.tip.partition,
                 log_start_offset=p.log.log_start_offset)


async def expire_segments(p: TieredPartition, svc: RemoteServices) -> int:
    """Delete what ``choose_expired`` picks; returns how many were deleted.

    Raises:
        RemoteStorageError: a delete failed (the rest wait for the next run).
    """
    segments = list(svc.rlmm.list_remote_log_segments(p.tip))
    doomed, new_start = choose_expired(p, segments, svc.clock(),
                                       superseded(svc.rlmm, p.tip, segments))
    # Move the start first: readers must not be sent to segments being deleted.
    _advance(p, new_start, "log start offset moved by remote expiration")
    deleted = 0
    for md in doomed:
        if p.cancelled:
            break
        await delete_remote_segment(svc, md)
        deleted += 1
    return deleted
