"""The group coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and rebalances.

Theory of operation: a group belongs to the broker leading its partition
of ``__consumer_offsets``. Which partitions this broker owns, loading them
and unloading them is the shared coordinator runtime's job
(``broker.coordinator_runtime``; requests for groups of a partition not
owned here get NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS from
``check``, so clients look the coordinator up again). Loading a partition
replays its groups, offsets and transactional offsets and arms the members'
session timers; unloading drops its groups at once, answering parked
requests NOT_COORDINATOR, and the new leader rebuilds them from its own log.

Within an owned partition, requests run on the event loop and change group
state without awaiting in between, so a request sees and leaves a group
consistent. A JoinGroup or SyncGroup that has to wait for other members
parks on a ``Reply``; whoever completes the rebalance fills every parked
reply. Writes go to the local log at once (the in-memory state always
matches it); before a request that wrote is answered, it waits until the
in-sync replicas have the write (``durable``), as Kafka's acks=all appends
do, and answers the append's error instead if they never do.

Timers are trio tasks in the coordinator's nursery, one per purpose and
key, cancelled when moot: the join deadline (rebalance timeout, or the
initial rebalance delay of an empty group), the sync deadline (members that
never send SyncGroup are dropped after the rebalance timeout), one session
timer per member (re-armed lazily: a heartbeat only moves the member's
deadline) and one per KIP-394 pending member id. They use trio's clock, so
tests drive them with ``trio.testing.MockClock``. Wall-clock time (``wall_clock``)
is only written into records and used for offset retention.

Group metadata (generation, leader, members and assignments) is written to
``__consumer_offsets`` when a generation becomes Stable or the group becomes
Empty, as Kafka does; offsets are handled by ``offsets.OffsetManager``.

Error handling: client mistakes come back as ``ErrorCode`` values in the
results; an exception from a timer callback is our bug and is logged
without stopping the coordinator.
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
from broker.coordinator.offsets import OffsetManager, PartitionCommit
from broker.coordinator.offsets_store import group_record, load_groups, offsets_store
from broker.coordinator.timers import Timers
from broker.coordinator.txn_offsets import TxnOffsets
from broker.coordinator_runtime import CoordinatorRuntime
from config import BrokerConfig
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.internal_topics import InternalTopic
from storage.log.manager import now_ms

log = structlog.get_logger(__name__)

S = GroupState
E = ErrorCode


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, topic: InternalTopic,
                 wall_clock: Callable[[], int] = now_ms, follow_leadership: bool = False) -> None:
        """Args:
            follow_leadership: cluster mode: own only the partitions this broker
                leads, as ``on_leadership`` reports them (else: all, at start).
        """
        self.config = config
        self.wall_clock = wall_clock
        self.groups: dict[str, Group] = {}
        self.store = offsets_store(topic, wall_clock)
        self.offsets = OffsetManager(config, self.groups, self.store, wall_clock)
        self.txn_offsets = TxnOffsets(self.store, self, wall_clock)
        self.timers = Timers()
        self.partitions: CoordinatorRuntime[None] = CoordinatorRuntime(
            "group coordinator", self.store, self._load, self._unload,
            follow_leadership=follow_leadership)

    # -- lifecycle -------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run timers and partition loads until cancelled. On one broker, first
        create ``__consumer_offsets`` and load every partition of it."""
        async with trio.open_nursery() as nursery:
            self.timers.attach(nursery)
            await self.partitions.start(nursery)
            nursery.start_soon(self.offsets.run_expiry)
            task_status.started()
            await trio.sleep_forever()

    def on_leadership(self, tp: TopicPartition, leader: bool) -> None:
        """This broker became (or stopped being) the leader of ``tp``."""
        self.partitions.on_leadership(tp, leader)

    def check(self, group_id: str) -> ErrorCode:
        """NONE if this broker coordinates ``group_id`` now; else what to answer."""
        return self.partitions.check(group_id)

    def _load(self, partition: int) -> None:
        """Replay one partition's groups, offsets and transactional offsets."""
        loaded = load_groups(self.store, partition)
        self.groups.update(loaded)
        for group in loaded.values():
            for member in group.members.values():
                self._arm_session(group, member)
        self.txn_offsets.replay_partition(partition)
        log.info("group coordinator loaded partition", partition=partition, groups=len(loaded))

    def _unload(self, partition: int) -> int:
        """Drop the groups of a partition this broker no longer leads; how many."""
        dropped = 0
        for group_id, group in list(self.groups.items()):
            if self.store.partition_of(group_id) != partition:
                continue
            for member in list(group.members.values()):
                self.timers.cancel(("session", group_id, member.member_id))
                self._answer_parked(member, E.NOT_COORDINATOR)
            for member_id in group.pending_members:
                self.timers.cancel(("pending", group_id, member_id))
            self.timers.cancel(("join", group_id))
            self.timers.cancel(("sync", group_id))
            del self.groups[group_id]
            dropped += 1
        self.txn_offsets.unload(partition)
        return dropped

    def _store_group(self, group: Group) -> ErrorCode:
        """Write the group's generation, leader, members and assignments."""
        return self.store.append(group.group_id, [group_record(group)])

    async def durable(self, group_id: str, error: ErrorCode = E.NONE) -> ErrorCode:
        """``error`` if set; else wait until the group's writes so far are replicated."""
        if error is not E.NONE:
            return error
        return await self.store.wait_durable(group_id, self.config["offsets.commit.timeout.ms"])

    async def commit_offsets(self, group_id: str | None, generation_id: int, member_id: str,
                             group_instance_id: str | None, retention_ms: int,
                             commits: list[PartitionCommit]) -> list[ErrorCode]:
        """OffsetCommit, answered once the in-sync replicas have the offsets."""
        results = self.offsets.commit(group_id, generation_id, member_id, group_instance_id,
                                      retention_ms, commits)
        if group_id is None or E.NONE not in results:
            return results
        error = await self.durable(group_id)
        return [error if r is E.NONE else r for r in results]

    async def txn_offset_commit(self, group_id: str, producer_id: int, epoch: int,
                                generation_id: int, member_id: str,
                                group_instance_id: str | None,
                                commits: list[PartitionCommit]) -> list[ErrorCode]:
        """TxnOffsetCommit: stage the offsets until the transaction's marker lands
        here; answered once the in-sync replicas have them."""
        error = self.txn_offsets.validate_member(group_id, generation_id, member_id,
                                                 group_instance_id)
        if error is not E.NONE:
            return [error] * len(commits)
        results = self.txn_offsets.stage(group_id, producer_id, epoch, commits)
        if E.NONE not in results:
            return results
        error = await self.durable(group_id)
        return [error if r is E.NONE else r for r in results]

    # -- timers ----------------------------------------------------------------

    def _arm_session(self, group: Group, member: Member) -> None:
        member.touch(trio.current_time())
        key = ("session", group.group_id, member.member_id)
        self.timers.schedule(key, member.session_deadline,
                             lambda: self._check_session(group, member))

    def _check_session(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        now = trio.current_time()
        if member.awaiting_join or member.awaiting_sync:
            member.touch(now)  # parked members are alive, as in Kafka
        if now < member.session_deadline:
            key = ("session", group.group_id, member.member_id)
            self.timers.schedule(key, member.session_deadline,
                                 lambda: self._check_session(group, member))
            return
        log.info("member session expired", group=group.group_id, member=member.member_id,
                 session_timeout_ms=member.session_timeout_ms)
        self._remove(group, member)
        self._after_members_left(group, f"member {member.member_id} session expired")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.info("pending member expired", group=group.group_id, member=member_id)
            self._check_join_complete(group)

    # -- JoinGroup -------------------------------------------------------------

    async def join_group(self, req: JoinRequest) -> JoinResult:
        outcome = self._join(req)
        result = await outcome.wait() if isinstance(outcome, Reply) else outcome
        error = await self.durable(req.group_id, result.error)
        return result if error is result.error else JoinResult(error, result.member_id)

    def _join(self, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
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
            group.pending_members.add(member_id)
            self.timers.schedule(("pending", group.group_id, member_id),
                                 trio.current_time() + req.session_timeout_ms / 1000,
                                 lambda: self._expire_pending(group, member_id))
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        return self._add_and_rebalance(group, member_id, req)

    def _join_existing(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        member_id = req.member_id
        if member_id in group.pending_members:
            self.timers.cancel(("pending", group.group_id, member_id))
            return self._add_and_rebalance(group, member_id, req)
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not E.NONE:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            reply = self._update_member(member, req)
            self._check_join_complete(group)
            return reply
        if group.is_in(S.COMPLETING_REBALANCE) and member.same_protocols(req.protocols):
            # It missed the JoinGroup response of this generation: send it again.
            return self._current_join_result(group, member)
        if group.is_in(S.STABLE) and not group.is_leader(member_id) \
                and member.same_protocols(req.protocols):
            return self._current_join_result(group, member)
        if group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            reply = self._update_member(member, req)
            self._prepare_rebalance(group, f"member {member_id} rejoined with new metadata"
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
        self._arm_session(group, member)
        if group.is_in(S.PREPARING_REBALANCE):
            self._check_join_complete(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
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
        self._answer_parked(old, E.FENCED_INSTANCE_ID)
        self.timers.cancel(("session", group.group_id, old_id))
        member = group.replace_static_member(old_id, new_id)
        self._arm_session(group, member)
        log.info("static member rejoined", group=group.group_id, instance=req.group_instance_id,
                 old_member=old_id, member=new_id)
        if group.is_in(S.PREPARING_REBALANCE):
            reply = self._update_member(member, req)
            self._check_join_complete(group)
            return reply
        if group.is_in(S.COMPLETING_REBALANCE):
            reply = self._update_member(member, req)
            self._prepare_rebalance(group, "static member rejoined during CompletingRebalance")
            return reply
        protocol = group.protocol_name
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        leader = group.is_leader(new_id)
        if group.select_protocol() != protocol or (leader and not req.supports_skip_assignment):
            reply = self._update_member(member, req)
            self._prepare_rebalance(group, "static member rejoined")
            return reply
        error = self._store_group(group)
        if error is not E.NONE:
            return JoinResult(error, new_id)
        result = self._current_join_result(group, member)
        result.skip_assignment = leader
        return result

    def _current_join_result(self, group: Group, member: Member) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(E.NONE, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "",
                          group.leader_view() if leader else [])

    # -- rebalance -------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_assignments(group, E.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self.timers.cancel(("sync", group.group_id))
        was_empty = group.is_in(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE, self.wall_clock())
        log.info("preparing to rebalance", group=group.group_id, reason=reason,
                 generation=group.generation_id, members=len(group.members))
        timeout_ms = group.max_rebalance_timeout_ms()
        if was_empty:
            delay = min(self.config["group.initial.rebalance.delay.ms"], timeout_ms)
            group.in_initial_delay = True
            self._arm_initial_delay(group, delay, timeout_ms - delay)
            return
        self.timers.schedule(("join", group.group_id), trio.current_time() + timeout_ms / 1000,
                             lambda: self._complete_join(group))
        self._check_join_complete(group)

    def _arm_initial_delay(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: wait ``delay_ms``, again while members keep coming."""
        group.new_member_added = False

        def expired() -> None:
            if group.new_member_added and remaining_ms > 0:
                step = min(self.config["group.initial.rebalance.delay.ms"], remaining_ms)
                self._arm_initial_delay(group, step, remaining_ms - step)
            else:
                self._complete_join(group)

        self.timers.schedule(("join", group.group_id), trio.current_time() + delay_ms / 1000,
                             expired)

    def _check_join_complete(self, group: Group) -> None:
        if (group.is_in(S.PREPARING_REBALANCE) and not group.in_initial_delay
                and group.all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_in(S.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        self.timers.cancel(("join", group.group_id))
        group.in_initial_delay = False
        for member in group.not_yet_rejoined():
            log.info("member did not rejoin in time", group=group.group_id,
                     member=member.member_id)
            self._remove(group, member)
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition(S.EMPTY, self.wall_clock())
            self._store_group(group)
            log.info("group is empty", group=group.group_id, generation=group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.transition(S.COMPLETING_REBALANCE, self.wall_clock())
        group.pending_sync = set(group.members)
        now = trio.current_time()
        for member in group.members.values():
            reply, member.join_reply = member.join_reply, None
            member.touch(now)
            assert reply is not None
            reply.set(self._current_join_result(group, member))
        log.info("rebalance: new generation", group=group.group_id,
                 generation=group.generation_id, protocol=group.protocol_name,
                 leader=group.leader_id, members=len(group.members))
        generation = group.generation_id
        self.timers.schedule(("sync", group.group_id),
                             now + group.max_rebalance_timeout_ms() / 1000,
                             lambda: self._expire_pending_sync(group, generation))

    def _expire_pending_sync(self, group: Group, generation: int) -> None:
        if group.generation_id != generation or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("member did not sync in time", group=group.group_id, member=member_id)
                self._remove(group, member)
        self._after_members_left(group, "members did not send SyncGroup in time")

    def _reset_assignments(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_reply is not None:
                member.sync_reply.set(SyncResult(error))
                member.sync_reply = None

    # -- SyncGroup -------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        outcome = self._sync(group_id, generation_id, member_id, group_instance_id,
                             protocol_type, protocol_name, assignments)
        result = await outcome.wait() if isinstance(outcome, Reply) else outcome
        error = await self.durable(group_id, result.error)
        return result if error is result.error else SyncResult(error)

    def _sync(self, group_id: str, generation_id: int, member_id: str,
              group_instance_id: str | None, protocol_type: str | None,
              protocol_name: str | None, assignments: dict[str, bytes]
              ) -> SyncResult | Reply[SyncResult]:
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
        self._synced(group, member_id)
        if group.is_in(S.STABLE):
            return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(E.REBALANCE_IN_PROGRESS))
        reply: Reply[SyncResult] = Reply()
        member.sync_reply = reply
        if group.is_leader(member_id):
            self._apply_assignments(group, assignments)
        return reply

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(("sync", group.group_id))

    def _apply_assignments(self, group: Group, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = self._store_group(group)
        if error is not E.NONE:
            self._reset_assignments(group, error)
            self._prepare_rebalance(group, f"group metadata not stored: {error.name}")
            return
        group.transition(S.STABLE, self.wall_clock())
        for member in group.members.values():
            if member.sync_reply is not None:
                member.sync_reply.set(SyncResult(E.NONE, group.protocol_type, group.protocol_name,
                                                 member.assignment))
                member.sync_reply = None
        log.info("group stable", group=group.group_id, generation=group.generation_id,
                 members=len(group.members))

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

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
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
            self._after_members_left(group, "members left the group")
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
            self.timers.cancel(("pending", group.group_id, member_id))
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("member left", group=group.group_id, member=member_id)
        self._remove(group, member)
        return E.NONE

    def _remove(self, group: Group, member: Member) -> None:
        group.remove(member.member_id)
        self.timers.cancel(("session", group.group_id, member.member_id))
        self._answer_parked(member, E.UNKNOWN_MEMBER_ID)

    def _answer_parked(self, member: Member, error: ErrorCode) -> None:
        if member.join_reply is not None:
            member.join_reply.set(JoinResult(error, member.member_id))
            member.join_reply = None
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(error))
            member.sync_reply = None

    def _after_members_left(self, group: Group, reason: str) -> None:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        else:
            self._check_join_complete(group)
