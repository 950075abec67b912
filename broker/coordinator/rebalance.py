"""A classic group's way through a rebalance, and the deadlines that bound it.

Theory of operation: a rebalance starts when membership changes (``prepare``)
and moves the group through ``group.TRANSITIONS``: PreparingRebalance
collects JoinGroups until every member has rejoined or the join deadline
passes; completing the join drops the stragglers, bumps the generation,
picks the protocol and answers every parked JoinGroup; CompletingRebalance
waits for the leader's assignments (``apply_assignments``), which make the
group Stable and answer every parked SyncGroup. A member that leaves or
whose session expires sends the group back to PreparingRebalance (or ends
the join phase early if it was the last one awaited).

This is kept apart from the request checks (``classic``): those decide who
may be a member and what a request is answered at once; this decides when
a generation starts and ends, as often from a deadline as from a request.

Timers are named tasks in the coordinator's nursery (``timers.Timers``), one
per purpose and key, cancelled when moot: the join deadline (rebalance
timeout, or the initial rebalance delay of an empty group), the sync
deadline (members that never send SyncGroup are dropped after the rebalance
timeout), one session timer per member (re-armed lazily: a heartbeat only
moves the member's deadline) and one per KIP-394 pending member id. They
use trio's clock, so tests drive them with ``trio.testing.MockClock``;
wall-clock time only stamps state changes (for records and offset retention).

Group metadata (generation, leader, members and assignments) is written to
``__consumer_offsets`` when a generation becomes Stable or the group becomes
Empty, as Kafka does.

Concurrency: everything here runs on the event loop without awaiting, so a
timer callback or a request sees and leaves a group consistent.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from broker.coordinator.group import Group, GroupState, JoinResult, Member, SyncResult
from broker.coordinator.offsets_store import group_record
from broker.coordinator.timers import Timers
from broker.coordinator_store import CoordinatorStore
from config import BrokerConfig
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

S = GroupState
E = ErrorCode


def join_result(group: Group, member: Member) -> JoinResult:
    """The JoinGroup answer of ``member`` for the group's current generation."""
    leader = group.is_leader(member.member_id)
    return JoinResult(E.NONE, member.member_id, group.generation_id, group.protocol_type,
                      group.protocol_name, group.leader_id or "",
                      group.leader_view() if leader else [])


def answer_parked(member: Member, error: ErrorCode) -> None:
    """Answer ``member``'s parked JoinGroup and SyncGroup, if any, with ``error``."""
    if member.join_reply is not None:
        member.join_reply.set(JoinResult(error, member.member_id))
        member.join_reply = None
    if member.sync_reply is not None:
        member.sync_reply.set(SyncResult(error))
        member.sync_reply = None


class Rebalancer:
    def __init__(self, config: BrokerConfig, groups: dict[str, Group], store: CoordinatorStore,
                 timers: Timers, wall_clock: Callable[[], int]) -> None:
        """Args:
            groups: the coordinator's groups, shared with it (a group no longer
                in it is left alone by a timer that fires late).
        """
        self.config = config
        self.groups = groups
        self.store = store
        self.timers = timers
        self.wall_clock = wall_clock

    # -- ownership -------------------------------------------------------------

    def loaded(self, group: Group) -> None:
        """A group replayed from the log: start its members' session timers."""
        for member in group.members.values():
            self.arm_session(group, member)

    def dropped(self, group: Group) -> None:
        """A group moving to another coordinator: stop its timers and answer
        its parked requests NOT_COORDINATOR."""
        for member in list(group.members.values()):
            self.timers.cancel(("session", group.group_id, member.member_id))
            answer_parked(member, E.NOT_COORDINATOR)
        for member_id in group.pending_members:
            self.timers.cancel(("pending", group.group_id, member_id))
        self.timers.cancel(("join", group.group_id))
        self.timers.cancel(("sync", group.group_id))

    def store_group(self, group: Group) -> ErrorCode:
        """Write the group's generation, leader, members and assignments."""
        return self.store.append(group.group_id, [group_record(group)])

    # -- sessions and pending members ------------------------------------------

    def arm_session(self, group: Group, member: Member) -> None:
        member.touch(trio.current_time())
        key = ("session", group.group_id, member.member_id)
        self.timers.schedule(key, member.session_deadline,
                             lambda: self._check_session(group, member))

    def cancel_session(self, group: Group, member_id: str) -> None:
        self.timers.cancel(("session", group.group_id, member_id))

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
        self.remove(group, member)
        self.members_left(group, f"member {member.member_id} session expired")

    def add_pending(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        """Hand out ``member_id`` (KIP-394); it lapses unless it joins within the session timeout."""
        group.pending_members.add(member_id)
        self.timers.schedule(("pending", group.group_id, member_id),
                             trio.current_time() + session_timeout_ms / 1000,
                             lambda: self._expire_pending(group, member_id))

    def cancel_pending(self, group: Group, member_id: str) -> None:
        self.timers.cancel(("pending", group.group_id, member_id))

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.info("pending member expired", group=group.group_id, member=member_id)
            self.check_join_complete(group)

    # -- join phase ------------------------------------------------------------

    def prepare(self, group: Group, reason: str) -> None:
        """Start a rebalance (or restart the one in its sync phase)."""
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
        self.check_join_complete(group)

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

    def check_join_complete(self, group: Group) -> None:
        """End the join phase now if nobody else is awaited."""
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
            self.remove(group, member)
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition(S.EMPTY, self.wall_clock())
            self.store_group(group)
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
            reply.set(join_result(group, member))
        log.info("rebalance: new generation", group=group.group_id,
                 generation=group.generation_id, protocol=group.protocol_name,
                 leader=group.leader_id, members=len(group.members))
        generation = group.generation_id
        self.timers.schedule(("sync", group.group_id),
                             now + group.max_rebalance_timeout_ms() / 1000,
                             lambda: self._expire_pending_sync(group, generation))

    # -- sync phase ------------------------------------------------------------

    def synced(self, group: Group, member_id: str) -> None:
        """``member_id`` sent its SyncGroup; stop the sync deadline once all have."""
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(("sync", group.group_id))

    def _expire_pending_sync(self, group: Group, generation: int) -> None:
        if group.generation_id != generation or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("member did not sync in time", group=group.group_id, member=member_id)
                self.remove(group, member)
        self.members_left(group, "members did not send SyncGroup in time")

    def apply_assignments(self, group: Group, assignments: dict[str, bytes]) -> None:
        """The leader's SyncGroup: store the assignments, go Stable, answer the parked syncs."""
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = self.store_group(group)
        if error is not E.NONE:
            self._reset_assignments(group, error)
            self.prepare(group, f"group metadata not stored: {error.name}")
            return
        group.transition(S.STABLE, self.wall_clock())
        for member in group.members.values():
            if member.sync_reply is not None:
                member.sync_reply.set(SyncResult(E.NONE, group.protocol_type, group.protocol_name,
                                                 member.assignment))
                member.sync_reply = None
        log.info("group stable", group=group.group_id, generation=group.generation_id,
                 members=len(group.members))

    def _reset_assignments(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_reply is not None:
                member.sync_reply.set(SyncResult(error))
                member.sync_reply = None

    # -- members leaving -------------------------------------------------------

    def remove(self, group: Group, member: Member) -> None:
        """Drop ``member``, answering its parked requests UNKNOWN_MEMBER_ID;
        call ``members_left`` once the removals of one event are done."""
        group.remove(member.member_id)
        self.timers.cancel(("session", group.group_id, member.member_id))
        answer_parked(member, E.UNKNOWN_MEMBER_ID)

    def members_left(self, group: Group, reason: str) -> None:
        """Rebalance the remaining members, or end a join phase that waited for the leavers."""
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare(group, reason)
        else:
            self.check_join_complete(group)
