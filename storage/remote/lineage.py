"""Where the remote tier ends in one replica's own leader-epoch lineage.

A partition's remote segments may come from several leaders, and after an
unclean election or a failover some of them may hold offsets that this
replica's log has under other epochs. The tier boundary that matters to a
replica is therefore not the largest end offset in the metadata, but, as
KIP-405 describes for a new leader, the highest remote offset of the latest
epoch in its own epoch cache that has any remote data, capped at where that
epoch ends in its log (Kafka's findHighestRemoteOffset). A new leader
resumes copying after it; a follower lets local retention free the local
segments at or below it.

Lookups that are not reads (timestamps, aborted transactions) and the
expirer may only trust segments that lie wholly in the replica's lineage
(``in_lineage``): a copy left by a leader whose log then diverged answers
for offsets this log holds under other epochs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage.log.log import Log
from storage.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

NONE_TIERED = -1


def highest_remote_offset(rlmm: Any, tip: TopicIdPartition, lg: Log) -> int:
    """The last offset of ``lg``'s lineage that is in the remote tier (-1: none).

    Raises:
        MetadataNotReady: the metadata of ``tip`` is not caught up here.
    """
    entries = lg.epochs.entries
    for i in range(len(entries) - 1, -1, -1):
        epoch = entries[i][0]
        remote_end = rlmm.highest_offset_for_epoch(tip, epoch)
        if remote_end is None:
            continue
        # Offsets of this epoch end where the next epoch starts (or at the log end).
        epoch_end = entries[i + 1][1] - 1 if i + 1 < len(entries) else lg.end_offset - 1
        return min(remote_end, epoch_end)
    return NONE_TIERED


def remote_epochs_below(segments: list[RemoteLogSegmentMetadata],
                        before: int) -> list[tuple[int, int]]:
    """Leader-epoch entries (epoch, start offset) of the finished remote
    segments' data below ``before``, in offset order: what a lost
    leader-epoch-checkpoint knew about the tiered part of the log. Where copies
    overlap (a divergent leader's), the copy with the later epochs wins."""
    chosen: list[RemoteLogSegmentMetadata] = []
    finished = [m for m in segments if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                and m.start_offset < before]
    for md in sorted(finished, key=lambda m: (m.start_offset, -max(m.segment_leader_epochs))):
        if chosen and md.start_offset <= chosen[-1].end_offset:
            continue
        chosen.append(md)
    out: list[tuple[int, int]] = []
    for md in chosen:
        for epoch, start in sorted(md.segment_leader_epochs.items(), key=lambda e: e[1]):
            if start >= before or (out and epoch <= out[-1][0]):
                continue
            out.append((epoch, start))
    return out


def restore_remote_epochs(segments: list[RemoteLogSegmentMetadata], lg: Log) -> bool:
    """Put the tiered part back in front of an epoch cache that does not reach
    back to the log start; True if anything was added."""
    entries = lg.epochs.entries
    before = entries[0][1] if entries else lg.end_offset
    if entries and before <= lg.log_start_offset:
        return False
    first_epoch = entries[0][0] if entries else None
    remote = [(e, o) for e, o in remote_epochs_below(segments, before)
              if first_epoch is None or e <= first_epoch]
    if not remote:
        return False
    local = list(entries)
    if local and remote[-1][0] == local[0][0]:
        local.pop(0)  # the same epoch began in the tiered part: keep its real start
    lg.epochs.replace(remote + local)
    return True


EpochEntries = list[tuple[int, int]]


def _with_records(entries: Iterable[tuple[int, int]]) -> EpochEntries:
    """(epoch, start offset) ascending, without epochs holding no record (the
    next epoch starts at the same offset): Kafka's buildFilteredLeaderEpochMap."""
    ordered = sorted(entries)
    return [entry for i, entry in enumerate(ordered)
            if i + 1 == len(ordered) or ordered[i + 1][1] != entry[1]]


def in_lineage(md: RemoteLogSegmentMetadata, entries: EpochEntries, log_end_offset: int) -> bool:
    """Whether the segment belongs to the log's leader-epoch history.

    Kafka's RemoteLogManager.isRemoteSegmentWithinLeaderEpochs. ``entries``
    is the leader-epoch cache: (epoch, start offset), ascending. Epochs
    without records are ignored on both sides. Then:

    - the segment's last epoch must lie within the cache's epochs (all of
      the segment older than the cache: an orphan);
    - segment epochs older than the cache's first are skipped: DeleteRecords
      or retention truncated the cache from the start, and only the part of
      the segment from the log start on must match;
    - each remaining epoch must be in the cache; the first of them may start
      before the cache says only if it is the cache's first epoch (whose
      start the truncation moved up); every following one must start exactly
      where the cache says; the last must end before the cache's next epoch;
    - the segment must end below the log end offset.
    """
    cache = _with_records(entries)
    seg = _with_records(md.segment_leader_epochs.items())
    if not cache or not seg or not cache[0][0] <= seg[-1][0] <= cache[-1][0]:
        return False
    position = {epoch: i for i, (epoch, _) in enumerate(cache)}
    kept = [(epoch, start) for epoch, start in seg if epoch >= cache[0][0]]
    for i, (epoch, start) in enumerate(kept):
        c = position.get(epoch)
        if c is None:
            return False
        if i == 0 and c > 0 and start < cache[c][1]:
            return False
        following = cache[c + 1] if c + 1 < len(cache) else None
        if i + 1 < len(kept):
            if following != kept[i + 1]:
                return False
        elif following is not None and md.end_offset >= following[1]:
            return False
    return md.end_offset < log_end_offset
