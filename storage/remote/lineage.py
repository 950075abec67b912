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
"""

from __future__ import annotations

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
