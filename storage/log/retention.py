"""Retention of a partition's local segments: which retention applies, when
the first segment is past it, and deleting segments from the front until
none is.

Theory of operation. Retention only ever removes the first local segment,
again and again while it is past the retention that applies (Kafka's
``remoteLogEnabledAndRemoteCopyEnabled`` chooses which):

- tiering on and copying on: local.retention.ms / local.retention.bytes,
  and only segments already in the remote tier may go (total retention of
  remote data is the remote expiration task's job); a segment wholly below
  the log start goes too;
- otherwise (untiered, or remote.log.copy.disable=true): the total
  retention.ms / retention.bytes, on segments wholly below the high
  watermark, tiered or not; an expired active segment is rolled first, as
  Kafka does. With copying off nothing new reaches the tier, so without
  this the local log would grow until the disk is full (KIP-950,
  KAFKA-17236).

Deleting a segment the remote tier does not hold moves the log start to the
new local start: the data below it is no longer contiguous with the log
(and, being older, is beyond the same total retention; the expirer deletes
it as below the log start). Deleting a tiered segment moves only the local
start.

It is apart from ``storage.log.log`` because it is one policy with its own
settings, read against the segments' sizes and timestamps; what it needs of
the log (roll, drop the first segment, the offsets it moves) is the small
``RetainedLog`` interface below, so this module never imports the log view.

Concurrency: event loop only, like the log it trims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from storage.log.epoch_cache import LeaderEpochCache
from storage.log.local_log import LocalLog
from storage.log.segment import LogSegment

log = structlog.get_logger(__name__)


class RetainedLog(Protocol):
    """What retention needs of the log it trims (``storage.log.log.Log``)."""

    local: LocalLog
    epochs: LeaderEpochCache
    highest_tiered_offset: int
    log_start_offset: int

    def roll(self, next_offset: int | None = None) -> LogSegment: ...

    def remove_first_segment(self) -> None: ...


def apply_retention(lg: RetainedLog, clock: Callable[[], int], high_watermark: int,
                    limit: int | None = None) -> int:
    """Delete ``lg``'s local segments beyond retention, at most ``limit`` of
    them if given; returns how many went."""
    cfg = lg.local.config
    if "delete" not in cfg.cleanup_policy:
        return 0
    now = clock()
    local_only = cfg.remote_storage_enable and not cfg.remote_copy_disable
    count = 0
    start_moved = False
    while limit is None or count < limit:
        expired = (_locally_expired(lg, now) if local_only
                   else _first_segment_expired(lg.local, now, high_watermark))
        if not expired:
            break
        if len(lg.local.segments) == 1:
            lg.roll()
        seg = lg.local.segments[0]
        tiered = cfg.remote_storage_enable and seg.last_offset <= lg.highest_tiered_offset
        log.info("deleting local segment by retention", topic=lg.local.topic,
                 partition=lg.local.partition, base_offset=seg.base_offset,
                 last_offset=seg.last_offset, size=seg.size, tiered=tiered,
                 local_retention=local_only)
        lg.remove_first_segment()
        if not tiered and lg.local.base_offset > lg.log_start_offset:
            lg.log_start_offset = lg.local.base_offset
            start_moved = True
        count += 1
    if start_moved:
        lg.epochs.truncate_from_start(lg.log_start_offset)
    return count


def _first_segment_expired(local: LocalLog, now: int, high_watermark: int) -> bool:
    seg = local.segments[0]
    if seg.is_empty:
        # Holds nothing (the cleaner emptied it): it has no timestamp to
        # expire by, and deleting it loses nothing; the active one stays.
        return len(local.segments) > 1
    if seg.last_offset >= high_watermark:
        return False
    cfg = local.config
    if cfg.retention_ms >= 0 and seg.max_timestamp >= 0 and now - seg.max_timestamp > cfg.retention_ms:
        return True
    return cfg.retention_bytes >= 0 and local.size - seg.size >= cfg.retention_bytes


def _locally_expired(lg: RetainedLog, now: int) -> bool:
    local = lg.local
    if len(local.segments) < 2:
        return False
    seg = local.segments[0]
    if seg.last_offset > lg.highest_tiered_offset:
        return False
    if seg.last_offset < lg.log_start_offset:
        return True
    cfg = local.config
    if (cfg.local_retention_ms >= 0 and seg.max_timestamp >= 0
            and now - seg.max_timestamp > cfg.local_retention_ms):
        return True
    return cfg.local_retention_bytes >= 0 and local.size - seg.size >= cfg.local_retention_bytes
