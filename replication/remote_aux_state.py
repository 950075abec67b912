"""BuildingRemoteLogAuxState: a follower below its leader's local log start
rebuilds from the remote tier instead of replicating the whole log (KIP-405,
"Follower Replication").

When the leader answers a fetch with OFFSET_MOVED_TO_TIERED_STORAGE, the
offsets the follower needs exist only in the remote tier. The follower then:

1. asks the leader (ListOffsets, as a replica) for its earliest local offset
   with its leader epoch (-4) and its log start (-2), and in KIP-1023 mode
   (``follower.fetch.last.tiered.offset.enable``) its earliest pending upload
   (-6, last tiered offset + 1); ``tier_start.restart_point`` picks L among
   them: -6 in KIP-1023 mode, else -4;
2. learns the leader's epoch at L - 1 (OffsetForLeaderEpoch when an epoch
   may begin at L) and waits until its own remote log metadata (it follows
   ``__remote_log_metadata`` for the partitions it replicates) has a finished
   remote segment holding L - 1 in that epoch: after an unclean election the
   tier may also hold another lineage's copy of the same offset;
3. fetches that segment's leader-epoch checkpoint and producer snapshot from
   the remote storage manager;
4. empties its log and restarts it after that segment (at its end offset + 1,
   which is L, or later if the leader still has that segment locally too),
   with the epochs and producer state of everything below, and the leader's
   log start; then it fetches the local tail from the leader.

In KIP-1023 mode a follower with no local data asks first, before the leader
answers OFFSET_MOVED_TO_TIERED_STORAGE (its local log may reach back to offset
0): ``prepare`` then answers None when there is nothing worth skipping (nothing
tiered above the follower's end), and the follower fetches as usual.

Steps 1-3 (``prepare``) only read, and run as their own task, so one slow or
failing remote store never stalls the other partitions of the same fetcher;
step 4 (``apply``) changes the log, synchronously, and only if the partition
still follows the same leader in the same epoch.

Error handling: every failure of ``prepare`` (leader unreachable or moved,
metadata not caught up, segment not found yet, storage errors) raises; the
fetcher counts it, backs off and tries again with the next fetch. A leader
whose tier moves on meanwhile (more copied, its local log trimmed past L)
needs nothing special: the rebuild is read-only until ``apply``, and a fetch
from an L the leader no longer holds locally gets OFFSET_MOVED_TO_TIERED_STORAGE
again, which starts over with the new bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from replication import leader_requests
from replication.list_offsets import EARLIEST, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD
from replication.peer import Peer
from replication.tier_start import LeaderBounds, restart_point
from storage.log import checkpoint, producer_snapshot
from storage.log.producer_snapshot import SnapshotEntry
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from replication.replica_manager import ReplicaManager


class AuxStateNotReady(Exception):
    """The remote tier cannot rebuild this follower yet (retriable)."""


@dataclass(frozen=True, slots=True)
class AuxState:
    """What ``apply`` installs: the log restarts at ``next_offset``."""

    log_start: int
    next_offset: int
    epochs: list[tuple[int, int]]
    producers: list[SnapshotEntry]
    segment: RemoteLogSegmentMetadata


def _epoch_at(md: RemoteLogSegmentMetadata, offset: int) -> int:
    """The leader epoch of ``offset`` within segment ``md``."""
    return max(e for e, start in md.segment_leader_epochs.items() if start <= offset)


def segment_holding(segments: list[RemoteLogSegmentMetadata], offset: int,
                    epoch: int) -> RemoteLogSegmentMetadata | None:
    """The finished segment holding ``offset`` written in leader epoch ``epoch``
    (the leader's epoch there: a copy of the same offset from another lineage,
    kept after an unclean election, has another). Of several such copies, the
    one that goes furthest."""
    best: RemoteLogSegmentMetadata | None = None
    for md in segments:
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            continue
        if not md.start_offset <= offset <= md.end_offset or _epoch_at(md, offset) != epoch:
            continue
        if best is None or md.end_offset > best.end_offset:
            best = md
    return best


async def leader_epoch_at(leader: Peer, tp: TopicPartition, offset: int, epoch_after: int,
                          leader_epoch: int, node_id: int) -> int:
    """The leader's epoch at ``offset``, given its epoch at ``offset + 1``: that
    one, unless the leader says the epoch before it ends after ``offset``
    (OffsetForLeaderEpoch, as Kafka's follower asks)."""
    if epoch_after <= 0:
        return max(epoch_after, 0)
    previous, end = await leader_requests.end_offset_for_epoch(
        leader, tp[0], tp[1], epoch_after - 1, leader_epoch, node_id)
    return previous if previous >= 0 and end > offset else epoch_after


async def _restart_point(leader: Peer, tp: TopicPartition, leader_epoch: int, node_id: int,
                         follower_end: int, last_tiered: bool,
                         probing: bool) -> tuple[int, int, int] | None:
    """Step 1: where the follower's local log restarts, the leader's epoch
    there and the leader's log start; None if nowhere worth it (only when
    ``probing``)."""
    pending, pending_epoch = -1, -1
    if last_tiered:
        pending, pending_epoch = await leader_requests.list_offset(
            leader, tp[0], tp[1], EARLIEST_PENDING_UPLOAD, leader_epoch, node_id)
        if probing and pending <= follower_end:
            return None  # nothing tiered above what the follower holds
    local_start, local_epoch = await leader_requests.list_offset(
        leader, tp[0], tp[1], EARLIEST_LOCAL, leader_epoch, node_id)
    log_start, _ = await leader_requests.list_offset(leader, tp[0], tp[1], EARLIEST,
                                                     leader_epoch, node_id)
    if last_tiered:
        point = restart_point(LeaderBounds(log_start, local_start, local_epoch, pending,
                                           pending_epoch), follower_end, last_tiered)
    else:  # KIP-405: the leader's earliest local offset, as before KIP-1023
        point = (local_start, local_epoch) if local_start > log_start else None
    if point is None:
        if probing:
            return None
        raise AuxStateNotReady(f"the leader has no tiered data below {local_start}")
    return point[0], point[1], log_start


async def prepare(replicas: ReplicaManager, leader: Peer, tp: TopicPartition,
                  leader_epoch: int, node_id: int, last_tiered: bool = False,
                  probing: bool = False) -> AuxState | None:
    """Steps 1-3: everything needed to restart the follower's log.

    Args:
        last_tiered: KIP-1023 mode (restart at the leader's last tiered offset + 1).
        probing: the follower has no local data and was not sent
            OFFSET_MOVED_TO_TIERED_STORAGE: rebuild only if the leader has
            tiered data above the follower's log end.

    Returns:
        None (only when ``probing``): nothing to rebuild, fetch as usual.

    Raises:
        AuxStateNotReady, KafkaApiError, PeerError, RemoteStorageError,
        MetadataNotReady: not possible now; retry later.
    """
    remote = replicas.tiering.manager
    if remote is None:
        raise AuxStateNotReady("tiered storage is off on this broker")
    part = replicas.partition(tp)
    tip = TopicIdPartition(part.topic_id, tp[0], tp[1])  # type: ignore[arg-type]
    point = await _restart_point(leader, tp, leader_epoch, node_id, part.log.end_offset,
                                 last_tiered, probing)
    if point is None:
        return None
    start, start_epoch, log_start = point
    remote.follow_partition(tip, part.log)
    rlmm = remote.svc.rlmm
    await rlmm.ensure_ready(tip)
    target = start - 1
    epoch = await leader_epoch_at(leader, tp, target,
                                  start_epoch if start_epoch >= 0 else leader_epoch,
                                  leader_epoch, node_id)
    md = segment_holding(rlmm.list_remote_log_segments(tip), target, epoch)
    if md is None:
        raise AuxStateNotReady(f"no finished remote segment holds offset {target} "
                               f"in epoch {epoch} yet")
    svc = remote.svc
    raw = await trio.to_thread.run_sync(svc.rsm.fetch_index, md, IndexType.LEADER_EPOCH,
                                        limiter=svc.reader_limiter)
    epochs = checkpoint.parse_epochs(raw.decode("utf-8", "replace"))
    if epochs is None:
        raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                            f"unreadable leader-epoch checkpoint of {md.remote_log_segment_id}")
    try:
        snap = await trio.to_thread.run_sync(svc.rsm.fetch_index, md,
                                             IndexType.PRODUCER_SNAPSHOT,
                                             limiter=svc.reader_limiter)
        producers = producer_snapshot.decode(snap) if snap else []
    except RemoteResourceNotFoundError:
        producers = []  # the segment had no producers
    return AuxState(log_start, md.end_offset + 1, epochs, producers, md)


def apply(replicas: ReplicaManager, tp: TopicPartition, state: AuxState) -> int:
    """Step 4: restart the follower's log after the remote segment; returns
    the offset to fetch from."""
    part = replicas.partition(tp)
    part.log.reset_from_remote(state.log_start, state.next_offset, state.epochs,
                               state.producers)
    part.high_watermark = state.next_offset
    return state.next_offset
