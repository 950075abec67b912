"""Per-partition answers for the APIs that neither produce nor fetch.

ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeLogDirs each
ask one question of a hosted partition's log, and the coordinators replay
an internal topic's partition when they load it. None of these needs the
ReplicaManager's wake-ups, purgatories or follower bookkeeping, only its
partitions, so they live here as functions of a ``ReplicaManager`` and the
ReplicaManager stays about hosting partitions and the data path.

Error handling: a partition that is not hosted here, or not led here where
the API needs its leader, is a KafkaApiError for the handler to turn into
the partition's error code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from protocol import records
from protocol.partition import TopicPartition
from replication import list_offsets
from replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)

# How much of a partition one replay read asks for (internal topics on load).
_REPLAY_READ_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    """One partition as DescribeLogDirs reports it."""

    topic: str
    partition: int
    size: int
    offset_lag: int


async def list_offset(replicas: ReplicaManager, tp: TopicPartition, timestamp: int,
                      version: int, committed: bool,
                      current_leader_epoch: int) -> tuple[int, int, int]:
    """ListOffsets for one partition: (offset, timestamp, leader epoch).

    Raises:
        KafkaApiError: unknown partition, fenced epoch, bad timestamp, remote error.
    """
    part = replicas.leader_partition(tp)
    replicas.check_leader_epoch(part, current_leader_epoch)
    return await list_offsets.lookup(part, replicas.tiering.lookups, timestamp, version,
                                    committed)


def end_offset_for_epoch(replicas: ReplicaManager, tp: TopicPartition,
                         current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch: (largest epoch <= ``leader_epoch``, its end offset)."""
    part = replicas.partition(tp)
    replicas.check_leader_epoch(part, current_leader_epoch)
    return part.log.epochs.end_offset_for(leader_epoch, part.log.end_offset)


def delete_records(replicas: ReplicaManager, tp: TopicPartition, offset: int) -> int:
    """DeleteRecords: move the log start to ``offset`` (-1: the high watermark).

    Returns:
        The new low watermark.
    """
    part = replicas.leader_partition(tp)
    hw = part.high_watermark
    return part.log.delete_records(hw if offset == -1 else offset, hw)


def log_dir_partitions(replicas: ReplicaManager) -> list[LogDirPartition]:
    """Every hosted partition with its size and offset lag, for DescribeLogDirs.

    The lag is 0 for a leader. A follower reports how far its log end is
    behind the leader's high watermark as of the leader's last fetch
    response. (Kafka reports max(high watermark - log end, 0) with the
    replica's own high watermark, which a follower caps at its log end, so
    its current replicas always show 0; only its alter-log-dirs "future"
    replicas show a lag, which tierd does not have.)
    """
    out = []
    for part in sorted(replicas.hosted(), key=lambda p: p.tp):
        lag = 0 if part.is_leader(replicas.node_id) else max(
            part.leader_high_watermark - part.log.end_offset, 0)
        out.append(LogDirPartition(part.topic, part.index, part.log.size, lag))
    return out


def replay_batches(replicas: ReplicaManager, tp: TopicPartition
                   ) -> Iterator[tuple[records.BatchHeader, bytes]]:
    """Every batch of a partition from its log start to its log end, for
    coordinators loading their internal topics as its new leader.

    As Kafka's coordinators do, the load reads past the high watermark: a
    new leader's log is the partition's truth, and its tail becomes
    committed as followers catch up (or the partition moves on and the
    coordinator unloads).

    Yields (header, buffer); the header's ``position`` is within the buffer.
    Stops (with a warning) if the log cannot be read further.
    """
    part = replicas.get(tp)
    if part is None:
        return
    lg = part.log
    offset = lg.log_start_offset
    while offset < lg.end_offset:
        result = lg.read(offset, _REPLAY_READ_BYTES, lg.end_offset, True)
        start = offset
        for header in records.iter_headers(result.data):
            offset = header.last_offset + 1
            yield header, result.data
        if offset == start:
            log.warning("replay stopped early", topic=tp[0], partition=tp[1],
                        offset=offset, log_end=lg.end_offset)
            return
