"""``tierd admin reconcile``: compare the remote tier with its metadata.

Theory of operation
-------------------
The metadata topic ``__remote_log_metadata`` is the truth about which
remote segments exist; the store only holds bytes. The two drift apart when
a copy crashes after writing objects, when a delete fails half-way, or when
someone edits the bucket. This command lists the store through the brokers'
own storage manager (built from the same ``--config``/``--override``
settings), reads every metadata record through the Kafka protocol, folds
them with the brokers' own cache (``RemoteLogMetadataCache``), and reports:

* orphans: objects of no segment the metadata knows (or of a segment in
  DELETE_SEGMENT_STARTED, which no reader uses any more), and names no
  storage manager writes;
* missing: COPY_SEGMENT_FINISHED segments without a ``.log`` object;
* size mismatches: a ``.log`` whose size differs from the metadata's.

The store is listed *before* the metadata is read. A broker writes
COPY_SEGMENT_STARTED before it writes an object, so every listed object of
a live copy has its record in what is read afterwards: a copy in flight is
never an orphan. The reverse race (a segment that finished after the
listing) is settled by asking the store for that segment's ``.log`` again.

``--delete-orphans`` deletes whole orphan segments through the storage
manager, and only when every object of the segment is older than
``--grace-seconds``; names no storage manager writes are never deleted.
Nothing is deleted when the metadata topic no longer starts at offset 0
(retention removed records, so "unknown" proves nothing).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from broker.admin.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AdminError,
    Column,
    emit,
    emit_json,
)
from broker.admin.remote_store import (
    MetadataView,
    add_store_options,
    list_store,
    open_store,
    progress,
    read_metadata,
)
from storage.remote.api import SegmentObjectName, StoredObject
from storage.remote.naming import LOG_SUFFIX, expected_log_object_size, uuid_str
from storage.remote.rlmm_api import TOPIC_NAME
from storage.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

# An hour: far longer than any copy takes (a 1 GiB segment at 10 MiB/s is
# done in two minutes), so an object that young may belong to a copy whose
# COPY_SEGMENT_STARTED this run could not see yet.
DEFAULT_GRACE_S = 3600.0

# (topic id, partition, start offset, segment uuid): how objects and metadata meet.
SegmentKey = tuple[Any, int, int, Any]


def register(sub: Any) -> None:
    """Add ``reconcile`` to ``sub``."""
    parser = sub.add_parser(
        "reconcile", help="compare the remote tier with __remote_log_metadata",
        description="List the remote tier, read __remote_log_metadata, and report orphan "
                    "objects, missing segments and size mismatches. Exit 4 if any.")
    add_store_options(parser)
    parser.add_argument("--delete-orphans", action="store_true",
                        help="delete orphan segments older than --grace-seconds")
    parser.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_S,
                        help="keep orphans younger than this (default %(default)s)")
    parser.set_defaults(func=run)


# -- comparing ------------------------------------------------------------------


@dataclass(slots=True)
class Finding:
    """One problem, as a row of the report."""

    kind: str  # orphan | missing | size_mismatch
    partition: str | None
    segment: str | None
    start_offset: int | None
    key: str | None
    size: int | None
    expected_size: int | None
    age_s: float | None
    reason: str
    action: str = ""


def _key_of_name(name: SegmentObjectName) -> SegmentKey:
    tip = name.segment_id.topic_id_partition
    return tip.topic_id, tip.partition, name.start_offset, name.segment_id.id


def _key_of_segment(md: RemoteLogSegmentMetadata) -> SegmentKey:
    tip = md.topic_id_partition
    return tip.topic_id, tip.partition, md.start_offset, md.remote_log_segment_id.id


def find_orphans(objects: list[StoredObject], live: dict[SegmentKey, RemoteLogSegmentMetadata],
                 now: float) -> list[Finding]:
    """Objects of no segment in COPY_SEGMENT_STARTED or COPY_SEGMENT_FINISHED."""
    found = []
    for obj in objects:
        name = obj.name
        if name is None:
            found.append(Finding("orphan", None, None, None, obj.key, obj.size, None,
                                 now - obj.modified_s, "not a segment object name"))
            continue
        md = live.get(_key_of_name(name))
        if md is not None and md.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            continue
        reason = ("no such segment in the metadata" if md is None
                  else "segment is DELETE_SEGMENT_STARTED")
        tip = name.segment_id.topic_id_partition
        found.append(Finding("orphan", f"{tip.topic}-{tip.partition}", uuid_str(name.segment_id.id),
                             name.start_offset, obj.key, obj.size, None, now - obj.modified_s,
                             reason))
    return found


def check_logs(rsm: Any, objects: list[StoredObject], finished: list[RemoteLogSegmentMetadata],
               bar: Any) -> list[Finding]:
    """Missing and wrong-sized ``.log`` objects of finished segments.

    Raises:
        AdminError(EXIT_UNREACHABLE): the store failed while re-checking.
    """
    logs = {_key_of_name(o.name): o for o in objects
            if o.name is not None and o.name.suffix == LOG_SUFFIX}
    found = []
    task = bar.add_task("checking segments", total=len(finished))
    for md in finished:
        bar.advance(task)
        obj = logs.get(_key_of_segment(md))
        tip = md.topic_id_partition
        row = Finding("missing", f"{tip.topic}-{tip.partition}",
                      uuid_str(md.remote_log_segment_id.id), md.start_offset,
                      obj.key if obj else None, obj.size if obj else None,
                      expected_log_object_size(md), None, "")
        if obj is None and not _log_stored(rsm, md):
            row.reason = "no .log object"
            found.append(row)
        elif obj is not None and obj.size != expected_log_object_size(md):
            row.kind, row.reason = "size_mismatch", ".log size differs from the metadata"
            found.append(row)
    return found


def _log_stored(rsm: Any, md: RemoteLogSegmentMetadata) -> bool:
    """Ask the store again: the copy may have finished after the listing."""
    try:
        rsm.fetch_log_segment(md, 0, 0)
    except RemoteResourceNotFoundError:
        return False
    except RemoteStorageError as exc:
        raise AdminError(f"remote storage failed: {exc}", EXIT_UNREACHABLE) from None
    return True


def delete_orphans(rsm: Any, orphans: list[Finding], objects: list[StoredObject],
                   grace_s: float) -> None:
    """Delete orphan segments whose objects are all older than ``grace_s``.

    Error handling: every outcome, a failed delete included, becomes the
    ``action`` of the segment's rows; nothing raises.
    """
    names = {o.key: o.name for o in objects}
    by_segment: dict[SegmentKey, list[Finding]] = defaultdict(list)
    for row in orphans:
        name = names.get(row.key or "")
        if name is None:
            row.action = "kept: not written by tierd"
        else:
            by_segment[_key_of_name(name)].append(row)
    for rows in by_segment.values():
        name = names[rows[0].key or ""]
        assert name is not None
        if any((row.age_s or 0.0) < grace_s for row in rows):
            action = "kept: younger than the grace period"
        else:
            try:
                rsm.delete_log_segment_data(_deletable(name))
                action = "deleted"
            except RemoteStorageError as exc:
                action = f"delete failed: {exc}"
        for row in rows:
            row.action = action


def _deletable(name: SegmentObjectName) -> RemoteLogSegmentMetadata:
    """Metadata naming an orphan segment: all a storage manager's delete needs."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=name.segment_id,
        start_offset=name.start_offset, end_offset=name.start_offset, max_timestamp_ms=-1,
        broker_id=-1, event_timestamp_ms=int(time.time() * 1000),
        segment_leader_epochs={0: name.start_offset}, segment_size_in_bytes=0)


# -- the command ----------------------------------------------------------------

COLUMNS = (Column("kind", "KIND"), Column("partition", "PARTITION"),
           Column("segment", "SEGMENT"), Column("start_offset", "START", numeric=True),
           Column("key", "OBJECT"), Column("size", "SIZE", numeric=True),
           Column("expected_size", "EXPECTED", numeric=True), Column("reason", "REASON"),
           Column("action", "ACTION"))


def run(args: Any) -> int:
    """List, read, compare, maybe delete, report. Returns EXIT_FINDINGS if
    anything found is still there afterwards."""
    rsm = open_store(args)
    try:
        with progress() as bar:
            objects = list_store(rsm, bar)
            view = read_metadata(args, bar)
            live = {_key_of_segment(md): md for md in view.segments()}
            finished = [md for md in live.values()
                        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            orphans = find_orphans(objects, live, time.time())
            broken = check_logs(rsm, objects, finished, bar)
        if args.delete_orphans and orphans:
            if not view.complete:
                raise AdminError(f"{TOPIC_NAME} no longer starts at offset 0; refusing to "
                                 "delete orphans")
            delete_orphans(rsm, orphans, objects, args.grace_seconds)
    finally:
        rsm.close()
    report(args, objects, view, orphans, broken)
    unresolved = broken + [row for row in orphans if row.action != "deleted"]
    return EXIT_FINDINGS if unresolved else EXIT_OK


def report(args: Any, objects: list[StoredObject], view: MetadataView, orphans: list[Finding],
           broken: list[Finding]) -> None:
    """The summary and the findings, as JSON or as a table."""
    states = Counter(md.state.name for md in view.segments())
    summary = {"objects": len(objects), "partitions": len(view.caches),
               "segments": dict(sorted(states.items())), "metadata_records": view.records,
               "dropped_records": view.dropped, "metadata_complete": view.complete}
    rows = [dataclasses.asdict(row) for row in orphans + broken]
    if args.json:
        emit_json({**summary, "orphans": rows[:len(orphans)],
                   "missing": [r for r in rows if r["kind"] == "missing"],
                   "size_mismatches": [r for r in rows if r["kind"] == "size_mismatch"]})
        return
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "no segments"
    print(f"{len(objects)} objects; {counts} in {len(view.caches)} partitions; "
          f"{view.records} metadata records ({view.dropped} dropped)")
    if not view.complete:
        print(f"warning: {TOPIC_NAME} no longer starts at offset 0", file=sys.stderr)
    if rows:
        emit(args, rows, COLUMNS)
    else:
        print("no findings")
