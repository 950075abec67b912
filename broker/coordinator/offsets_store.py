"""Group state in ``__consumer_offsets``: the group metadata and offset
commit records, and their replay when this broker becomes a partition's leader.

Each group lives in one partition, chosen as Kafka chooses it, and its records
go through the shared coordinator store (``broker.coordinator_store``) as
ordinary v2 record batches (no producer id, uncompressed), so a data
directory's records sit where Kafka's tools expect them and share the log's
durability, flushing and recovery. The topic is created with
cleanup.policy=compact, as in Kafka: retention never deletes it and the log
cleaner (``storage.log.cleaner``) keeps only the last record per key below
the active segment, so a replay reads what cleaning left plus that segment.

Replay (``load_groups``): the last record for a key wins, a null value
removes the key. A record we cannot parse is logged and skipped, never fatal.
KIP-848 consumer groups' records (key types 3-8) are handed over raw, for
``consumer_store`` to rebuild those groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from broker.coordinator import consumer_records as cr
from broker.coordinator import records as rec
from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator_store import CoordinatorStore, Record
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.internal_topics import InternalTopic

log = structlog.get_logger(__name__)


def offsets_store(topic: InternalTopic, wall_clock: Callable[[], int]) -> CoordinatorStore:
    """The store of ``__consumer_offsets``; a batch too large for the log is
    answered INVALID_COMMIT_OFFSET_SIZE, as Kafka's GroupMetadataManager does."""
    return CoordinatorStore(topic, wall_clock, oversized=ErrorCode.INVALID_COMMIT_OFFSET_SIZE)


@dataclass(slots=True)
class LoadedGroup:
    """What the log says about one group after replay."""

    metadata: rec.GroupMetadataValue | None = None
    offsets: dict[TopicPartition, rec.OffsetCommitValue] = field(default_factory=dict)
    # KIP-848 records: key -> last value (tombstoned keys left out).
    consumer: dict[bytes, bytes] = field(default_factory=dict)


def group_record(group: Group) -> Record:
    """The record of the group's generation, leader, members and assignments."""
    protocol = group.protocol_name
    value = rec.GroupMetadataValue(
        group.protocol_type or "", group.generation_id, protocol, group.leader_id,
        group.state_timestamp_ms,
        [rec.MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          m.rebalance_timeout_ms, m.session_timeout_ms,
                          m.metadata_for(protocol) if protocol else b"", m.assignment)
         for m in group.members.values()])
    key = rec.encode_group_metadata_key(rec.GroupMetadataKey(group.group_id))
    return key, rec.encode_group_metadata_value(value)


def load_groups(store: CoordinatorStore, partition: int
                ) -> tuple[dict[str, Group], dict[str, dict[bytes, bytes]]]:
    """Rebuild the groups of one partition from the log: Stable if they have
    members, else Empty (as Kafka); and the KIP-848 records of each
    consumer group, by group id."""
    now = store.wall_clock()
    groups = {}
    consumer = {}
    for group_id, loaded in replay(store, partition).items():
        if loaded.consumer:
            consumer[group_id] = loaded.consumer
        if loaded.metadata is None and not loaded.offsets:
            continue
        group = _group_from(group_id, loaded.metadata, now)
        group.offsets = loaded.offsets
        groups[group_id] = group
    return groups, consumer


def replay(store: CoordinatorStore, partition: int) -> dict[str, LoadedGroup]:
    """Read one partition of the topic and fold it into per-group state."""
    # Each key's state is its last record's alone, so the fold keeps the raw
    # last value per raw key and decodes once per key, not once per record
    # (a replay of an uncleaned tail reads many commits of the same keys).
    last: dict[bytes, bytes | None] = {}
    count = 0
    for key, value in store.records(partition):
        count += 1
        last[key] = value
    groups: dict[str, LoadedGroup] = {}
    for key, value in last.items():
        try:
            if cr.record_type(key) in cr.RECORD_TYPES:
                _, group_id, _ = cr.decode_key(key)
                if value is not None:
                    groups.setdefault(group_id, LoadedGroup()).consumer[key] = value
                continue
            _apply(groups, rec.decode_key(key), value)
        except rec.RecordFormatError as exc:
            log.warning("skipping unreadable offsets record", partition=partition,
                        error=str(exc))
    for group_id in [g for g, s in groups.items()
                     if s.metadata is None and not s.offsets and not s.consumer]:
        del groups[group_id]
    if count:
        log.info("group state loaded", partition=partition, records=count,
                 groups=len(groups))
    return groups


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
