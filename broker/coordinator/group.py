"""One consumer group of the classic protocol: its state machine and membership.

Theory of operation
-------------------
A group lives in one of five states (Kafka's ``GroupState``)::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                   ^    |                                    |      |
      |                   |    +--everyone left--> Empty            | leader's SyncGroup
      |                   +------- join / leave / expiry -----------+      v
      |                   +------- join / leave / expiry ------------- Stable
      +--(any state)--> Dead  (deleted, or emptied and expired)

* PreparingRebalance collects JoinGroups: it ends when every known member
  has rejoined (and no KIP-394 pending member is outstanding), or when the
  rebalance timeout runs out, which drops the members that did not rejoin.
* Ending it starts a new generation: a protocol every member supports is
  chosen, the leader gets every member's metadata and the others an empty
  list (assignors run in the client, as in Kafka).
* CompletingRebalance waits for the leader's SyncGroup carrying the
  assignments; followers' SyncGroups park until then.
* Stable: members heartbeat. A join with new metadata, a leave, or a session
  expiry sends the group back to PreparingRebalance.

The legal moves are the table ``TRANSITIONS``; ``Group.transition`` raises
``IllegalStateTransition`` for anything else, so a coordinator bug shows up
as an exception, not as a group that silently misbehaves. Groups loaded from
``__consumer_offsets`` start in Empty or Stable, as in Kafka.

This module keeps state only; timers, persistence and the answers parked
in ``Reply`` slots are driven by ``rebalance.py``, on requests checked by
``classic.py``.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import trio

from broker.coordinator.records import OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"
# ListGroups v5 / DescribeGroups group type of every group this coordinator runs.
CLASSIC_GROUP_TYPE = "classic"
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# state -> the states it may move to (Kafka's GroupMetadata validPreviousStates, inverted).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.DEAD: frozenset({S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A coordinator bug: a move the state machine does not allow."""


T = TypeVar("T")


class Reply(Generic[T]):
    """A one-shot answer a handler waits for (a parked JoinGroup or SyncGroup).

    Concurrency: ``set`` is called from coordinator code on the event loop;
    only the first value counts.
    """

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        assert self._value is not None
        return self._value


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    # JoinGroup v4+: an empty member id gets MEMBER_ID_REQUIRED first (KIP-394).
    require_known_member_id: bool
    # JoinGroup v9+: a rejoining static leader may skip computing assignments.
    supports_skip_assignment: bool


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata); only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_reply: Reply[JoinResult] | None = None
    sync_reply: Reply[SyncResult] | None = None
    # trio time after which the member is dropped unless it heartbeats.
    session_deadline: float = 0.0

    @property
    def awaiting_join(self) -> bool:
        return self.join_reply is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_reply is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def touch(self, now: float) -> None:
        """Record a sign of life (heartbeat, join, sync or commit) at trio time ``now``."""
        self.session_deadline = now + self.session_timeout_ms / 1000


class Group:
    """Membership, generation and committed offsets of one group."""

    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY,
                 now_ms: int = NO_GENERATION) -> None:
        self.group_id = group_id
        self.state = state
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        # group.instance.id -> member id (KIP-345 static members).
        self.static_members: dict[str, str] = {}
        # Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (KIP-394).
        self.pending_members: set[str] = set()
        # Members of this generation that have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        # Wall-clock ms of the last state change (offset expiry counts from it).
        self.state_timestamp_ms: int = now_ms
        # Whether the rebalance in progress is still in its initial delay
        # (group.initial.rebalance.delay.ms), and whether anyone joined since
        # the delay was last armed.
        self.in_initial_delay = False
        self.new_member_added = False

    def __repr__(self) -> str:
        return (f"Group({self.group_id!r}, {self.state.value}, gen={self.generation_id}, "
                f"members={len(self.members)})")

    # -- state machine ---------------------------------------------------------

    def transition(self, to: GroupState, now_ms: int) -> None:
        """Move to ``to``.

        Raises:
            IllegalStateTransition: ``to`` is not reachable from the current state.
        """
        if to not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {to.value} is not allowed")
        self.state = to
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- membership ------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            self.new_member_added = True

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, old_id: str, new_id: str) -> Member:
        """Give a rejoining static member its new member id (KIP-345)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        assert member.group_instance_id is not None
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's validateCurrentMember: is this a current member, not a fenced one?"""
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_members_joined(self) -> bool:
        return (all(m.awaiting_join for m in self.members.values())
                and not self.pending_members)

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts[name] == len(self.members) for name in names)

    def _protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for m in self.members.values():
            counts.update({name for name, _ in m.protocols})
        return counts

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer.

        Each member votes for the first protocol in its own list that all
        members support; ties go to the one listed first by the earliest
        member, so the choice is deterministic.

        Raises:
            ValueError: no protocol is common to all members (callers
                check ``supports_protocols`` on every join, so a bug).
        """
        counts = self._protocol_counts()
        candidates = [name for name, n in counts.items() if n == len(self.members)]
        if not candidates:
            raise ValueError(f"group {self.group_id!r} has no common protocol")
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        best = max(votes.values())
        order = [name for m in self.members.values() for name, _ in m.protocols]
        return next(name for name in order if votes.get(name) == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, if this is a consumer group we can parse."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(parse_subscription_topics(m.metadata_for(self.protocol_name)))
            except (KeyError, ValueError):
                return None
        return topics

    def leader_view(self) -> list[tuple[str, str | None, bytes]]:
        """What the leader's JoinGroup response lists: every member's metadata."""
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: all start alike).

    Layout: version int16, topics array (int32 count, int16-length strings), ...

    Raises:
        ValueError: the bytes are not a subscription.
    """
    try:
        pos = _I16.size
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        topics = []
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if length < 0 or pos + length > len(metadata):
                raise ValueError("bad topic length")
            topics.append(metadata[pos : pos + length].decode("utf-8"))
            pos += length
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer subscription: {exc}") from None
    return topics
