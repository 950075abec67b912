"""The group state machine table, membership bookkeeping and protocol selection."""

from __future__ import annotations

import itertools
import struct

import pytest

from broker.coordinator.group import (
    TRANSITIONS,
    Group,
    GroupState,
    IllegalStateTransition,
    Member,
    parse_subscription_topics,
)
from protocol.errors import ErrorCode

S = GroupState

# Every legal move, as in Kafka's GroupMetadata.validPreviousStates.
LEGAL = {
    (S.EMPTY, S.PREPARING_REBALANCE), (S.EMPTY, S.DEAD),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE), (S.PREPARING_REBALANCE, S.EMPTY),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.STABLE), (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.STABLE, S.PREPARING_REBALANCE), (S.STABLE, S.DEAD),
    (S.DEAD, S.DEAD),
}


@pytest.mark.parametrize("src,dst", list(itertools.product(GroupState, GroupState)))
def test_transition_table(src, dst):
    group = Group("g", src, now_ms=1)
    if (src, dst) in LEGAL:
        group.transition(dst, now_ms=7)
        assert group.state is dst
        assert group.state_timestamp_ms == 7
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition(dst, now_ms=7)
        assert group.state is src and group.state_timestamp_ms == 1


def test_table_covers_every_state():
    assert set(TRANSITIONS) == set(GroupState)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == LEGAL


def member(member_id, protocols=(("range", b"r"), ("roundrobin", b"rr")), instance=None,
           rebalance_ms=30000, ptype="consumer"):
    return Member(member_id, instance, "client", "/127.0.0.1", rebalance_ms, 10000, ptype,
                  list(protocols))


def test_first_member_sets_type_and_leader_and_leader_moves_on_removal():
    group = Group("g")
    group.add(member("a"))
    group.add(member("b", instance="i-b"))
    assert group.protocol_type == "consumer" and group.leader_id == "a"
    assert group.static_members == {"i-b": "b"}
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("b")
    assert group.leader_id is None and group.static_members == {}
    assert group.remove("b") is None


def test_supports_protocols():
    group = Group("g")
    assert not group.supports_protocols("", ["range"])
    assert not group.supports_protocols("consumer", [])
    assert group.supports_protocols("consumer", ["range"])
    group.add(member("a", [("range", b"")]))
    assert group.supports_protocols("consumer", ["sticky", "range"])
    assert not group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("connect", ["range"])


def test_select_protocol_votes_among_common_protocols():
    group = Group("g")
    group.add(member("a", [("roundrobin", b""), ("range", b""), ("sticky", b"")]))
    group.add(member("b", [("range", b""), ("roundrobin", b"")]))
    group.add(member("c", [("range", b""), ("roundrobin", b"")]))
    assert group.select_protocol() == "range"  # 2 votes to 1; sticky is not common


def test_select_protocol_tie_goes_to_the_earliest_members_preference():
    group = Group("g")
    group.add(member("a", [("roundrobin", b""), ("range", b"")]))
    group.add(member("b", [("range", b""), ("roundrobin", b"")]))
    assert group.select_protocol() == "roundrobin"


def test_all_members_joined_counts_pending_members():
    group = Group("g")
    a = member("a")
    group.add(a)
    assert not group.all_members_joined()
    a.join_reply = object()  # type: ignore[assignment]
    assert group.all_members_joined()
    group.pending_members.add("x")
    assert not group.all_members_joined()


def test_validate_member():
    group = Group("g")
    group.add(member("a", instance="i-a"))
    assert group.validate_member("a", "i-a") is ErrorCode.NONE
    assert group.validate_member("a", None) is ErrorCode.NONE
    assert group.validate_member("old", "i-a") is ErrorCode.FENCED_INSTANCE_ID
    assert group.validate_member("zz", None) is ErrorCode.UNKNOWN_MEMBER_ID


def test_replace_static_member_keeps_leadership_and_assignment():
    group = Group("g")
    a = member("a", instance="i-a")
    a.assignment = b"as"
    group.add(a)
    group.pending_sync.add("a")
    replaced = group.replace_static_member("a", "a2")
    assert replaced is a and a.member_id == "a2" and a.assignment == b"as"
    assert group.leader_id == "a2" and group.static_members == {"i-a": "a2"}
    assert group.pending_sync == {"a2"} and list(group.members) == ["a2"]


def subscription(version, topics, tail=b""):
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + tail


def test_subscription_topics_of_any_consumer_protocol_version():
    assert parse_subscription_topics(subscription(0, ["a", "bb"], b"\x00\x00\x00\x00")) == \
        ["a", "bb"]
    assert parse_subscription_topics(subscription(3, ["t"], b"\xff" * 20)) == ["t"]
    for bad in (b"", b"\x00\x00\x00\x00\x00\x02\x00\x05ab", b"\x00\x00\x00\x00\x00\x01\xff\xfe"):
        with pytest.raises(ValueError):
            parse_subscription_topics(bad)


def test_subscribed_topics_only_for_consumer_groups():
    group = Group("g")
    group.add(member("a", [("range", subscription(1, ["x", "y"]))]))
    group.add(member("b", [("range", subscription(0, ["z"]))]))
    assert group.subscribed_topics() is None  # no protocol chosen yet
    group.protocol_name = "range"
    assert group.subscribed_topics() == {"x", "y", "z"}
    group.protocol_type = "connect"
    assert group.subscribed_topics() is None
