"""ListGroups, DescribeGroups and DeleteGroups over the coordinator's groups.

Kafka's answers: Dead groups are not listed; describing an unknown group
answers state "Dead" with no error (DescribeGroups v0-v5); members carry
their metadata and assignment only while the group is Stable; only an
Empty group can be deleted (NON_EMPTY_GROUP otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from broker.coordinator.group import CLASSIC_GROUP_TYPE, Group, GroupState
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
                types: list[str] | None) -> list[GroupListing]:
    """Groups that are not Dead, filtered by state and type names (case-insensitive)."""
    wanted_states = {s.lower() for s in states} if states else None
    if types and CLASSIC_GROUP_TYPE not in {t.lower() for t in types}:
        return []
    return [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in groups.values()
            if not g.is_in(GroupState.DEAD)
            and (wanted_states is None or g.state.value.lower() in wanted_states)]


def describe_group(groups: dict[str, Group], group_id: str) -> GroupDescription:
    group = groups.get(group_id)
    if group is None:
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
                  group_ids: list[str]) -> list[ErrorCode]:
    """Delete Empty groups with their offsets; one error code per id."""
    out = []
    for group_id in group_ids:
        group = groups.get(group_id)
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
