"""The classic group protocol's requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Theory of operation: each request is checked against the group as Kafka's
classic GroupCoordinator checks it (group id, session timeout bounds,
protocol compatibility, generation, KIP-345 static members fenced by
group.instance.id, KIP-394 member ids handed out before the first join) and
then turns into a membership change for ``rebalance.Rebalancer``, which runs
the rebalance it causes. A JoinGroup or SyncGroup that has to wait for other
members comes back as a ``Reply``; whoever completes the rebalance fills it.

This module answers requests and owns no timers or durability: the
coordinator awaits the ``Reply`` and the replication of what was written,
and a second group protocol (its own requests and its own way of assigning)
can sit beside this one on the same coordinator.

Concurrency: every method runs on the event loop without awaiting, so a
request sees and leaves a group consistent.

Error handling: client mistakes are answered as ``ErrorCode`` values.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import structlog
import trio

from broker.coordinator.group import (
    Group,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    Reply,
    SyncResult,
)
from broker.coordinator.rebalance import Rebalancer, answer_parked, join_result
from config import BrokerConfig
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

S = GroupState
E = ErrorCode


class ClassicGroups:
    def __init__(self, config: BrokerConfig, groups: dict[str, Group], rebalance: Rebalancer,
                 wall_clock: Callable[[], int]) -> None:
        """Args:
            groups: the coordinator's groups, shared with it; a JoinGroup for
                an unknown group id creates the group here.
        """
        self.config = config
        self.groups = groups
        self.rebalance = rebalance
        self.wall_clock = wall_clock

    # -- JoinGroup -------------------------------------------------------------

    def join(self, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        """JoinGroup: the answer now, or a ``Reply`` filled when the join phase ends."""
        if not req.group_id:
            return JoinResult(E.INVALID_GROUP_ID, req.member_id)
        if not (self.config["group.min.session.timeout.ms"] <= req.session_timeout_ms
                <= self.config["group.max.session.timeout.ms"]):
            return JoinResult(E.INVALID_SESSION_TIMEOUT, req.member_id)
        group = self.groups.get(req.group_id)
        if group is None and req.member_id:
            return JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id)
        names = [name for name, _ in req.protocols]
        if group is None:
            if not req.protocol_type or not names:
                return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
            group = self.groups[req.group_id] = Group(req.group_id, S.EMPTY, self.wall_clock())
        if group.is_in(S.DEAD):
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not group.supports_protocols(req.protocol_type, names):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if req.member_id:
            return self._join_existing(group, req)
        return self._join_new(group, req)

    def _join_new(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        member_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None:
                return self._rejoin_static(group, old_id, member_id, req)
        elif req.require_known_member_id:
            self.rebalance.add_pending(group, member_id, req.session_timeout_ms)
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        return self._add_and_rebalance(group, member_id, req)

    def _join_existing(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        member_id = req.member_id
        if member_id in group.pending_members:
            self.rebalance.cancel_pending(group, member_id)
            return self._add_and_rebalance(group, member_id, req)
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not E.NONE:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            reply = self._update_member(member, req)
            self.rebalance.check_join_complete(group)
            return reply
        if group.is_in(S.COMPLETING_REBALANCE) and member.same_protocols(req.protocols):
            # It missed the JoinGroup response of this generation: send it again.
            return join_result(group, member)
        if group.is_in(S.STABLE) and not group.is_leader(member_id) \
                and member.same_protocols(req.protocols):
            return join_result(group, member)
        if group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            reply = self._update_member(member, req)
            self.rebalance.prepare(group, f"member {member_id} rejoined with new metadata"
                                   if not group.is_leader(member_id) else "leader rejoined")
            return reply
        return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)

    def _add_and_rebalance(self, group: Group, member_id: str,
                           req: JoinRequest) -> Reply[JoinResult]:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                        list(req.protocols))
        reply: Reply[JoinResult] = Reply()
        member.join_reply = reply
        group.add(member)
        self.rebalance.arm_session(group, member)
        if group.is_in(S.PREPARING_REBALANCE):
            self.rebalance.check_join_complete(group)
        else:
            self.rebalance.prepare(group, f"member {member_id} joined")
        return reply

    def _update_member(self, member: Member, req: JoinRequest) -> Reply[JoinResult]:
        if member.join_reply is not None:
            # An earlier JoinGroup of this member is still parked; its client gave up on it.
            member.join_reply.set(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        reply: Reply[JoinResult] = Reply()
        member.join_reply = reply
        return reply

    def _rejoin_static(self, group: Group, old_id: str, new_id: str,
                       req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        """A known group.instance.id joins with no member id: fence the old incarnation."""
        old = group.members[old_id]
        answer_parked(old, E.FENCED_INSTANCE_ID)
        self.rebalance.cancel_session(group, old_id)
        member = group.replace_static_member(old_id, new_id)
        self.rebalance.arm_session(group, member)
        log.info("static member rejoined", group=group.group_id, instance=req.group_instance_id,
                 old_member=old_id, member=new_id)
        if group.is_in(S.PREPARING_REBALANCE):
            reply = self._update_member(member, req)
            self.rebalance.check_join_complete(group)
            return reply
        if group.is_in(S.COMPLETING_REBALANCE):
            reply = self._update_member(member, req)
            self.rebalance.prepare(group, "static member rejoined during CompletingRebalance")
            return reply
        protocol = group.protocol_name
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        leader = group.is_leader(new_id)
        if group.select_protocol() != protocol or (leader and not req.supports_skip_assignment):
            reply = self._update_member(member, req)
            self.rebalance.prepare(group, "static member rejoined")
            return reply
        error = self.rebalance.store_group(group)
        if error is not E.NONE:
            return JoinResult(error, new_id)
        result = join_result(group, member)
        result.skip_assignment = leader
        return result

    # -- SyncGroup -------------------------------------------------------------

    def sync(self, group_id: str, generation_id: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes]
             ) -> SyncResult | Reply[SyncResult]:
        """SyncGroup: the answer now, or a ``Reply`` filled once the leader's assignments land."""
        if not group_id:
            return SyncResult(E.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(member_id, group_instance_id)
        if error is not E.NONE:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(S.EMPTY):
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        member.touch(trio.current_time())
        self.rebalance.synced(group, member_id)
        if group.is_in(S.STABLE):
            return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(E.REBALANCE_IN_PROGRESS))
        reply: Reply[SyncResult] = Reply()
        member.sync_reply = reply
        if group.is_leader(member_id):
            self.rebalance.apply_assignments(group, assignments)
        return reply

    # -- Heartbeat and LeaveGroup ----------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        if not group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error is not E.NONE:
            return error
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            member.touch(trio.current_time())
            return E.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        member.touch(trio.current_time())
        return E.NONE

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]
              ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members, by member id or group.instance.id (LeaveGroup v3+ batches).

        Returns:
            The group-level error and one error per leaving member.
        """
        if not group_id:
            return E.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        errors = [self._leave_one(group, member_id, instance_id)
                  for member_id, instance_id in leaving]
        if E.NONE in errors:
            self.rebalance.members_left(group, "members left the group")
        return E.NONE, errors

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return E.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.rebalance.cancel_pending(group, member_id)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("member left", group=group.group_id, member=member_id)
        self.rebalance.remove(group, member)
        return E.NONE
