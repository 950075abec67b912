"""Where each hosted partition's data lives, as this broker sees it: the
answer to DescribeTiering (``protocol.tierd_apis``), which ``tierd admin
tiering`` gathers from every broker.

A read-only snapshot taken on the event loop: offsets and sizes from the
local log, the tier from the remote log metadata this broker reads (a
follower reads it too), the copy lag from the leader's copier rules, and a
follower's fetcher state, with the last error of a rebuild from the remote
tier that keeps failing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.partition import TopicPartition
from replication.partition import Partition
from replication.replica_manager import ReplicaManager
from storage.remote.copier import copy_candidates
from storage.remote.types import RemoteLogSegmentState, TopicIdPartition

# (state name, failed rebuilds in a row, last rebuild error) of a followed partition.
FollowerInfo = tuple[str, int, str | None]


@dataclass(slots=True)
class PartitionTiering:
    """One partition's data placement on this broker (offsets are Kafka's)."""

    topic: str
    topic_id: object
    partition: int
    role: str
    leader_id: int
    leader_epoch: int
    remote_storage_enabled: bool
    log_start_offset: int
    local_log_start_offset: int
    highest_tiered_offset: int
    high_watermark: int
    log_end_offset: int
    local_bytes: int
    local_segments: int
    copy_lag_bytes: int = -1
    copy_lag_segments: int = -1
    remote_bytes: int = -1
    remote_segments: int = -1
    follower_state: str | None = None
    aux_state_failures: int = 0
    aux_state_error: str | None = None
    metadata_rebuilding: bool = False


def describe(replicas: ReplicaManager, wanted: set[TopicPartition] | None,
             follower_info: Callable[[TopicPartition], FollowerInfo | None] | None
             ) -> list[PartitionTiering]:
    """Every hosted partition in ``wanted`` (None = all), sorted by topic, partition."""
    out = []
    for part in sorted(replicas.hosted(), key=lambda p: p.tp):
        if wanted is not None and part.tp not in wanted:
            continue
        info = follower_info(part.tp) if follower_info is not None else None
        out.append(_one(replicas, part, info))
    return out


def _one(replicas: ReplicaManager, part: Partition, info: FollowerInfo | None) -> PartitionTiering:
    lg = part.log
    leader = part.is_leader(replicas.node_id)
    row = PartitionTiering(
        topic=part.topic, topic_id=part.topic_id, partition=part.index,
        role="leader" if leader else "follower", leader_id=part.leader_id,
        leader_epoch=part.leader_epoch,
        remote_storage_enabled=bool(lg.config.remote_storage_enable),
        metadata_rebuilding=bool(lg.config.remote_metadata_rebuilding),
        log_start_offset=lg.log_start_offset, local_log_start_offset=lg.local_log_start_offset,
        highest_tiered_offset=lg.highest_tiered_offset, high_watermark=part.high_watermark,
        log_end_offset=lg.end_offset, local_bytes=lg.size, local_segments=len(lg.segments))
    if not leader and info is not None:
        row.follower_state, row.aux_state_failures, row.aux_state_error = info
    remote = replicas.tiering.manager
    if remote is None:
        return row
    tip = TopicIdPartition(part.topic_id, part.topic, part.index)
    if remote.svc.rlmm.is_ready(tip):
        finished = [m for m in remote.svc.rlmm.list_remote_log_segments(tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        row.remote_bytes = sum(m.segment_size_in_bytes for m in finished)
        row.remote_segments = len(finished)
    tiered = remote.partitions.get(part.tp)
    if leader and tiered is not None and tiered.ready and not tiered.cancelled:
        lag = copy_candidates(tiered)
        row.copy_lag_bytes = sum(s.size for s in lag)
        row.copy_lag_segments = len(lag)
    return row


def by_topic(rows: Iterable[PartitionTiering]) -> dict[str, list[PartitionTiering]]:
    """``rows`` grouped by topic name, in order."""
    out: dict[str, list[PartitionTiering]] = {}
    for row in rows:
        out.setdefault(row.topic, []).append(row)
    return out
