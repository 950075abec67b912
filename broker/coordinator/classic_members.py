"""Members of the classic protocol inside a KIP-848 consumer group: their
JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Theory of operation: during a rolling upgrade (or downgrade) a consumer
group holds members of both protocols. A classic member is a
``ConsumerMember`` with ``classic`` set (its session timeout and JoinGroup
protocols); the coordinator assigns it like any other member, and the
classic requests map onto the consumer group's rules, as Kafka 4.x does:

* JoinGroup updates the member (subscription and owned partitions decoded
  from its ConsumerProtocol metadata), bumps the group epoch if its
  subscription changed, recomputes the target assignment if needed and
  moves the member one step towards it. It is answered at once: the
  generation is the member epoch, the protocol the member's first one, and
  no leader (the coordinator assigns; nobody runs a client assignor).
* SyncGroup hands over the member's current assignment, encoded in the
  ConsumerProtocol version of its subscription; REBALANCE_IN_PROGRESS if
  the group epoch moved past the member (it rejoins first).
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the
  group epoch moved, it has partitions to give up (a classic member
  reports what it let go by rejoining), or a partition it waited for is
  free now.
* LeaveGroup removes the member like a ConsumerGroupHeartbeat leave.
* A classic static member that takes over the group.instance.id of the
  last consumer-protocol member turns the group back into a classic group
  at once, keeping that member's assignment (no rebalance), as Kafka does.

Timers (on top of the session timer, which uses the member's classic
session timeout): after a JoinGroup the member must send SyncGroup within
its rebalance timeout, and once asked to rejoin it must do so within its
rebalance timeout; either one missed fences it.

Concurrency: every method runs on the event loop without awaiting.

Error handling: client mistakes are answered as ``ErrorCode`` values.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import structlog
import trio

from broker.coordinator import migration
from broker.coordinator.consumer import ConsumerGroups, TopicView
from broker.coordinator.consumer_group import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from broker.coordinator.group import CONSUMER_PROTOCOL_TYPE, JoinRequest, JoinResult, SyncResult
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

E = ErrorCode


class ClassicMembers:
    def __init__(self, consumer: ConsumerGroups,
                 downgrade: Callable[[ConsumerGroup], ErrorCode | None]) -> None:
        """Args:
            downgrade: a classic static member just replaced the last
                consumer-protocol member: None, or the error of turning the
                group into a classic group (Kafka's downgrade on replacement).
        """
        self.consumer = consumer
        self.timers = consumer.timers
        self.downgrade = downgrade

    # -- JoinGroup -------------------------------------------------------------

    def join(self, group: ConsumerGroup, req: JoinRequest, topics: TopicView) -> JoinResult:
        member_id = req.member_id or str(uuid.uuid4())
        max_size = self.consumer.config["group.consumer.max.size"]
        if len(group.members) >= max_size and member_id not in group.members:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, req.member_id)
        if not group.supports_classic(req.protocol_type, [n for n, _ in req.protocols]):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        try:
            sub = migration.decode_subscription(req.protocols[0][1])
        except ValueError:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        found = self._member(group, member_id, req)
        if isinstance(found, ErrorCode):
            return JoinResult(found, req.member_id)
        member, bump, replaced_consumer = found
        member.rack_id = sub.rack_id or member.rack_id
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.classic = ClassicMeta(req.session_timeout_ms, list(req.protocols))
        if sorted(sub.topics) != sorted(member.subscribed):
            member.subscribed = list(sub.topics)
            bump = True
        metadata = self.consumer.subscription_metadata(group, topics)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
            log.info("consumer group epoch bumped", group=group.group_id, epoch=group.group_epoch)
        everyone = group.group_epoch > group.assignment_epoch
        if everyone:
            self.consumer.assign(group)
        self.consumer.reconcile_member(group, member, migration.by_id(sub.owned, topics.lookup))
        answer = JoinResult(E.NONE, member.member_id, member.member_epoch,
                            CONSUMER_PROTOCOL_TYPE, req.protocols[0][0], "", [])
        downgraded = self.downgrade(group) if replaced_consumer else None
        if downgraded is not None:
            return answer if downgraded is E.NONE else JoinResult(downgraded, member.member_id)
        error = self.consumer.on_change(group, None if everyone else {member.member_id})
        if error is not E.NONE:
            return JoinResult(error, member.member_id)
        key = (group.group_id, member.member_id)
        self.timers.cancel(("consumer-join", *key))
        self.consumer.arm_session(group, member)
        self.timers.schedule(("consumer-sync", *key),
                             trio.current_time() + req.rebalance_timeout_ms / 1000,
                             lambda: self._expired(group, member, "did not sync in time"))
        return answer

    def _member(self, group: ConsumerGroup, member_id: str, req: JoinRequest
                ) -> tuple[ConsumerMember, bool, bool] | ErrorCode:
        """The joining member (created if new), whether it is new, and whether
        it replaced a consumer-protocol static member; or the error of an
        unknown or fenced static member or of a member of the other protocol."""
        instance = req.group_instance_id
        if instance is not None:
            known = group.static_members.get(instance)
            if known is None and req.member_id:
                return E.UNKNOWN_MEMBER_ID
            if known is not None and known != member_id:
                if req.member_id:
                    return E.FENCED_INSTANCE_ID
                self.consumer.cancel_timers(group, known)
                log.info("static member rejoined", group=group.group_id, instance=instance,
                         old_member=known, member=member_id)
                replaced_consumer = group.members[known].classic is None
                return group.replace_static(known, member_id), False, replaced_consumer
        member = group.members.get(member_id)
        if member is not None:
            return (member, False, False) if member.classic is not None else E.UNKNOWN_MEMBER_ID
        member = ConsumerMember(member_id, instance, None, req.client_id, req.client_host,
                                req.rebalance_timeout_ms, [], None)
        group.add(member)
        log.info("classic member joined consumer group", group=group.group_id, member=member_id)
        return member, True, False

    # -- SyncGroup and Heartbeat -----------------------------------------------

    def sync(self, group: ConsumerGroup, generation_id: int, member_id: str,
             instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None) -> SyncResult:
        member = self._validate(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        if generation_id != member.member_epoch:
            return SyncResult(E.ILLEGAL_GENERATION)
        assert member.classic is not None
        name, metadata = member.classic.protocols[0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name != name):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and \
                member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._ask_rejoin(group, member)
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self.timers.cancel(("consumer-sync", group.group_id, member.member_id))
        self.consumer.arm_session(group, member)
        try:
            version = migration.decode_subscription(metadata).version
        except ValueError:
            version = 0
        assignment = migration.encode_assignment(
            migration.by_name(member.assigned, group.topic_names()), version)
        return SyncResult(E.NONE, CONSUMER_PROTOCOL_TYPE, name, assignment)

    def heartbeat(self, group: ConsumerGroup, generation_id: int, member_id: str,
                  instance_id: str | None) -> ErrorCode:
        member = self._validate(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member
        if generation_id != member.member_epoch:
            return E.ILLEGAL_GENERATION
        self.consumer.arm_session(group, member)
        if member.member_epoch < group.group_epoch \
                or member.state is MemberState.UNREVOKED_PARTITIONS \
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased(member)):
            self._ask_rejoin(group, member)
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def _validate(self, group: ConsumerGroup, member_id: str,
                  instance_id: str | None) -> ConsumerMember | ErrorCode:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            if known != member_id:
                return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return E.UNKNOWN_MEMBER_ID
        return member

    def _ask_rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """The member is told to rejoin: it must within its rebalance timeout."""
        key = ("consumer-join", group.group_id, member.member_id)
        if not self.timers.scheduled(key):
            self.timers.schedule(key, trio.current_time() + member.rebalance_timeout_ms / 1000,
                                 lambda: self._expired(group, member, "did not rejoin in time"))

    def _expired(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        if self.consumer.consumer_groups.get(group.group_id) is not group or \
                group.members.get(member.member_id) is not member:
            return
        log.info("classic member of consumer group fenced", group=group.group_id,
                 member=member.member_id, reason=why)
        self.consumer.fence(group, member)

    # -- LeaveGroup ------------------------------------------------------------

    def leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
              ) -> list[ErrorCode]:
        """One error per leaving (member id, group.instance.id)."""
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            member = group.members.get(member_id)
            if member is None or member.classic is None:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            log.info("classic member left consumer group", group=group.group_id,
                     member=member_id)
            errors.append(self.consumer.fence(group, member))
        return errors
