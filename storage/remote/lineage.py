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
from storage.remote.types import TopicIdPartition

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
