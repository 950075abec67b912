"""KIP-848 ConsumerGroupHeartbeat on the GroupCoordinator: joining, the
reconciliation state machine (revoke before reassign), epochs and fencing,
static members, sessions and revocation timeouts under trio's MockClock,
metadata changes, offsets of consumer groups, and Kafka's error codes."""

from __future__ import annotations

import uuid

from broker.coordinator import GroupCoordinator
from broker.coordinator.assignors import Partitions, TopicMetadata
from broker.coordinator.consumer import HeartbeatRequest, HeartbeatResult, TopicView
from broker.coordinator.consumer_group import ConsumerGroupState, MemberState
from broker.coordinator.group import JoinRequest
from broker.coordinator.offsets import PartitionCommit
from protocol.errors import ErrorCode as E

A = uuid.UUID(int=1)
TOPICS = {"a": TopicMetadata(A, "a", 4)}


lookup = TopicView(TOPICS.get, lambda: sorted(TOPICS), lambda name: name.startswith("__"))


def hb(coord: GroupCoordinator, member: str, epoch: int, owned: Partitions | None = None, *,
       subscribed: list[str] | None = None, instance: str | None = None,
       assignor: str | None = None, group: str = "g") -> HeartbeatResult:
    joining = epoch == 0
    return coord.consumer.heartbeat(HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
        rack_id=None, rebalance_timeout_ms=30000 if joining else -1,
        subscribed=subscribed if subscribed is not None else (["a"] if joining else None),
        server_assignor=assignor, owned={} if joining else owned,
        client_id="c", client_host="/127.0.0.1"), lookup)


def parts(result: HeartbeatResult) -> set[int]:
    assert result.assignment is not None
    return set(result.assignment.get(A, set()))


async def test_first_member_gets_everything(coordinator):
    r = hb(coordinator, "m1", 0)
    assert r.error is E.NONE and r.member_id == "m1" and r.member_epoch == 1
    assert parts(r) == {0, 1, 2, 3}
    assert r.heartbeat_interval_ms == 5000
    group = coordinator.consumer_groups["g"]
    assert group.state is ConsumerGroupState.STABLE and group.assignor_name == "uniform"


async def test_partitions_move_only_after_their_owner_revoked_them(coordinator):
    hb(coordinator, "m1", 0)
    r2 = hb(coordinator, "m2", 0)
    # m1 still holds everything: m2 is at the new epoch but gets nothing yet.
    assert r2.member_epoch == 2 and parts(r2) == set()
    group = coordinator.consumer_groups["g"]
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    r1 = hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}})
    # Asked to give up two partitions; stays at epoch 1 until it has.
    assert r1.member_epoch == 1 and len(parts(r1)) == 2
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    kept = parts(r1)
    assert hb(coordinator, "m2", 2, {}).assignment is None  # still nothing free
    r1 = hb(coordinator, "m1", 1, {A: kept})
    assert r1.member_epoch == 2 and r1.assignment is None  # same partitions, new epoch
    r2 = hb(coordinator, "m2", 2, {})
    assert parts(r2) == {0, 1, 2, 3} - kept
    assert group.state is ConsumerGroupState.STABLE


async def test_leaving_member_frees_its_partitions(coordinator):
    hb(coordinator, "m1", 0)
    hb(coordinator, "m2", 0)
    r1 = hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}})
    hb(coordinator, "m1", 1, {A: parts(r1)})
    r2 = hb(coordinator, "m2", 2, {})
    assert len(parts(r2)) == 2
    left = hb(coordinator, "m2", -1)
    assert left.error is E.NONE and left.member_epoch == -1
    r1 = hb(coordinator, "m1", 2, {A: parts(r1)})
    assert r1.member_epoch == 3 and parts(r1) == {0, 1, 2, 3}


async def test_epoch_errors(coordinator):
    hb(coordinator, "m1", 0)
    assert hb(coordinator, "m1", 5, {}).error is E.FENCED_MEMBER_EPOCH
    assert hb(coordinator, "nobody", 1).error is E.UNKNOWN_MEMBER_ID
    assert hb(coordinator, "m1", 1, group="other").error is E.GROUP_ID_NOT_FOUND
    # One epoch behind, owning a subset of its partitions: the answer was lost.
    hb(coordinator, "m2", 0)
    r1 = hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}})
    hb(coordinator, "m1", 1, {A: parts(r1)})
    assert hb(coordinator, "m1", 1, {A: parts(r1)}).error is E.NONE
    assert hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}}).error is E.FENCED_MEMBER_EPOCH


async def test_rejoin_with_epoch_zero_starts_over(coordinator):
    hb(coordinator, "m1", 0)
    r = hb(coordinator, "m1", 0)
    assert r.error is E.NONE and parts(r) == {0, 1, 2, 3}


async def test_invalid_requests(coordinator):
    def bad(**kw: object) -> HeartbeatResult:
        base = dict(group_id="g", member_id="m", member_epoch=0, instance_id=None,
                    rack_id=None, rebalance_timeout_ms=1000, subscribed=["a"],
                    server_assignor=None, owned={}, client_id="c", client_host="h")
        base.update(kw)
        return coordinator.consumer.heartbeat(HeartbeatRequest(**base), lookup)  # type: ignore[arg-type]

    assert bad(group_id="").error is E.INVALID_REQUEST
    assert bad(rebalance_timeout_ms=-1).error is E.INVALID_REQUEST
    assert bad(owned=None).error is E.INVALID_REQUEST
    assert bad(owned={A: {0}}).error is E.INVALID_REQUEST
    assert bad(subscribed=None).error is E.INVALID_REQUEST
    assert bad(version=1, member_id="").error is E.INVALID_REQUEST
    assert bad(version=1, regex="a(?=b)").error is E.INVALID_REGULAR_EXPRESSION
    assert bad(version=1, regex="(").error is E.INVALID_REGULAR_EXPRESSION
    assert bad(member_epoch=-3).error is E.INVALID_REQUEST
    assert bad(member_epoch=3, member_id="").error is E.INVALID_REQUEST
    assert bad(member_epoch=-2, instance_id=None).error is E.INVALID_REQUEST
    assert bad(instance_id="").error is E.INVALID_REQUEST
    r = bad(server_assignor="sticky")
    assert r.error is E.UNSUPPORTED_ASSIGNOR and "uniform, range" in (r.message or "")
    assert "g" not in coordinator.consumer_groups


async def test_range_assignor_chosen_by_members(coordinator):
    hb(coordinator, "m1", 0, assignor="range")
    assert coordinator.consumer_groups["g"].assignor_name == "range"


async def test_group_max_size(tmp_path, nursery):
    from tests.coordinator.conftest import make_config, make_node, trio_wall_clock
    config = make_config(tmp_path, **{"group.consumer.max.size": "1"})
    coord = GroupCoordinator(config, make_node(config).internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    hb(coord, "m1", 0)
    assert hb(coord, "m2", 0).error is E.GROUP_MAX_SIZE_REACHED
    assert hb(coord, "m1", 1, {}).error is E.NONE


async def test_session_timeout_fences_the_member(coordinator, autojump_clock):
    import trio
    hb(coordinator, "m1", 0)
    hb(coordinator, "m2", 0)
    group = coordinator.consumer_groups["g"]
    for _ in range(10):  # m1 keeps heartbeating and revoking as asked, m2 goes silent
        await trio.sleep(5)
        m1 = group.members["m1"]
        hb(coordinator, "m1", m1.member_epoch, {A: set(m1.assigned.get(A, set()))})
    assert set(group.members) == {"m1"}
    m1 = group.members["m1"]
    assert m1.assigned == {A: {0, 1, 2, 3}} and m1.member_epoch == group.group_epoch == 3


async def test_member_that_never_revokes_is_fenced_after_its_rebalance_timeout(
        coordinator, autojump_clock):
    import trio
    hb(coordinator, "m1", 0)
    hb(coordinator, "m2", 0)
    hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}})  # asked to revoke; never does
    for _ in range(8):
        await trio.sleep(5)
        hb(coordinator, "m1", 1, {A: {0, 1, 2, 3}})
        hb(coordinator, "m2", coordinator.consumer_groups["g"].members["m2"].member_epoch
           if "m2" in coordinator.consumer_groups["g"].members else 2, {})
    group = coordinator.consumer_groups["g"]
    assert "m1" not in group.members
    assert hb(coordinator, "m1", 1, {A: {0}}).error is E.UNKNOWN_MEMBER_ID


async def test_static_member_leaves_and_comes_back_with_its_partitions(coordinator):
    hb(coordinator, "s1", 0, instance="i1")
    r = hb(coordinator, "s2", 0, instance="i2")
    hb(coordinator, "s1", 1, {A: {0, 1, 2, 3}}, instance="i1")
    first = coordinator.consumer_groups["g"].target
    s2_target = first["s2"][A]
    epoch = coordinator.consumer_groups["g"].group_epoch
    assert hb(coordinator, "s2", -2, instance="i2").member_epoch == -2
    # Its instance id is still taken by the member that left for a while...
    assert hb(coordinator, "x", 3, {}, instance="i2").error is E.FENCED_INSTANCE_ID
    back = hb(coordinator, "s2b", 0, instance="i2")
    assert back.error is E.NONE
    group = coordinator.consumer_groups["g"]
    assert group.group_epoch == epoch and group.target["s2b"][A] == s2_target
    assert r.member_id == "s2" and "s2" not in group.members
    # ...and a second incarnation cannot take it while it is in use.
    assert hb(coordinator, "s2c", 0, instance="i2").error is E.UNRELEASED_INSTANCE_ID


async def test_new_partitions_and_deleted_topics_change_the_target(coordinator):
    hb(coordinator, "m1", 0)
    TOPICS["a"] = TopicMetadata(A, "a", 6)
    try:
        r = hb(coordinator, "m1", 1, None)
        assert parts(r) == set(range(6)) and r.member_epoch == 2
        del TOPICS["a"]
        r = hb(coordinator, "m1", 2, None)
        assert r.member_epoch == 2 and coordinator.consumer_groups["g"].group_epoch == 3
        assert coordinator.consumer_groups["g"].members["m1"].state is \
            MemberState.UNREVOKED_PARTITIONS
        r = hb(coordinator, "m1", 2, {})
        assert r.error is E.NONE and r.member_epoch == 3
        assert coordinator.consumer_groups["g"].members["m1"].assigned == {}
    finally:
        TOPICS["a"] = TopicMetadata(A, "a", 4)


async def test_groups_without_a_readable_consumer_protocol_do_not_mix(coordinator,
                                                                       autojump_clock):
    """Online migration (test_migration.py) needs the ConsumerProtocol: an
    unreadable subscription or another protocol type keeps the groups apart."""
    import trio
    hb(coordinator, "m1", 0, group="cg")
    join = await coordinator.join_group(JoinRequest(
        "cg", "", None, "c", "h", 10000, 10000, "consumer", [("range", b"")], False, False))
    assert join.error is E.INCONSISTENT_GROUP_PROTOCOL
    async with trio.open_nursery() as n:
        n.start_soon(coordinator.join_group, JoinRequest(
            "classic", "", None, "c", "h", 10000, 10000, "consumer", [("range", b"")],
            False, False))
        await trio.sleep(0.1)
        assert hb(coordinator, "m1", 0, group="classic").error is E.GROUP_ID_NOT_FOUND
        n.start_soon(coordinator.join_group, JoinRequest(
            "connect", "", None, "c", "h", 10000, 10000, "connect", [("v1", b"")],
            False, False))
        await trio.sleep(0.1)
        assert hb(coordinator, "m1", 0, group="connect").error is E.GROUP_ID_NOT_FOUND
        n.cancel_scope.cancel()


async def test_offsets_of_a_consumer_group_check_member_epochs(coordinator):
    hb(coordinator, "m1", 0)
    commit = [PartitionCommit("a", 0, 7, -1, None)]
    assert await coordinator.commit_offsets("g", 1, "m1", None, -1, commit, version=9) == [E.NONE]
    assert await coordinator.commit_offsets("g", 0, "m1", None, -1, commit, version=9) == \
        [E.STALE_MEMBER_EPOCH]
    assert await coordinator.commit_offsets("g", 1, "zz", None, -1, commit, version=9) == \
        [E.UNKNOWN_MEMBER_ID]
    assert await coordinator.commit_offsets("g", 1, "m1", None, -1, commit, version=8) == \
        [E.UNSUPPORTED_VERSION]
    assert await coordinator.commit_offsets("g", -1, "", None, -1, commit, version=9) == \
        [E.UNKNOWN_MEMBER_ID]
    group = coordinator.consumer_groups["g"]
    assert group.validate_fetch(None, -1) is E.NONE
    assert group.validate_fetch("m1", 1) is E.NONE
    assert group.validate_fetch("m1", 0) is E.STALE_MEMBER_EPOCH
    assert group.validate_fetch("zz", 1) is E.UNKNOWN_MEMBER_ID
    [(_, value)] = coordinator.offsets.fetch("g", [("a", 0)])
    assert value is not None and value.offset == 7
    txn = coordinator.txn_offset_commit
    assert await txn("g", 5, 0, 0, "m1", None, commit) == [E.ILLEGAL_GENERATION]
    assert await txn("g", 5, 0, 1, "zz", None, commit) == [E.UNKNOWN_MEMBER_ID]
    hb(coordinator, "m1", -1)
    assert await coordinator.commit_offsets("g", -1, "", None, -1, commit, version=9) == [E.NONE]


async def test_regex_subscriptions_follow_new_topics(coordinator, autojump_clock):
    import trio
    B = uuid.UUID(int=2)
    r = coordinator.consumer.heartbeat(HeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=1000, subscribed=None, server_assignor=None, owned={},
        client_id="c", client_host="h", regex="a|b.*", version=1), lookup)
    assert r.error is E.NONE and parts(r) == {0, 1, 2, 3}
    TOPICS["bee"] = TopicMetadata(B, "bee", 2)
    TOPICS["__bees"] = TopicMetadata(uuid.UUID(int=3), "__bees", 2)
    try:
        r = hb(coordinator, "m1", 1, None)
        assert r.assignment is None  # matches are refreshed every few seconds
        await trio.sleep(11)
        r = hb(coordinator, "m1", 1, None)
        assert r.member_epoch == 2 and r.assignment is not None
        assert r.assignment == {A: {0, 1, 2, 3}, B: {0, 1}}  # internal topics never match
    finally:
        del TOPICS["bee"], TOPICS["__bees"]


async def test_offsets_of_subscribed_topics_do_not_expire_while_the_group_has_members(
        coordinator):
    hb(coordinator, "m1", 0)
    commits = [PartitionCommit("a", 0, 7, -1, None), PartitionCommit("z", 0, 9, -1, None)]
    assert await coordinator.commit_offsets("g", 1, "m1", None, -1, commits, version=9) == \
        [E.NONE, E.NONE]
    now = coordinator.offsets.wall_clock()
    week = coordinator.config["offsets.retention.minutes"] * 60_000
    coordinator.offsets.wall_clock = lambda: now + week + 1
    coordinator.offsets.expire()
    assert set(coordinator.groups["g"].offsets) == {("a", 0)}
    hb(coordinator, "m1", -1)
    coordinator.offsets.expire()
    assert "g" not in coordinator.groups
    coordinator.drop_empty_consumer_groups()
    assert "g" not in coordinator.consumer_groups


async def test_consumer_groups_in_list_describe_and_delete(coordinator):
    from broker.coordinator import admin
    hb(coordinator, "m1", 0)
    commit = [PartitionCommit("a", 0, 7, -1, None)]
    await coordinator.commit_offsets("g", 1, "m1", None, -1, commit, version=9)
    groups, consumer_groups = coordinator.groups, coordinator.consumer_groups
    listed = admin.list_groups(groups, None, None, consumer_groups)
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [("g", "consumer", "Stable")]
    assert admin.list_groups(groups, None, ["classic"], consumer_groups) == []
    assert admin.list_groups(groups, ["empty"], None, consumer_groups) == []
    assert admin.describe_group(groups, "g", consumer_groups).state == "Dead"
    assert admin.delete_groups(groups, coordinator.offsets, ["g"], consumer_groups) == \
        [E.NON_EMPTY_GROUP]
    assert coordinator.offsets.delete("g", [("a", 0), ("z", 0)]) == \
        (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    hb(coordinator, "m1", -1)
    assert [g.state for g in admin.list_groups(groups, ["EMPTY"], None, consumer_groups)] == \
        ["Empty"]
    assert admin.delete_groups(groups, coordinator.offsets, ["g"], consumer_groups) == [E.NONE]
    assert "g" not in groups and "g" not in consumer_groups
    assert coordinator.offsets.fetch("g", [("a", 0)]) == [(("a", 0), None)]
