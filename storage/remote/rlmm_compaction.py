"""Compaction of ``__remote_log_metadata``: a restatement of live state, then DeleteRecords.

Theory of operation
-------------------
The topic is a delete-policy log of segment lifecycle events (KIP-405) and
would grow forever. KIP-1266 bounds it by compaction; we keep its aim (every
record wholly superseded goes, a restart reads a bounded log) without keys or
tombstones, which a reader in the middle of the log could miss:

1. The leader of a metadata partition, caught up with every record of it,
   appends a *restatement*: for each user partition still known, each live
   segment as its COPY_SEGMENT_STARTED record followed (unless it is still
   in that state) by one update to its latest state, and the partition's
   deletion state as the chain of records that reaches it. The records are
   the ordinary KIP-405 ones; only their key marks them, as
   ``tierd.rlmm.restatement:<first offset>:<record count>``. They are
   appended in one event-loop step, right behind the last record folded, so
   nothing can come between (``MetadataLog.append_at_end``).
2. Once the restatement is committed, the log start moves to its first
   offset (DeleteRecords): every record before it goes. Records of deleted
   segments (DELETE_SEGMENT_FINISHED), of deleted partitions
   (DELETE_PARTITION_FINISHED), superseded updates and refused records are
   not restated, so they are gone for good.

Readers (``rlmm``): a reader that has folded every record before a
restatement skips it (it says what that reader already holds). A reader
that finds records missing (its next offset is below the log start: a
broker that was down, a new broker, a snapshot older than the log start)
forgets what it holds, and rebuilds from the first restatement it meets
that is complete (all ``count`` records there, in order: a leader that
died while followers had only part of one leaves a partial one behind,
which everyone skips). Followers of the metadata partition copy the log as
it is and move their log start with the leader's, so every replica holds the
same records.

A metadata partition with nothing live left has nothing to restate: it
keeps its records until something live is written to it again.

A restatement restores state as a local snapshot file does
(``RemoteLogMetadataCache.restore``), with the same two losses documented
there; nothing a live segment needs is lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence

import structlog
import trio

from storage.remote.metadata_cache import (
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.rlmm_api import MetadataLog, restatement_key
from storage.remote.rlmm_partition import MetadataPartition
from storage.remote.rlmm_serde import serialize
from storage.remote.types import RemoteLogSegmentMetadata, RemoteLogSegmentState

log = structlog.get_logger(__name__)

# The default of rlmm.config.remote.log.metadata.compaction.min.superseded.records
# (``rlmm_config``; compaction is considered every snapshot interval).
# A metadata partition is compacted once at least this many of its records
# are superseded and they are at least as many as the restatement would be
# (so the log is at least twice its live size and each compaction at least
# halves it: the rewriting cost stays proportional to what was appended).
DEFAULT_MIN_SUPERSEDED = 10_000

# The user partition's live segments (in event order) and its deletion state.
PartitionState = tuple[list[RemoteLogSegmentMetadata], RemotePartitionDeleteMetadata | None]


def restatement_size(states: Iterable[PartitionState]) -> int:
    """How many records ``restatement_values`` will give for ``states``."""
    total = 0
    for segments, delete in states:
        total += sum(1 if s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED else 2
                     for s in segments)
        total += 0 if delete is None else int(delete.state) + 1
    return total


def restatement_values(states: Iterable[PartitionState]) -> list[bytes]:
    """The record values restating ``states`` (blocking work: run it in a thread)."""
    out: list[bytes] = []
    for segments, delete in states:
        for segment in segments:
            out.append(serialize(dataclasses.replace(
                segment, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)))
            if segment.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                out.append(serialize(RemoteLogSegmentMetadataUpdate(
                    segment.remote_log_segment_id, segment.event_timestamp_ms,
                    segment.custom_metadata, segment.state, segment.broker_id)))
        if delete is not None:
            for state in RemotePartitionDeleteState:
                if state > delete.state:
                    break
                out.append(serialize(dataclasses.replace(delete, state=state)))
    return out


def keyed(values: Sequence[bytes], first_offset: int) -> list[tuple[bytes | None, bytes]]:
    """``values`` as records of a restatement appended at ``first_offset``."""
    key = restatement_key(first_offset, len(values))
    return [(key, value) for value in values]


def worth_compacting(records: int, restated: int, min_superseded: int) -> bool:
    """Whether a metadata partition holding ``records`` records, ``restated`` of
    which would be restated, should be compacted (``min_superseded`` < 0: never)."""
    superseded = records - restated
    return min_superseded >= 0 and superseded > 0 and superseded >= max(min_superseded, restated)


# The manager's "fold what is new in this metadata partition" (lock held).
CatchUp = Callable[[int, MetadataPartition], Awaitable[object]]


async def compact(metadata_log: MetadataLog, p: int, state: MetadataPartition,
                  min_superseded: int, catch_up: CatchUp) -> bool:
    """Restate metadata partition ``p`` at its end and drop every record before.

    Only where this broker leads ``p`` (``state`` is caught up here first,
    whether or not it hosts user partitions of ``p``); only when worth it
    (``worth_compacting``). ``catch_up(p, state)`` folds the records not
    folded yet (the caller holds ``state.lock``). Returns
    whether it compacted.

    Error handling: a crash or failure before the log start moves leaves
    the restatement in the log (readers skip it) and every older record:
    nothing is lost, the next interval tries again.
    """
    start = metadata_log.start_offset(p)
    if start is None or min_superseded < 0:
        return False
    async with state.lock:
        await catch_up(p, state)
        at = state.next_offset
        states = [(c.segments_in_event_order(), c.delete_metadata)
                  for _, c in sorted(state.caches.items(), key=lambda kv: str(kv[0]))]
    restated = restatement_size(states)
    if not state.trusted or not worth_compacting(
            at - start, restated, min_superseded):
        return False
    values = await trio.to_thread.run_sync(restatement_values, states)
    async with state.lock:
        await catch_up(p, state)
        first = metadata_log.append_at_end(
            p, lambda end: keyed(values, end) if end == at == state.next_offset else None)
    if first is None:
        return False
    await metadata_log.delete_before(p, first)
    log.info("remote log metadata compacted", metadata_partition=p, dropped=first - start,
             restated=len(values))
    return True

