"""Group state in the internal topic ``__consumer_offsets``: write, and replay on start.

Each group lives in one partition, chosen as Kafka chooses it:
``(javaStringHashCode(group) & 0x7fffffff) % partitions``, so a data
directory's records sit where Kafka's tools expect them. Writes go through
the internal-topic module (``replication.internal_topics``) as ordinary v2 record batches (no producer id,
uncompressed), so they share the log's durability, flushing and recovery.

When this broker becomes the leader of a partition, the coordinator
replays it from its log start (``load_partition``); the last record for a
key wins, a null value removes the key. Appends are written to the local
log at once and the client is answered after ``wait_durable`` (see
``replication.internal_topics``). The topic is created with
cleanup.policy=compact, as in Kafka: retention never deletes it and the log
cleaner (``storage.log.cleaner``) keeps only the last record per key below
the active segment, so a replay reads what cleaning left plus that segment.

Error handling: an append failure is returned as the error code Kafka's
coordinator answers for it (``append``); a record we cannot parse during
replay is logged and skipped, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import structlog

from broker.coordinator import records as rec
from broker.coordinator.group import Group, GroupState, Member, TopicPartition
from protocol import records as batches
from protocol.errors import ErrorCode, KafkaApiError
from replication.internal_topics import OFFSETS_TOPIC, InternalTopic, partition_for

log = structlog.get_logger(__name__)

__all__ = ["OFFSETS_TOPIC", "OffsetsStore", "partition_for"]

# Append errors -> what Kafka's group coordinator answers (GroupMetadataManager).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}

Record = tuple[bytes, bytes | None]


@dataclass(slots=True)
class LoadedGroup:
    """What the log says about one group after replay."""

    metadata: rec.GroupMetadataValue | None = None
    offsets: dict[TopicPartition, rec.OffsetCommitValue] = field(default_factory=dict)


class OffsetsStore:
    def __init__(self, topic: InternalTopic, wall_clock: Callable[[], int]) -> None:
        self.topic = topic
        self.wall_clock = wall_clock

    @property
    def partitions(self) -> int:
        return self.topic.partitions

    def partition_of(self, group_id: str) -> int:
        return self.topic.partition_for(group_id)

    async def ensure_topic(self) -> None:
        """Create __consumer_offsets (internal, compacted) if the cluster has none yet."""
        await self.topic.ensure()

    def append(self, group_id: str, records: list[Record]) -> ErrorCode:
        """Append one batch of records to the group's partition.

        Returns:
            NONE, or the code to answer the client with.
        """
        if not records:
            return ErrorCode.NONE
        try:
            self.topic.append_records(self.partition_of(group_id), records, self.wall_clock())
        except KafkaApiError as exc:
            log.warning("offsets topic append failed", group=group_id, error=exc.code.name,
                        detail=exc.message)
            return _APPEND_ERRORS.get(exc.code, exc.code)
        except OSError:
            log.exception("offsets topic append failed: storage error", group=group_id)
            return _APPEND_ERRORS[ErrorCode.KAFKA_STORAGE_ERROR]
        return ErrorCode.NONE

    def store_group(self, group: Group) -> ErrorCode:
        """Write the group's generation, leader, members and assignments."""
        protocol = group.protocol_name
        value = rec.GroupMetadataValue(
            group.protocol_type or "", group.generation_id, protocol, group.leader_id,
            group.state_timestamp_ms,
            [rec.MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.rebalance_timeout_ms, m.session_timeout_ms,
                              m.metadata_for(protocol) if protocol else b"", m.assignment)
             for m in group.members.values()])
        key = rec.encode_group_metadata_key(rec.GroupMetadataKey(group.group_id))
        return self.append(group.group_id, [(key, rec.encode_group_metadata_value(value))])

    async def wait_durable(self, group_id: str, timeout_ms: int) -> ErrorCode:
        """Wait until the in-sync replicas have every append made so far to the
        group's partition; NONE, or the code to answer the client with."""
        error = await self.topic.wait_durable(self.partition_of(group_id), timeout_ms)
        if error is not ErrorCode.NONE:
            log.warning("offsets topic write not replicated", group=group_id, error=error.name)
        return _APPEND_ERRORS.get(error, error)

    def load_groups(self, partition: int) -> dict[str, Group]:
        """Rebuild the groups of one partition from the log: Stable if they have
        members, else Empty (as Kafka)."""
        now = self.wall_clock()
        groups = {}
        for group_id, loaded in self.replay(partition).items():
            group = _group_from(group_id, loaded.metadata, now)
            group.offsets = loaded.offsets
            groups[group_id] = group
        return groups

    def replay(self, partition: int) -> dict[str, LoadedGroup]:
        """Read one partition of the topic and fold it into per-group state."""
        # Each key's state is its last record's alone, so the fold keeps the raw
        # last value per raw key and decodes once per key, not once per record
        # (a replay of an uncleaned tail reads many commits of the same keys).
        last: dict[bytes, bytes | None] = {}
        count = 0
        for key, value in self._records((OFFSETS_TOPIC, partition)):
            count += 1
            last[key] = value
        groups: dict[str, LoadedGroup] = {}
        for key, value in last.items():
            try:
                _apply(groups, rec.decode_key(key), value)
            except rec.RecordFormatError as exc:
                log.warning("skipping unreadable offsets record", partition=partition,
                            error=str(exc))
        for group_id in [g for g, s in groups.items() if s.metadata is None and not s.offsets]:
            del groups[group_id]
        if count:
            log.info("group state loaded", partition=partition, records=count,
                     groups=len(groups))
        return groups

    def _records(self, tp: tuple[str, int]) -> Iterator[Record]:
        for header, data in self.topic.replay(tp[1]):
            if header.is_control or header.is_transactional:
                continue  # transactional offsets: replayed by broker.transactions
            try:
                decoded = batches.decode_records(data, header)
            except KafkaApiError as exc:
                log.warning("skipping undecodable offsets batch", partition=tp[1],
                            offset=header.base_offset, error=str(exc))
                continue
            for r in decoded:
                if r.key is not None:
                    yield r.key, r.value


def _apply(groups: dict[str, LoadedGroup], key: rec.OffsetCommitKey | rec.GroupMetadataKey,
           value: bytes | None) -> None:
    state = groups.setdefault(key.group, LoadedGroup())
    if isinstance(key, rec.OffsetCommitKey):
        tp = (key.topic, key.partition)
        if value is None:
            state.offsets.pop(tp, None)
        else:
            state.offsets[tp] = rec.decode_offset_commit_value(value)
    elif value is None:
        state.metadata = None
    else:
        state.metadata = rec.decode_group_metadata_value(value)


def _group_from(group_id: str, meta: rec.GroupMetadataValue | None, now_ms: int) -> Group:
    if meta is None:
        return Group(group_id, GroupState.EMPTY, now_ms)
    stamp = meta.current_state_timestamp if meta.current_state_timestamp >= 0 else now_ms
    group = Group(group_id, GroupState.STABLE if meta.members else GroupState.EMPTY, stamp)
    group.generation_id = meta.generation
    group.protocol_name = meta.protocol
    for m in meta.members:
        group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                         m.rebalance_timeout_ms, m.session_timeout_ms, meta.protocol_type,
                         [(meta.protocol or "", m.subscription)], m.assignment))
    group.protocol_type = meta.protocol_type or None
    group.leader_id = meta.leader if meta.leader in group.members else None
    return group


def offset_record(group_id: str, tp: TopicPartition, value: rec.OffsetCommitValue | None
                  ) -> Record:
    """The record committing ``value`` for ``tp`` (None: its tombstone)."""
    key = rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, tp[0], tp[1]))
    return key, None if value is None else rec.encode_offset_commit_value(value)


def group_tombstone(group_id: str) -> Record:
    return rec.encode_group_metadata_key(rec.GroupMetadataKey(group_id)), None
