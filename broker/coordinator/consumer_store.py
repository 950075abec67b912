"""A KIP-848 consumer group in ``__consumer_offsets``: the records that say
what it is, written as it changes, and the group rebuilt from them.

Theory of operation: after a heartbeat or a timer changed a group,
``ConsumerGroupRecords.sync`` renders the records of the group itself
(epoch, subscribed topics' metadata, assignment epoch) and of the members
the change touched, compares them with what this broker last wrote, and
appends only what differs: new or changed values, and tombstones for a
member that left. Rendering a member is skipped unless the change touched
it, so a heartbeat costs its own member's records, and only a new target
assignment costs every member's.

The records go in the order Kafka writes them (a member's subscription,
the group's topics, the group epoch, the target assignment, then current
assignments; a leaving member's current assignment, target and
subscription tombstoned in that order), so Kafka's own replay would accept
them.

``rebuild`` turns the last record of each key of one group back into a
``ConsumerGroup`` (members, target assignment, epochs and who holds which
partition), as the group's new coordinator does when it loads the
partition: nothing a member was given is lost by a coordinator move.

Error handling: an append error is returned to the caller (the request
answers it); a record that cannot be read is logged and skipped.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.coordinator import consumer_records as cr
from broker.coordinator.assignors import Partitions, TopicMetadata
from broker.coordinator.consumer_group import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from broker.coordinator.records import RecordFormatError
from broker.coordinator_store import CoordinatorStore, Record
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

# MemberState <-> the State byte of ConsumerGroupCurrentMemberAssignmentValue.
STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
               MemberState.UNRELEASED_PARTITIONS: 2}
STATES = {code: state for state, code in STATE_CODES.items()}
# Member records in the order Kafka writes them; tombstones go the same way.
_MEMBER_ORDER = (cr.MEMBER_METADATA, cr.TARGET_ASSIGNMENT_MEMBER, cr.CURRENT_MEMBER_ASSIGNMENT)
_TOMBSTONE_ORDER = (cr.CURRENT_MEMBER_ASSIGNMENT, cr.TARGET_ASSIGNMENT_MEMBER, cr.MEMBER_METADATA)


def _partitions(parts: Partitions) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)}
            for t, ps in sorted(parts.items(), key=lambda i: str(i[0])) if ps]


def _member_values(group: ConsumerGroup, m: ConsumerMember) -> dict[int, bytes]:
    return {
        cr.MEMBER_METADATA: cr.encode_value(
            cr.MEMBER_METADATA, instance_id=m.instance_id, rack_id=m.rack_id,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed), subscribed_topic_regex=m.regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
            classic_member_metadata=None if m.classic is None else {
                "session_timeout_ms": m.classic.session_timeout_ms,
                "supported_protocols": [{"name": n, "metadata": md}
                                        for n, md in m.classic.protocols]}),
        cr.TARGET_ASSIGNMENT_MEMBER: cr.encode_value(
            cr.TARGET_ASSIGNMENT_MEMBER,
            topic_partitions=_partitions(group.target.get(m.member_id, {}))),
        cr.CURRENT_MEMBER_ASSIGNMENT: cr.encode_value(
            cr.CURRENT_MEMBER_ASSIGNMENT, member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch, state=STATE_CODES[m.state],
            assigned_partitions=_partitions(m.assigned),
            partitions_pending_revocation=_partitions(m.pending_revocation)),
    }


def _group_values(group: ConsumerGroup) -> dict[int, bytes]:
    topics = [{"topic_id": meta.topic_id, "topic_name": name,
               "num_partitions": meta.partitions, "partition_metadata": []}
              for name, meta in sorted(group.subscription_metadata.items())]
    return {
        cr.GROUP_METADATA: cr.encode_value(cr.GROUP_METADATA, epoch=group.group_epoch),
        cr.PARTITION_METADATA: cr.encode_value(cr.PARTITION_METADATA, topics=topics),
        cr.TARGET_ASSIGNMENT_METADATA: cr.encode_value(
            cr.TARGET_ASSIGNMENT_METADATA, assignment_epoch=group.assignment_epoch),
    }


class ConsumerGroupRecords:
    """What this broker last wrote for each consumer group, and the writes that follow."""

    def __init__(self, store: CoordinatorStore) -> None:
        self.store = store
        # group id -> key -> value last written (or replayed) for it.
        self.written: dict[str, dict[bytes, bytes]] = {}

    def sync(self, group: ConsumerGroup, members: set[str] | None) -> ErrorCode:
        """Append what changed in ``group`` since the last sync: the group's
        own records and those of ``members`` (None: every member)."""
        gid = group.group_id
        old = self.written.setdefault(gid, {})
        touched = set(group.members) if members is None else members
        if members is None:
            touched |= {cr.decode_key(k)[2] or "" for k in old
                        if cr.record_type(k) in cr.MEMBER_TYPES}
        out: list[Record] = []
        for member_id in sorted(touched):
            if member_id not in group.members:
                out += [(key, None) for kind in _TOMBSTONE_ORDER
                        if (key := cr.encode_key(kind, gid, member_id)) in old]
        group_values = _group_values(group)
        member_values = {mid: _member_values(group, group.members[mid])
                         for mid in sorted(touched) if mid in group.members}
        order = [(cr.MEMBER_METADATA, None), (cr.PARTITION_METADATA, gid),
                 (cr.GROUP_METADATA, gid), (cr.TARGET_ASSIGNMENT_MEMBER, None),
                 (cr.TARGET_ASSIGNMENT_METADATA, gid), (cr.CURRENT_MEMBER_ASSIGNMENT, None)]
        for kind, group_level in order:
            if group_level is not None:
                out.append((cr.encode_key(kind, gid), group_values[kind]))
                continue
            out += [(cr.encode_key(kind, gid, mid), values[kind])
                    for mid, values in member_values.items()]
        out = [(k, v) for k, v in out if v is None and k in old or v is not None and
               old.get(k) != v]
        if not out:
            return ErrorCode.NONE
        error = self.store.append(gid, out)
        if error is ErrorCode.NONE:
            for key, value in out:
                if value is None:
                    old.pop(key, None)
                else:
                    old[key] = value
        return error

    def delete(self, group_id: str) -> ErrorCode:
        """Tombstone every record of a group (DeleteGroups of an empty group)."""
        old = self.written.pop(group_id, {})
        order = {cr.CURRENT_MEMBER_ASSIGNMENT: 0, cr.TARGET_ASSIGNMENT_MEMBER: 1,
                 cr.MEMBER_METADATA: 2, cr.TARGET_ASSIGNMENT_METADATA: 3,
                 cr.PARTITION_METADATA: 4, cr.GROUP_METADATA: 5}
        keys = sorted(old, key=lambda k: order[cr.record_type(k)])
        return self.store.append(group_id, [(k, None) for k in keys]) if keys else ErrorCode.NONE

    def forget(self, group_id: str) -> None:
        """The group moved to another coordinator."""
        self.written.pop(group_id, None)

    def rebuild(self, group_id: str, records: dict[bytes, bytes]) -> ConsumerGroup | None:
        """The group the last record of each key describes; None if it has none
        of its own records (only members' leftovers, or nothing)."""
        group = ConsumerGroup(group_id)
        metadata: dict[str, Any] = {}
        assignments: dict[str, Any] = {}
        found_group = False
        for key, value in records.items():
            try:
                kind, _, member_id = cr.decode_key(key)
                decoded = cr.decode_value(kind, value)
            except RecordFormatError as exc:
                log.warning("skipping unreadable consumer group record", group=group_id,
                            error=str(exc))
                continue
            if kind == cr.GROUP_METADATA:
                group.group_epoch, found_group = decoded.epoch, True
            elif kind == cr.PARTITION_METADATA:
                group.subscription_metadata = {
                    t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions)
                    for t in decoded.topics}
            elif kind == cr.TARGET_ASSIGNMENT_METADATA:
                group.assignment_epoch = decoded.assignment_epoch
            elif kind == cr.TARGET_ASSIGNMENT_MEMBER and member_id is not None:
                group.target[member_id] = _parts(decoded.topic_partitions)
            elif kind == cr.MEMBER_METADATA and member_id is not None:
                metadata[member_id] = decoded
            elif kind == cr.CURRENT_MEMBER_ASSIGNMENT and member_id is not None:
                assignments[member_id] = decoded
        if not found_group:
            return None
        for member_id, meta in metadata.items():
            member = ConsumerMember(member_id, meta.instance_id, meta.rack_id, meta.client_id,
                                    meta.client_host, meta.rebalance_timeout_ms,
                                    list(meta.subscribed_topic_names), meta.server_assignor,
                                    regex=meta.subscribed_topic_regex)
            classic = meta.classic_member_metadata
            if classic is not None:
                member.classic = ClassicMeta(classic.session_timeout_ms,
                                             [(p.name, bytes(p.metadata))
                                              for p in classic.supported_protocols])
            current = assignments.get(member_id)
            if current is not None:
                member.state = STATES.get(current.state, MemberState.STABLE)
                member.member_epoch = current.member_epoch
                member.previous_member_epoch = current.previous_member_epoch
                member.assigned = _parts(current.assigned_partitions)
                member.pending_revocation = _parts(current.partitions_pending_revocation)
            group.add(member)
            group.hold(member)
        group.target = {m: t for m, t in group.target.items() if m in group.members}
        self.written[group_id] = dict(records)
        return group


def _parts(items: Any) -> Partitions:
    out: Partitions = {}
    for item in items:
        out.setdefault(item.topic_id, set()).update(item.partitions)
    return out
