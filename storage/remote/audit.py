"""The leader's periodic audit of its partition's remote objects against the
remote log metadata: what ``tierd admin reconcile`` reports, exported as
metrics on a schedule (report only; deleting orphans stays an operator's
decision, ``tierd admin reconcile --delete-orphans``).

Theory of operation
-------------------
The store is listed first, then compared with the metadata the broker holds
in memory at that moment. Two races decide what may be judged:

* A copy writes COPY_SEGMENT_STARTED before its first object, so a listed
  object of a copy in flight always has its segment in the metadata: it is
  never an orphan. Objects of unknown segments younger than the grace
  period are not counted either (a copy that started on another broker a
  moment ago, whose record this broker has not read yet), nor objects of a
  segment whose DELETE_SEGMENT_STARTED is younger than it (a delete under way).
* A segment finished after the listing began may have objects the listing
  missed: only segments whose COPY_SEGMENT_FINISHED is older than the
  listing's start are checked for a missing or wrong-sized ``.log``.

``audit`` is pure; ``audit_partition`` lists in a worker thread (on the
expiration pool) and keeps the result on the partition for the gauges.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from storage.remote.api import StoredObject
from storage.remote.audit_result import AuditResult
from storage.remote.naming import LOG_SUFFIX, expected_log_object_size
from storage.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
)

if TYPE_CHECKING:
    from storage.remote.partition_state import RemoteServices, TieredPartition

log = structlog.get_logger(__name__)

# (start offset, segment uuid): how one partition's objects and metadata meet.
_Key = tuple[int, uuid.UUID]


# At most this many keys are named in a log line.
MAX_EXAMPLES = 5


def audit(objects: Iterable[StoredObject], segments: Iterable[RemoteLogSegmentMetadata],
          listed_at_ms: int, grace_ms: int) -> AuditResult:
    """Compare one partition's listed ``objects`` with its live ``segments``.

    Args:
        objects: the partition's objects, listed starting at ``listed_at_ms``.
        segments: its segments not yet deleted (any state), read after the listing.
        listed_at_ms: wall-clock time the listing started.
        grace_ms: unknown objects younger than this (at the listing) are not orphans.
    """
    live: dict[_Key, RemoteLogSegmentMetadata] = {
        (md.start_offset, md.remote_log_segment_id.id): md for md in segments}
    result = AuditResult()
    logs: dict[_Key, StoredObject] = {}
    for obj in objects:
        name = obj.name
        key = (name.start_offset, name.segment_id.id) if name is not None else None
        md = live.get(key) if key is not None else None
        if md is not None and md.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            if name is not None and name.suffix == LOG_SUFFIX and key is not None:
                logs[key] = obj
            continue
        # Young: a copy this broker has not heard of yet, or a delete under way.
        since_ms = obj.modified_s * 1000 if md is None else md.event_timestamp_ms
        if listed_at_ms - since_ms < grace_ms:
            continue
        result.orphan_objects += 1
        result.orphan_bytes += obj.size
        _example(result, f"orphan {obj.key}")
    for key, md in live.items():
        if (md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                or md.event_timestamp_ms >= listed_at_ms):
            continue
        found = logs.get(key)
        if found is None:
            result.missing_segments += 1
            _example(result, f"missing .log of segment at {md.start_offset}")
        elif found.size != expected_log_object_size(md):
            result.size_mismatches += 1
            _example(result, f"{found.key}: {found.size} bytes, metadata says "
                             f"{expected_log_object_size(md)}")
    return result


def _example(result: AuditResult, text: str) -> None:
    if len(result.examples) < MAX_EXAMPLES:
        result.examples.append(text)


async def audit_partition(p: TieredPartition, svc: RemoteServices, grace_ms: int) -> None:
    """List ``p``'s objects, compare them with its metadata, keep the result
    in ``p.audit`` (exported as gauges). Report only: nothing is deleted.

    Error handling: a failed listing is logged and counted, never raised;
    the caller schedules the next audit either way.
    """
    rsm: Any = svc.rsm
    listed_at_ms = int(time.time() * 1000)
    try:
        objects = await trio.to_thread.run_sync(
            lambda: list(rsm.list_objects(rsm.partition_prefix(p.tip))),
            limiter=svc.expiration_limiter)
    except RemoteStorageError as exc:
        svc.metrics.audit_errors.labels(p.tip.topic).inc()
        log.warning("remote tier audit failed", partition=str(p.tip), error=str(exc))
        return
    result = audit(objects, svc.rlmm.list_remote_log_segments(p.tip), listed_at_ms, grace_ms)
    p.audit = result
    svc.metrics.audit_runs.labels(p.tip.topic).inc()
    if not result.clean:
        log.warning("remote tier audit found problems", partition=str(p.tip),
                    orphan_objects=result.orphan_objects, orphan_bytes=result.orphan_bytes,
                    missing_segments=result.missing_segments,
                    size_mismatches=result.size_mismatches, examples=result.examples,
                    fix="tierd admin reconcile")
