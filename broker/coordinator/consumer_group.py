"""One KIP-848 consumer group: its epochs, members, target assignment, and
the reconciliation of each member towards its target.

Theory of operation
-------------------
A consumer group (``group.protocol=consumer``) has no join or sync phase:
the coordinator assigns. Three epochs order everything:

* the *group epoch* goes up whenever what the assignment depends on changes
  (a member joins, leaves or changes its subscription; a subscribed topic
  gains partitions or disappears);
* the *assignment epoch* is the group epoch the current target assignment
  was computed for (the coordinator computes it on the next heartbeat after
  the group epoch moved);
* each member's *member epoch* is the assignment epoch it has caught up
  with.

A member moves towards its target one heartbeat at a time (``reconcile``).
Partitions it must give up are first asked back (its state is
UNREVOKED_PARTITIONS and it keeps its old epoch) until the member reports,
in the TopicPartitions it owns, that it let them go. Partitions it gains
are handed over only once no other member holds them (tracked per
partition in ``partition_epochs``): until then it is UNRELEASED_PARTITIONS
at the new epoch with what it can have. A partition therefore never has
two owners at once. ``MEMBER_TRANSITIONS`` lists the moves; every state can
reach every other in one heartbeat, but a move outside the table raises.

The group's state (Empty / Assigning / Reconciling / Stable) is derived
from these epochs, as Kafka derives it; Dead is never kept (a group whose
last member left and whose offsets are gone is simply dropped).

This module keeps state only; requests, timers and the assignors are
``consumer.py`` and ``assignors.py``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinator.assignors import Partitions, TopicMetadata
from broker.coordinator.topic_regex import RegexResolver
from protocol.errors import ErrorCode

# Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
# ListGroups v5 / DescribeGroups type of these groups.
CONSUMER_GROUP_TYPE = "consumer"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


M = MemberState
MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    M.STABLE: frozenset(M),
    M.UNREVOKED_PARTITIONS: frozenset(M),
    M.UNRELEASED_PARTITIONS: frozenset(M),
}


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def copy_partitions(parts: Partitions) -> Partitions:
    return {t: set(ps) for t, ps in parts.items() if ps}


def partition_count(parts: Partitions) -> int:
    return sum(len(ps) for ps in parts.values())


def contains(outer: Partitions, inner: Partitions) -> bool:
    return all(ps <= outer.get(t, set()) for t, ps in inner.items())


@dataclass(slots=True)
class ClassicMeta:
    """What a classic-protocol member inside a consumer group joined with
    (Kafka's ClassicMemberMetadata): it is served JoinGroup/SyncGroup/Heartbeat."""
    session_timeout_ms: int
    # (name, ConsumerProtocol subscription) in the member's order of preference.
    protocols: list[tuple[str, bytes]]


@dataclass(eq=False, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: list[str]
    server_assignor: str | None
    # SubscribedTopicRegex (ConsumerGroupHeartbeat v1), or None.
    regex: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = JOIN_EPOCH
    previous_member_epoch: int = JOIN_EPOCH
    # Partitions the member may use now, and those it was asked to give up.
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    # Set for a member of the classic protocol (JoinGroup), None for ConsumerGroupHeartbeat.
    classic: ClassicMeta | None = None

    def move(self, to: MemberState) -> None:
        """Raises:
            ValueError: ``to`` is not reachable (a coordinator bug).
        """
        if to not in MEMBER_TRANSITIONS[self.state]:
            raise ValueError(f"member {self.member_id}: {self.state} -> {to} is not allowed")
        self.state = to


@dataclass(slots=True)
class Reconciled:
    """Where one heartbeat takes a member (``reconcile``'s answer)."""
    state: MemberState
    epoch: int
    assigned: Partitions
    pending_revocation: Partitions


def reconcile(member: ConsumerMember, target_epoch: int, target: Partitions,
              held_by_other: Callable[[uuid.UUID, int], bool],
              owned: Partitions | None) -> Reconciled | None:
    """The member's next step towards ``target``; None when it stays as it is.

    Args:
        held_by_other: whether another member still holds a partition.
        owned: what the member says it owns (null in the request: unknown,
            assume it still holds everything it was given).
    """
    if member.state is M.STABLE:
        if member.member_epoch == target_epoch:
            return None
        return _next(member, member.member_epoch, target_epoch, target, held_by_other, owned)
    if member.state is M.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return None
    return _next(member, member.member_epoch, target_epoch, target, held_by_other, owned)


def _still_owns(owned: Partitions | None, revoking: Partitions) -> bool:
    if owned is None:
        return True
    return any(ps & revoking.get(t, set()) for t, ps in owned.items())


def _next(member: ConsumerMember, epoch: int, target_epoch: int, target: Partitions,
          held_by_other: Callable[[uuid.UUID, int], bool],
          owned: Partitions | None) -> Reconciled:
    kept: Partitions = {}
    revoke: Partitions = {}
    gain: Partitions = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, set())
        have = member.assigned.get(topic_id, set())
        if have & want:
            kept[topic_id] = have & want
        if have - want:
            revoke[topic_id] = have - want
        free = {p for p in want - have if not held_by_other(topic_id, p)}
        unreleased = unreleased or len(free) < len(want - have)
        if free:
            gain[topic_id] = free
    if revoke and _still_owns(owned, revoke):
        # Give up first; the new epoch comes once the member has let go.
        return Reconciled(M.UNREVOKED_PARTITIONS, epoch, kept, revoke)
    for topic_id, parts in gain.items():
        kept.setdefault(topic_id, set()).update(parts)
    state = M.UNRELEASED_PARTITIONS if unreleased else M.STABLE
    return Reconciled(state, target_epoch, kept, {})


class ConsumerGroup:
    """Epochs, members and assignments of one consumer group."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        # group.instance.id -> member id.
        self.static_members: dict[str, str] = {}
        # member id -> its target assignment at assignment_epoch.
        self.target: dict[str, Partitions] = {}
        # (topic id, partition) -> epoch of the member holding it (assigned or revoking).
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        # What the last assignment was computed from: subscribed topic name -> metadata.
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        # The assignor the last target assignment was computed with.
        self.assignor_name = ""
        # Topics matched by the members' SubscribedTopicRegex patterns.
        self.regexes = RegexResolver()

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, "
                f"members={len(self.members)})")

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not M.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def member_topics(self, member: ConsumerMember) -> set[str]:
        """Topics ``member`` subscribes to: its names and its pattern's matches."""
        topics = set(member.subscribed)
        if member.regex is not None:
            topics |= self.regexes.matches.get(member.regex, frozenset())
        return topics

    def topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of the subscribed topics."""
        return {meta.topic_id: name for name, meta in self.subscription_metadata.items()}

    def classic_members(self) -> int:
        return sum(1 for m in self.members.values() if m.classic is not None)

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` (itself of the consumer
        protocol) uses the classic protocol: its leaving may downgrade the group."""
        member = self.members.get(member_id)
        return member is not None and member.classic is None and \
            self.classic_members() == len(self.members) - 1

    def supports_classic(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a classic member with these protocols may join (Kafka's
        supportsClassicProtocols): a protocol every classic member supports."""
        if protocol_type != "consumer" or not names:
            return False
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return any(all(name in {n for n, _ in c.protocols} for c in classic) for name in names)

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def held_by_other(self, member_id: str) -> Callable[[uuid.UUID, int], bool]:
        """Whether someone other than ``member_id`` holds a partition."""
        mine = self.members[member_id]

        def held(topic_id: uuid.UUID, partition: int) -> bool:
            if (topic_id, partition) not in self.partition_epochs:
                return False
            return partition not in mine.assigned.get(topic_id, set()) and \
                partition not in mine.pending_revocation.get(topic_id, set())
        return held

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether ``member`` still waits for a partition of its target that
        another member holds (a classic member then need not rejoin yet)."""
        if member.state is not M.UNRELEASED_PARTITIONS:
            return False
        held = self.held_by_other(member.member_id)
        return any(held(topic_id, p) for topic_id, ps in self.target.get(member.member_id, {}).items()
                   for p in ps if p not in member.assigned.get(topic_id, set()))

    # -- offsets ---------------------------------------------------------------

    def validate_commit(self, member_id: str, member_epoch: int, version: int,
                        transactional: bool = False) -> ErrorCode:
        """Kafka's checks of an OffsetCommit to a consumer group: a commit
        without an epoch only while the group is empty; else from a member at
        its current epoch, with OffsetCommit v9+ (the version that carries
        it) unless it is a classic member (its generation is its epoch). A
        TxnOffsetCommit, or a classic member, at another epoch gets
        ILLEGAL_GENERATION, the error those clients know."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and member.classic is None and version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            if transactional or member.classic is not None:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ of a consumer group: anyone without a member id and
        epoch; else a member at its current epoch."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            if member.classic is not None:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- membership ------------------------------------------------------------

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        """Drop a member and free every partition it held."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        self.target.pop(member_id, None)
        if member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def replace_static(self, old_id: str, new_id: str) -> ConsumerMember:
        """A static member comes back under a new member id: it takes over the
        old one's partitions and target, at epoch 0."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        member.member_epoch = member.previous_member_epoch = JOIN_EPOCH
        self.members[new_id] = member
        if old_id in self.target:
            self.target[new_id] = self.target.pop(old_id)
        assert member.instance_id is not None
        self.static_members[member.instance_id] = new_id
        self.hold(member)
        return member

    def apply(self, member: ConsumerMember, step: Reconciled) -> None:
        """Move ``member`` to what ``reconcile`` decided, updating partition ownership."""
        self._release(member)
        member.move(step.state)
        if step.epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = step.epoch
        member.assigned = copy_partitions(step.assigned)
        member.pending_revocation = copy_partitions(step.pending_revocation)
        self.hold(member)

    def reset(self, member: ConsumerMember) -> None:
        """The member starts over (joined again with epoch 0): it holds nothing."""
        self._release(member)
        member.state = M.STABLE
        member.member_epoch = member.previous_member_epoch = JOIN_EPOCH
        member.assigned = {}
        member.pending_revocation = {}

    def apply_static_leave(self, member: ConsumerMember) -> None:
        """A static member left for a while: it keeps its assignment (nobody
        else gets it) but nothing it was giving up."""
        self._release(member)
        member.member_epoch = STATIC_LEAVE_EPOCH
        member.pending_revocation = {}
        self.hold(member)

    def _release(self, member: ConsumerMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    self.partition_epochs.pop((topic_id, p), None)

    def hold(self, member: ConsumerMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch
