"""Copying closed local segments to the remote tier.

For each closed segment above the highest tiered offset and wholly below the
last stable offset, earliest first:

    COPY_SEGMENT_STARTED (metadata) -> RSM copy (worker thread) -> COPY_SEGMENT_FINISHED

A failed copy removes what the storage manager wrote, records the attempt as
deleted (DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED) and raises, so
the caller backs off and retries later with a fresh segment id; the local
segment stays, since local retention only removes tiered segments.
"""

from __future__ import annotations

import time

import structlog
import trio

from storage.log import checkpoint
from storage.log.segment import LogSegment
from storage.remote.metadata_cache import RemoteLogSegmentMetadataUpdate
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.types import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
)

log = structlog.get_logger(__name__)


def copy_candidates(p: TieredPartition) -> list[LogSegment]:
    """Closed segments still to copy, earliest first."""
    lg = p.log
    lso = p.last_stable_offset()
    out = []
    for seg in lg.segments[:-1]:
        if seg.is_empty or seg.last_offset <= lg.highest_tiered_offset:
            continue
        if seg.last_offset >= lso:
            break
        out.append(seg)
    return out


def segment_epochs(entries: list[tuple[int, int]], start: int, end: int) -> dict[int, int]:
    """Leader epochs of offsets ``start..end``: epoch -> first offset within the range."""
    out: dict[int, int] = {}
    for i, (epoch, epoch_start) in enumerate(entries):
        epoch_end = entries[i + 1][1] - 1 if i + 1 < len(entries) else end
        if epoch_start <= end and epoch_end >= start:
            out[epoch] = max(epoch_start, start)
    return out


async def copy_segments(p: TieredPartition, svc: RemoteServices) -> int:
    """Copy every eligible segment of ``p``; returns how many were copied.

    Raises:
        RemoteStorageError: a copy failed (after its cleanup).
    """
    cfg = p.log.config
    if not cfg.remote_storage_enable or cfg.remote_copy_disable:
        return 0
    copied = 0
    for seg in copy_candidates(p):
        if p.cancelled:
            break
        await _copy_one(p, svc, seg)
        copied += 1
    return copied


async def _copy_one(p: TieredPartition, svc: RemoteServices, seg: LogSegment) -> None:
    lg = p.log
    entries = [(e, o) for e, o in lg.epochs.entries if o <= seg.last_offset]
    epochs = segment_epochs(entries, seg.base_offset, seg.last_offset)
    if not epochs:
        raise RemoteStorageError(f"no leader epoch known for offsets {seg.base_offset}.."
                                 f"{seg.last_offset}", retriable=True)
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(p.tip), seg.base_offset, seg.last_offset,
        seg.max_timestamp, svc.node_id, svc.clock(), epochs, seg.size)
    snapshot = await lg.producer_snapshot_ready(seg)
    data = LogSegmentData(seg.log_path, seg.index.path, seg.time_index.path,
                          seg.txn_index.existing_path, snapshot,
                          checkpoint.format_epochs(entries).encode())
    topic = p.tip.topic
    waited = 0.0
    while (wait := svc.copy_quota.throttle_seconds()) > 0:
        # KIP-956: over remote.log.manager.copy.max.bytes.per.second; wait.
        await trio.sleep(wait)
        waited += wait
        if p.cancelled:
            return
    if waited:
        svc.metrics.copy_throttle.observe(waited)
    await svc.rlmm.add_remote_log_segment_metadata(md)
    p.copying.add(md.remote_log_segment_id.id)
    svc.metrics.copy_requests.labels(topic).inc()
    started = time.monotonic()
    token = svc.tasks_busy.start()
    try:
        custom = await trio.to_thread.run_sync((svc.copier or svc.rsm).copy_log_segment_data,
                                               md, data, limiter=svc.copier_limiter)
    except RemoteStorageError as exc:
        svc.metrics.copy_errors.labels(topic).inc()
        log.warning("segment copy failed", segment=str(md.remote_log_segment_id),
                    start_offset=md.start_offset, end_offset=md.end_offset, error=str(exc),
                    retriable=exc.retriable)
        await discard_attempt(svc, md)
        raise
    finally:
        svc.tasks_busy.stop(token)
        p.copying.discard(md.remote_log_segment_id.id)
    if p.cancelled:
        # Stopped during the copy: leadership moved, tiering was disabled or the
        # topic deleted. A deposed leader never publishes COPY_SEGMENT_FINISHED
        # (the new leader copies the segment itself and its expirer removes this
        # attempt as a stale copy), and the segment is not claimed as tiered: its
        # remote data may be about to go, and local retention would delete the
        # only copy.
        log.info("copy finished after the partition stopped; not published",
                 segment=str(md.remote_log_segment_id), start_offset=md.start_offset,
                 end_offset=md.end_offset)
        await _remove_unpublished(svc, md)
        return
    await svc.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id, svc.clock(), custom,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, svc.node_id))
    lg.highest_tiered_offset = max(lg.highest_tiered_offset, seg.last_offset)
    svc.metrics.copy_bytes.labels(topic).inc(seg.size)
    svc.copy_quota.record(seg.size)
    log.info("segment copied to remote storage", segment=str(md.remote_log_segment_id),
             start_offset=md.start_offset, end_offset=md.end_offset, bytes=seg.size,
             seconds=round(time.monotonic() - started, 3))


async def _remove_unpublished(svc: RemoteServices, md: RemoteLogSegmentMetadata) -> None:
    """Delete the objects of a copy that finished after its partition stopped.

    The new leader's expirer deletes this attempt (COPY_SEGMENT_STARTED) as a
    stale copy after a grace period, but an upload slower than that would
    write its objects after the deletion, and nothing would refer to them
    again. The metadata is the new leader's to write; only the objects go
    here (deleting is idempotent). A failure is logged: the audit finds them.
    """
    try:
        await trio.to_thread.run_sync(svc.rsm.delete_log_segment_data, md,
                                      limiter=svc.expiration_limiter)
    except RemoteStorageError as exc:
        log.warning("objects of an unpublished copy left behind", error=str(exc),
                    segment=str(md.remote_log_segment_id))
        return
    log.info("objects of an unpublished copy deleted", segment=str(md.remote_log_segment_id))


async def discard_attempt(svc: RemoteServices, md: RemoteLogSegmentMetadata) -> None:
    """Delete a failed copy's objects and mark it deleted; never raises storage errors.

    If the delete itself fails, the attempt stays in COPY_SEGMENT_STARTED and
    the expirer removes it later as a stale copy.
    """
    try:
        await delete_remote_segment(svc, md)
    except RemoteStorageError as exc:
        log.warning("cleanup of failed copy deferred", segment=str(md.remote_log_segment_id),
                    error=str(exc))


async def delete_remote_segment(svc: RemoteServices, md: RemoteLogSegmentMetadata) -> None:
    """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED.

    Raises:
        RemoteStorageError: the storage delete failed (state stays STARTED,
            and the next expiration run retries).
    """
    seg_id = md.remote_log_segment_id
    topic = seg_id.topic_id_partition.topic
    await svc.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        seg_id, svc.clock(), None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, svc.node_id))
    svc.metrics.delete_requests.labels(topic).inc()
    token = svc.tasks_busy.start()
    started = time.monotonic()
    try:
        await trio.to_thread.run_sync(svc.rsm.delete_log_segment_data, md,
                                      limiter=svc.expiration_limiter)
    except RemoteStorageError:
        svc.metrics.delete_errors.labels(topic).inc()
        raise
    finally:
        svc.tasks_busy.stop(token)
    svc.index_cache.remove(str(seg_id.id), md.start_offset)
    await svc.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        seg_id, svc.clock(), None, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, svc.node_id))
    log.info("remote segment deleted", segment=str(seg_id), start_offset=md.start_offset,
             end_offset=md.end_offset, seconds=round(time.monotonic() - started, 3))
