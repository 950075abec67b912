"""Expiring remote segments: retention, log start offset, orphans, stale copies.

One run, for one leader partition, decides which remote segments must go and
deletes them oldest first (DELETE_SEGMENT_STARTED -> RSM delete ->
DELETE_SEGMENT_FINISHED):

- stale attempts: COPY_SEGMENT_STARTED segments this broker is not copying
  now (a crash or failed cleanup left them), and DELETE_SEGMENT_STARTED ones
  whose delete never finished;
- orphans: finished segments whose leader epochs are not in this log's
  leader-epoch lineage (the deep-dive's unclean-election case);
- below the log start offset (DeleteRecords, or local retention of an
  untiered topic moved it);
- retention.ms: segments whose newest record is older than the retention;
- retention.bytes: oldest segments while remote size plus the local bytes not
  yet tiered exceed the retention.

After deletions by retention the log start offset moves past the last
deleted segment, so reads below it get OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import structlog

from storage.log.log import Log
from storage.remote.copier import delete_remote_segment
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.types import RemoteLogSegmentMetadata, RemoteLogSegmentState

log = structlog.get_logger(__name__)

_S = RemoteLogSegmentState


def in_lineage(md: RemoteLogSegmentMetadata, entries: list[tuple[int, int]],
               log_end_offset: int) -> bool:
    """Whether every epoch range of the segment lies within the log's epoch history.

    ``entries`` is the leader-epoch cache: (epoch, start offset), ascending.
    An epoch of the segment must exist in the cache, start no earlier than
    the cache says it starts (unless it is the cache's first, truncated
    entry), and end before the cache's next epoch begins.
    """
    starts = dict(entries)
    ends = {e: (entries[i + 1][1] - 1 if i + 1 < len(entries) else log_end_offset - 1)
            for i, (e, _) in enumerate(entries)}
    first_epoch = entries[0][0] if entries else None
    seg_epochs = sorted(md.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(seg_epochs):
        end = seg_epochs[i + 1][1] - 1 if i + 1 < len(seg_epochs) else md.end_offset
        if epoch not in starts:
            return False
        if start < starts[epoch] and epoch != first_epoch:
            return False
        if end > ends[epoch]:
            return False
    return True


def choose_expired(p: TieredPartition, segments: list[RemoteLogSegmentMetadata],
                   now_ms: int) -> tuple[list[RemoteLogSegmentMetadata], int]:
    """(segments to delete, new log start offset or -1) for one expiration run."""
    lg: Log = p.log
    cfg = lg.config
    doomed: dict[object, RemoteLogSegmentMetadata] = {}
    live: list[RemoteLogSegmentMetadata] = []
    entries = list(lg.epochs.entries)
    for md in segments:
        key = md.remote_log_segment_id
        if md.state == _S.COPY_SEGMENT_STARTED and key.id not in p.copying:
            doomed[key] = md
        elif md.state == _S.DELETE_SEGMENT_STARTED:
            doomed[key] = md
        elif md.state == _S.COPY_SEGMENT_FINISHED:
            if md.end_offset < lg.log_start_offset:
                doomed[key] = md
            elif entries and not in_lineage(md, entries, lg.end_offset):
                log.info("remote segment is an orphan", segment=str(key),
                         epochs=md.segment_leader_epochs)
                doomed[key] = md
            else:
                live.append(md)
    live.sort(key=lambda m: m.start_offset)
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
    return sorted(doomed.values(), key=lambda m: m.start_offset), new_start


async def expire_segments(p: TieredPartition, svc: RemoteServices) -> int:
    """Delete what ``choose_expired`` picks; returns how many were deleted.

    Raises:
        RemoteStorageError: a delete failed (the rest wait for the next run).
    """
    segments = list(svc.rlmm.list_remote_log_segments(p.tip))
    doomed, new_start = choose_expired(p, segments, svc.clock())
    if new_start > p.log.log_start_offset:
        # Move the start first: readers must not be sent to segments being deleted.
        p.log.advance_log_start_offset(new_start)
        log.info("log start offset moved by remote retention", topic=p.tip.topic,
                 partition=p.tip.partition, log_start_offset=p.log.log_start_offset)
    deleted = 0
    for md in doomed:
        if p.cancelled:
            break
        await delete_remote_segment(svc, md)
        deleted += 1
    return deleted
