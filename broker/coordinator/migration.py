"""Online migration between the classic and the consumer group protocols
(KIP-848): when a group may change protocol, and what it becomes.

Theory of operation
-------------------
A rolling upgrade restarts the members of a classic group one by one with
``group.protocol=consumer``. The first ConsumerGroupHeartbeat to the
non-empty classic group converts it (``to_consumer_group``): every classic
member becomes a member of the consumer group that keeps its last
assignment as both its current and its target assignment, at an epoch
equal to the classic generation, with the subscription decoded from its
ConsumerProtocol metadata and its JoinGroup protocols kept
(``ClassicMeta``) so that it goes on being served through JoinGroup,
SyncGroup and Heartbeat. The joining member then bumps the group epoch as
any new member does, and the classic members are asked to rejoin to give
up what the new target takes from them.

The way back: when the last member of the consumer protocol leaves (or is
fenced) and classic members remain, the group becomes a classic group
again (``to_classic_group``): Stable at a generation equal to the group
epoch, each member's assignment its target assignment encoded in the
ConsumerProtocol version of its own subscription, and the coordinator then
starts a rebalance, so the classic members agree on an assignment of their
own.

``group.consumer.migration.policy`` (Kafka's ConsumerGroupMigrationPolicy)
says which of the two conversions of a non-empty group is allowed; empty
groups change type freely whatever the policy. Everything here is pure:
the coordinator applies the results (records, timers, parked requests).

Error handling: ConsumerProtocol bytes that cannot be decoded raise
``ValueError``; the coordinator then refuses the conversion as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from broker.coordinator.assignors import Partitions, TopicMetadata
from broker.coordinator.consumer_group import ClassicMeta, ConsumerGroup, ConsumerMember
from broker.coordinator.group import CONSUMER_PROTOCOL_TYPE, Group, GroupState, Member

# By-name partitions, as the ConsumerProtocol carries them.
NamedPartitions = dict[str, set[int]]


def upgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "upgrade")


def downgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "downgrade")


@dataclass(slots=True)
class Subscription:
    """A decoded ConsumerProtocolSubscription."""
    topics: list[str]
    owned: NamedPartitions
    rack_id: str | None
    version: int


def decode_subscription(metadata: bytes) -> Subscription:
    """Raises:
        ValueError: not a ConsumerProtocolSubscription.
    """
    try:
        sub = ConsumerProtocolSubscription.decode(metadata)
    except Exception as exc:  # kafka-python raises struct.error, ValueError, ...
        raise ValueError(f"malformed consumer subscription: {exc!r}") from None
    version = struct.unpack_from(">h", metadata)[0]
    owned: NamedPartitions = {}
    for tp in sub.owned_partitions or []:
        owned.setdefault(tp.topic, set()).update(tp.partitions)
    rack = sub.rack_id if version >= 3 else None
    return Subscription(list(sub.topics or []), owned, rack or None, version)


def decode_assignment(data: bytes) -> NamedPartitions:
    """An empty value (no assignment yet) is an empty assignment.

    Raises:
        ValueError: not a ConsumerProtocolAssignment.
    """
    if not data:
        return {}
    try:
        decoded = ConsumerProtocolAssignment.decode(data)
    except Exception as exc:  # as above
        raise ValueError(f"malformed consumer assignment: {exc!r}") from None
    out: NamedPartitions = {}
    for tp in decoded.assigned_partitions or []:
        out.setdefault(tp.topic, set()).update(tp.partitions)
    return out


def encode_assignment(parts: NamedPartitions, version: int) -> bytes:
    """A ConsumerProtocolAssignment in ``version`` (that of the member's
    subscription, capped at what the codec knows), as Kafka answers."""
    version = max(0, min(version, ConsumerProtocolAssignment.max_version))
    tp = ConsumerProtocolAssignment.TopicPartition
    assignment = ConsumerProtocolAssignment(
        version=version, user_data=None,
        assigned_partitions=[tp(topic=t, partitions=sorted(ps))
                             for t, ps in sorted(parts.items()) if ps])
    return bytes(assignment.encode(version=version))


def by_name(parts: Partitions, names: dict[uuid.UUID, str]) -> NamedPartitions:
    """Partitions by topic id -> by name (topics without a known name dropped)."""
    return {names[t]: set(ps) for t, ps in parts.items() if t in names and ps}


def by_id(parts: NamedPartitions, lookup: Callable[[str], TopicMetadata | None]) -> Partitions:
    """Partitions by name -> by topic id (topics that do not exist dropped)."""
    out: Partitions = {}
    for name, ps in parts.items():
        meta = lookup(name)
        if meta is not None and ps:
            out[meta.topic_id] = {p for p in ps if p < meta.partitions}
    return {t: ps for t, ps in out.items() if ps}


# -- classic -> consumer -------------------------------------------------------------


def can_upgrade(policy: str, group: Group, max_size: int) -> bool:
    """Kafka's validateOnlineUpgrade: the policy allows it, the group runs the
    consumer embedded protocol and is not bigger than a consumer group may be."""
    return (upgrade_enabled(policy) and group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and len(group.members) <= max_size)


def to_consumer_group(group: Group, lookup: Callable[[str], TopicMetadata | None]
                      ) -> ConsumerGroup:
    """The consumer group a non-empty classic group becomes (see above).

    Raises:
        ValueError: a member's subscription or assignment cannot be decoded.
    """
    converted = ConsumerGroup(group.group_id)
    converted.group_epoch = converted.assignment_epoch = group.generation_id
    for m in group.members.values():
        metadata = m.metadata_for(group.protocol_name) if group.protocol_name else \
            m.protocols[0][1]
        sub = decode_subscription(metadata)
        assigned = by_id(decode_assignment(m.assignment), lookup)
        member = ConsumerMember(m.member_id, m.group_instance_id, sub.rack_id, m.client_id,
                                m.client_host, m.rebalance_timeout_ms, list(sub.topics), None,
                                member_epoch=group.generation_id,
                                previous_member_epoch=group.generation_id,
                                assigned=assigned,
                                classic=ClassicMeta(m.session_timeout_ms, list(m.protocols)))
        converted.target[m.member_id] = {t: set(ps) for t, ps in assigned.items()}
        converted.add(member)
        converted.hold(member)
    return converted


# -- consumer -> classic -------------------------------------------------------------


def can_downgrade(policy: str, group: ConsumerGroup, leaving_id: str) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember: ``leaving_id`` is the
    last consumer-protocol member, someone stays, and the policy allows it."""
    return (group.all_classic_except(leaving_id) and len(group.members) > 1
            and downgrade_enabled(policy))


def to_classic_group(group: ConsumerGroup, leaving_id: str, now_ms: int) -> Group:
    """The Stable classic group the remaining (classic) members form.

    Raises:
        ValueError: a member's subscription cannot be decoded.
    """
    classic = Group(group.group_id, GroupState.STABLE, now_ms)
    classic.generation_id = group.group_epoch
    for m in group.members.values():
        if m.member_id == leaving_id or m.classic is None:
            continue
        classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                           m.rebalance_timeout_ms, m.classic.session_timeout_ms,
                           CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols)))
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    classic.protocol_name = classic.select_protocol()
    names = group.topic_names()
    for member in classic.members.values():
        version = decode_subscription(member.metadata_for(classic.protocol_name)).version
        member.assignment = encode_assignment(
            by_name(group.target.get(member.member_id, {}), names), version)
    return classic
