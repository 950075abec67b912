"""ListGroups, DescribeGroups and DeleteGroups over the coordinator's groups.

Kafka's answers: Dead groups are not listed; describing an unknown group
answers state "Dead" with no error (DescribeGroups v0-v5); members carry
their metadata and assignment only while the group is Stable; only an
Empty group can be deleted (NON_EMPTY_GROUP otherwise).

KIP-848 consumer groups are listed with type "consumer" and their own
states (Empty, Assigning, Reconciling, Stable), in place of the classic
``Group`` that keeps their offsets; DescribeGroups answers them as it
answers an unknown group ("Dead"), as Kafka's classic describe does for a
group of another type (ConsumerGroupDescribe is their describe).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from broker.coordinator.consumer_group import CONSUMER_GROUP_TYPE, ConsumerGroup
from broker.coordinator.group import CLASSIC_GROUP_TYPE, CONSUMER_PROTOCOL_TYPE, Group, GroupState
from broker.coordinator.offsets import OffsetManager
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[MemberDescription] = field(default_factory=list)


def list_groups(groups: dict[str, Group], states: list[str] | None,
                types: list[str] | None,
                consumer_groups: Mapping[str, ConsumerGroup] | None = None) -> list[GroupListing]:
    """Groups that are not Dead, filtered by state and type names (case-insensitive)."""
    consumer_groups = consumer_groups or {}
    wanted_states = {s.lower() for s in states} if states else None
    wanted_types = {t.lower() for t in types} if types else None
    listed = []
    if wanted_types is None or CLASSIC_GROUP_TYPE in wanted_types:
        listed += [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
                   for g in groups.values()
                   if not g.is_in(GroupState.DEAD) and g.group_id not in consumer_groups]
    if wanted_types is None or CONSUMER_GROUP_TYPE in wanted_types:
        listed += [GroupListing(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value,
                                CONSUMER_GROUP_TYPE) for g in consumer_groups.values()]
    return [g for g in listed if wanted_states is None or g.state.lower() in wanted_states]


def describe_group(groups: dict[str, Group], group_id: str,
                   consumer_groups: Mapping[str, ConsumerGroup] | None = None
                   ) -> GroupDescription:
    group = groups.get(group_id)
    if group is None or group_id in (consumer_groups or {}):
        return GroupDescription(ErrorCode.NONE, group_id, GroupState.DEAD.value)
    protocol = group.protocol_name if group.is_in(GroupState.STABLE) else None
    members = [
        MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          m.metadata_for(protocol) if protocol else b"",
                          m.assignment if protocol else b"")
        for m in group.members.values()]
    return GroupDescription(ErrorCode.NONE, group_id, group.state.value, group.protocol_type or "",
                            protocol or "", members)


def delete_groups(groups: dict[str, Group], offsets: OffsetManager,
                  group_ids: list[str],
                  consumer_groups: dict[str, ConsumerGroup] | None = None,
                  delete_consumer_records: Callable[[str], ErrorCode] = lambda g: ErrorCode.NONE
                  ) -> list[ErrorCode]:
    """Delete Empty groups with their offsets (and an empty consumer group's
    records, with ``delete_consumer_records``); one error code per id."""
    consumer_groups = consumer_groups if consumer_groups is not None else {}
    out = []
    for group_id in group_ids:
        group = groups.get(group_id)
        consumer_group = consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                out.append(ErrorCode.NON_EMPTY_GROUP)
                continue
            error = delete_consumer_records(group_id)
            if error is not ErrorCode.NONE:
                out.append(error)
                continue
            del consumer_groups[group_id]
            if group is None:
                log.info("group deleted", group=group_id)
                out.append(ErrorCode.NONE)
                continue
        if group is None or group.is_in(GroupState.DEAD):
            out.append(ErrorCode.GROUP_ID_NOT_FOUND)
        elif not group.is_in(GroupState.EMPTY):
            out.append(ErrorCode.NON_EMPTY_GROUP)
        else:
            error = offsets.delete_group(group)
            if error is ErrorCode.NONE:
                log.info("group deleted", group=group_id)
            out.append(error)
    return out
