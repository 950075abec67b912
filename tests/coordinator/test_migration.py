"""KIP-848 online migration on the GroupCoordinator: the conversion rules
(``migration``), classic members served inside a consumer group
(JoinGroup/SyncGroup/Heartbeat/LeaveGroup), the downgrade when the last
consumer-protocol member leaves, the policy, and the state replayed from
``__consumer_offsets`` after each conversion. Timed by trio's MockClock."""

from __future__ import annotations

import trio
import trio.testing
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from broker.coordinator import GroupCoordinator, admin, migration
from broker.coordinator import consumer_records as cr
from broker.coordinator.consumer_group import (
    ClassicMeta,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
)
from broker.coordinator.group import Group, GroupState, JoinResult, Member
from broker.coordinator.offsets import PartitionCommit
from protocol.errors import ErrorCode as E
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock
from tests.coordinator.test_consumer import A, hb, lookup, parts
from tests.coordinator.test_consumer_store import _leader, _move
from tests.coordinator.test_coordinator import join_in_background, request

SESSION_MS = 10_000


def subscription(owned: set[int] = frozenset(), version: int = 1) -> bytes:
    tp = ConsumerProtocolSubscription.TopicPartition
    sub = ConsumerProtocolSubscription(
        version=version, topics=["a"], user_data=None,
        owned_partitions=[tp(topic="a", partitions=sorted(owned))] if owned else [],
        generation_id=-1, rack_id=None)
    return bytes(sub.encode(version=version))


def join_req(member_id: str = "", owned: set[int] = frozenset(), group: str = "g"):
    return request(member_id, group, protocols=[("range", subscription(owned))],
                   session_ms=SESSION_MS)


async def classic_stable(coord: GroupCoordinator, nursery: trio.Nursery) -> dict[str, set[int]]:
    """Two classic members, Stable, holding {0, 1} and {2, 3} of topic a."""
    ids = []
    for _ in range(2):
        first = await coord.join_group(join_req())
        assert first.error is E.MEMBER_ID_REQUIRED
        ids.append(first.member_id)
    boxes = [await join_in_background(nursery, coord, join_req(m)) for m in ids]
    while not all(boxes):
        await trio.sleep(0.1)
    gen, leader = boxes[0][0].generation_id, boxes[0][0].leader_id
    owned = {ids[0]: {0, 1}, ids[1]: {2, 3}}
    assignments = {m: migration.encode_assignment({"a": ps}, 1) for m, ps in owned.items()}
    assert (await coord.sync_group("g", gen, leader, None, None, None, assignments)).error \
        is E.NONE
    other = next(m for m in ids if m != leader)
    assert (await coord.sync_group("g", gen, other, None, None, None, {})).error is E.NONE
    assert coord.groups["g"].state is GroupState.STABLE
    return owned


def owners(coord: GroupCoordinator) -> dict[int, list[str]]:
    """Partition of topic a -> members holding it (assigned or revoking)."""
    out: dict[int, list[str]] = {p: [] for p in range(4)}
    for m in coord.consumer_groups["g"].members.values():
        for p in m.assigned.get(A, set()) | m.pending_revocation.get(A, set()):
            out[p].append(m.member_id)
    return out


async def rejoin(coord: GroupCoordinator, member_id: str, owned: set[int]) -> JoinResult:
    join = await coord.join_group(join_req(member_id, owned), lookup)
    assert join.error is E.NONE and join.leader_id == "" and join.members == []
    return join


async def sync_parts(coord: GroupCoordinator, member_id: str, generation: int) -> set[int]:
    synced = await coord.sync_group("g", generation, member_id, None, "consumer", "range", {})
    assert synced.error is E.NONE
    return set().union(*migration.decode_assignment(synced.assignment).values())


# -- the conversion rules ------------------------------------------------------------


def test_policies_enable_the_conversions_kafka_enables():
    table = {"bidirectional": (True, True), "UPGRADE": (True, False),
             "downgrade": (False, True), "disabled": (False, False)}
    for policy, (up, down) in table.items():
        assert (migration.upgrade_enabled(policy), migration.downgrade_enabled(policy)) == \
            (up, down)


def test_a_classic_group_converts_member_by_member():
    group = Group("g", GroupState.STABLE, 0)
    group.generation_id = 7
    group.add(Member("m1", "i1", "c1", "/h1", 30000, 10000, "consumer",
                     [("range", subscription()), ("cooperative-sticky", b"x")],
                     migration.encode_assignment({"a": {0, 1}, "gone": {0}}, 1)))
    group.add(Member("m2", None, "c2", "/h2", 20000, 12000, "consumer",
                     [("range", subscription())], b""))
    group.protocol_type, group.protocol_name = "consumer", "range"
    converted = migration.to_consumer_group(group, lookup.lookup)
    assert converted.group_epoch == converted.assignment_epoch == 7
    m1, m2 = converted.members["m1"], converted.members["m2"]
    assert (m1.member_epoch, m1.previous_member_epoch, m1.state) == (7, 7, MemberState.STABLE)
    # The topic that no longer exists is dropped; the target is what it holds.
    assert m1.assigned == {A: {0, 1}} and converted.target["m1"] == {A: {0, 1}}
    assert m2.assigned == {} and m1.subscribed == ["a"] and m1.instance_id == "i1"
    assert m1.classic == ClassicMeta(10000, list(group.members["m1"].protocols))
    assert converted.static_members == {"i1": "m1"} and converted.partition_epochs == {
        (A, 0): 7, (A, 1): 7}
    assert converted.state is ConsumerGroupState.STABLE


def test_a_malformed_subscription_refuses_the_conversion():
    group = Group("g", GroupState.STABLE, 0)
    group.add(Member("m1", None, "c", "/h", 1, 1, "consumer", [("range", b"\x00")], b""))
    group.protocol_type, group.protocol_name = "consumer", "range"
    try:
        migration.to_consumer_group(group, lookup.lookup)
    except ValueError:
        return
    raise AssertionError("no ValueError")


def test_downgrade_needs_the_last_consumer_member_leaving_and_someone_staying():
    group = Group("g", GroupState.STABLE, 0)
    group.add(Member("m1", None, "c", "/h", 1, 1, "consumer", [("range", subscription())],
                     b""))
    group.protocol_type, group.protocol_name = "consumer", "range"
    converted = migration.to_consumer_group(group, lookup.lookup)
    assert not migration.can_downgrade("bidirectional", converted, "m1")  # classic itself
    hb_member = ConsumerMember("c1", None, None, "c", "h", 1, ["a"], None)
    converted.add(hb_member)
    assert migration.can_downgrade("bidirectional", converted, "c1")
    assert not migration.can_downgrade("upgrade", converted, "c1")
    del converted.members["m1"]
    assert not migration.can_downgrade("bidirectional", converted, "c1")  # nobody stays


# -- a rolling upgrade and downgrade on the coordinator ------------------------------


async def test_rolling_upgrade_then_downgrade(coordinator, autojump_clock, nursery):
    owned = await classic_stable(coordinator, nursery)
    first, second = list(owned)
    # A consumer-protocol member joins: the group converts and rebalances.
    r = hb(coordinator, "new", 0)
    assert r.error is E.NONE and r.member_epoch == 2 and parts(r) == set()
    group = coordinator.consumer_groups["g"]
    assert group.members[first].classic is not None
    assert admin.list_groups(coordinator.groups, None, None, coordinator.consumer_groups)[0] \
        .group_type == "consumer"
    # The classic members are told to rejoin; each gives up what the target takes.
    for member_id in (first, second):
        assert coordinator.heartbeat("g", 1, member_id, None) is E.REBALANCE_IN_PROGRESS
        join = await rejoin(coordinator, member_id, owned[member_id])
        kept = await sync_parts(coordinator, member_id, join.generation_id)
        assert kept <= owned[member_id]
        if join.generation_id == 1:  # revoking: rejoin with what it kept
            assert coordinator.heartbeat("g", 1, member_id, None) is E.REBALANCE_IN_PROGRESS
            join = await rejoin(coordinator, member_id, kept)
            assert join.generation_id == 2
            owned[member_id] = await sync_parts(coordinator, member_id, 2)
        assert coordinator.heartbeat("g", 2, member_id, None) is E.NONE
    got = parts(hb(coordinator, "new", 2, {}))
    assert got and all(len(holders) == 1 for holders in owners(coordinator).values())
    assert got.isdisjoint(owned[first] | owned[second])
    # The last consumer-protocol member leaves: the group is classic again and rebalances.
    assert hb(coordinator, "new", -1).error is E.NONE
    assert "g" not in coordinator.consumer_groups
    classic = coordinator.groups["g"]
    assert classic.state is GroupState.PREPARING_REBALANCE and set(classic.members) == {
        first, second}
    assert coordinator.heartbeat("g", 2, first, None) is E.REBALANCE_IN_PROGRESS
    boxes = [await join_in_background(nursery, coordinator, join_req(m)) for m in owned]
    while not all(boxes):
        await trio.sleep(0.1)
    assert {b[0].generation_id for b in boxes} == {3}  # the group epoch (2), then a rebalance
    assert sum(1 for b in boxes if b[0].members) == 1  # the classic leader assigns again


async def test_a_classic_static_member_taking_the_last_consumer_members_place_downgrades(
        coordinator, autojump_clock, nursery):
    owned = await classic_stable(coordinator, nursery)
    assert hb(coordinator, "new", 0, instance="i1").member_epoch == 2
    target = coordinator.consumer_groups["g"].target["new"]
    assert hb(coordinator, "new", -2, instance="i1").error is E.NONE  # a static restart
    join = await coordinator.join_group(request("", instance="i1", session_ms=SESSION_MS,
                                                protocols=[("range", subscription())]), lookup)
    assert join.error is E.NONE and join.generation_id == 2 and join.member_id != "new"
    # Classic again at once, Stable at the group epoch: no rebalance; the
    # newcomer has the assignment of the member it replaced.
    assert "g" not in coordinator.consumer_groups
    classic = coordinator.groups["g"]
    assert (classic.state, classic.generation_id) == (GroupState.STABLE, 2)
    assert set(classic.members) == set(owned) | {join.member_id}
    assert classic.static_members == {"i1": join.member_id}
    synced = await coordinator.sync_group("g", 2, join.member_id, "i1", "consumer", "range", {})
    assert synced.error is E.NONE
    assert migration.decode_assignment(synced.assignment) == {"a": target[A]}


async def test_a_rebalancing_classic_group_converts_and_answers_its_parked_joins(
        coordinator, autojump_clock, nursery):
    await classic_stable(coordinator, nursery)
    first = coordinator.groups["g"].leader_id  # its rejoin starts a rebalance and parks
    parked = await join_in_background(nursery, coordinator, join_req(first))
    assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE and not parked
    assert hb(coordinator, "new", 0).error is E.NONE
    await trio.testing.wait_all_tasks_blocked()
    assert parked[0].error is E.REBALANCE_IN_PROGRESS
    assert coordinator.consumer_groups["g"].members[first].classic is not None


async def test_classic_member_errors_inside_a_consumer_group(coordinator, autojump_clock,
                                                             nursery):
    owned = await classic_stable(coordinator, nursery)
    first = next(iter(owned))
    hb(coordinator, "new", 0)
    assert coordinator.heartbeat("g", 1, "nobody", None) is E.UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("g", 9, first, None) is E.ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", 1, "new", None) is E.UNKNOWN_MEMBER_ID  # not classic
    # A classic member commits with its generation (its member epoch), any version.
    commit = [PartitionCommit("a", 0, 5, -1, None)]
    assert await coordinator.commit_offsets("g", 1, first, None, -1, commit, version=2) == \
        [E.NONE]
    assert await coordinator.commit_offsets("g", 2, first, None, -1, commit, version=9) == \
        [E.ILLEGAL_GENERATION]
    assert await coordinator.commit_offsets("g", 2, "new", None, -1, commit, version=8) == \
        [E.UNSUPPORTED_VERSION]
    bad = await coordinator.join_group(request(first, protocols=[("roundrobin", subscription())]),
                                       lookup)
    assert bad.error is E.INCONSISTENT_GROUP_PROTOCOL
    # A member id with an instance id the group does not know is refused, as Kafka does.
    wrong = await coordinator.join_group(request("x", instance="i9", session_ms=SESSION_MS,
                                                 protocols=[("range", subscription())]),
                                         lookup)
    assert wrong.error is E.UNKNOWN_MEMBER_ID and "x" not in coordinator.consumer_groups["g"].members
    # A consumer-protocol member takes a classic static member's instance id at once.
    static = await coordinator.join_group(request("", instance="k1", session_ms=SESSION_MS,
                                                  protocols=[("range", subscription())]),
                                          lookup)
    assert static.error is E.NONE
    took = hb(coordinator, "k1-new", 0, instance="k1")
    assert took.error is E.NONE
    group = coordinator.consumer_groups["g"]
    assert static.member_id not in group.members and group.members["k1-new"].classic is None
    synced = await coordinator.sync_group("g", 7, first, None, None, None, {})
    assert synced.error is E.ILLEGAL_GENERATION
    synced = await coordinator.sync_group("g", 1, first, None, None, None, {})
    assert synced.error is E.REBALANCE_IN_PROGRESS  # the group epoch moved on
    join = await rejoin(coordinator, first, owned[first])
    synced = await coordinator.sync_group("g", join.generation_id, first, None, "consumer",
                                          "other", {})
    assert synced.error is E.INCONSISTENT_GROUP_PROTOCOL
    code, errors = coordinator.leave_group("g", [(first, None), ("nobody", None)])
    assert code is E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert first not in coordinator.consumer_groups["g"].members


async def test_a_classic_member_that_never_syncs_or_rejoins_is_fenced(coordinator,
                                                                     autojump_clock, nursery):
    owned = await classic_stable(coordinator, nursery)
    first, second = list(owned)
    hb(coordinator, "new", 0)
    join = await rejoin(coordinator, first, owned[first])
    start = trio.current_time()
    group = coordinator.consumer_groups["g"]
    # Both stay alive by heartbeats (10 s sessions), but the first never
    # sends SyncGroup and the second, told to rejoin, never does.
    while (first in group.members or second in group.members) and \
            trio.current_time() - start < 60:
        hb(coordinator, "new", group.members["new"].member_epoch, {})
        coordinator.heartbeat("g", join.generation_id, first, None)
        assert coordinator.heartbeat("g", 1, second, None) in (E.REBALANCE_IN_PROGRESS,
                                                               E.UNKNOWN_MEMBER_ID)
        await trio.sleep(1)
    # Fenced at their 30 s rebalance timeout, not before.
    assert 30 <= trio.current_time() - start <= 31


async def test_policy_disabled_keeps_the_protocols_apart(tmp_path, autojump_clock, nursery):
    config = make_config(tmp_path, group_consumer_migration_policy="DISABLED")
    coord = GroupCoordinator(config, make_node(config).internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    await classic_stable(coord, nursery)
    r = hb(coord, "new", 0)
    assert r.error is E.GROUP_ID_NOT_FOUND and "g" not in coord.consumer_groups
    hb(coord, "c1", 0, group="cg")
    join = await coord.join_group(join_req(group="cg"), lookup)
    assert join.error is E.INCONSISTENT_GROUP_PROTOCOL


async def test_a_full_classic_group_is_not_upgraded(tmp_path, autojump_clock, nursery):
    config = make_config(tmp_path, group_consumer_max_size="2")
    coord = GroupCoordinator(config, make_node(config).internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    await classic_stable(coord, nursery)
    assert hb(coord, "new", 0).error is E.GROUP_MAX_SIZE_REACHED
    assert "g" not in coord.consumer_groups and len(coord.groups["g"].members) == 2


async def test_no_downgrade_under_policy_upgrade(tmp_path, autojump_clock, nursery):
    config = make_config(tmp_path, group_consumer_migration_policy="upgrade")
    coord = GroupCoordinator(config, make_node(config).internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    await classic_stable(coord, nursery)
    hb(coord, "new", 0)
    assert hb(coord, "new", -1).error is E.NONE
    group = coord.consumer_groups["g"]
    assert "new" not in group.members and len(group.members) == 2


# -- replay after a conversion -------------------------------------------------------


async def test_conversions_survive_a_coordinator_move(nursery, config, node, autojump_clock):
    coord, tp = await _leader(nursery, config, node)
    owned = await classic_stable(coord, nursery)
    first = next(iter(owned))
    commit = [PartitionCommit("a", 0, 42, -1, None)]
    assert await coord.commit_offsets("g", 1, first, None, -1, commit, version=8) == [E.NONE]
    hb(coord, "new", 0)
    await rejoin(coord, first, owned[first])
    before = coord.consumer_groups["g"]
    snapshot = {m.member_id: (m.classic, m.member_epoch, m.state, m.assigned,
                              m.pending_revocation, before.target.get(m.member_id))
                for m in before.members.values()}
    await _move(coord, tp)
    after = coord.consumer_groups["g"]
    assert after.group_epoch == before.group_epoch
    assert {m.member_id: (m.classic, m.member_epoch, m.state, m.assigned,
                          m.pending_revocation, after.target.get(m.member_id))
            for m in after.members.values()} == snapshot
    shell = coord.groups["g"]  # the classic record was tombstoned; the offsets stay
    assert not shell.members and shell.offsets[("a", 0)].offset == 42
    hb(coord, "new", -1)
    classic = coord.groups["g"]
    await _move(coord, tp)
    assert "g" not in coord.consumer_groups
    reloaded = coord.groups["g"]
    assert reloaded.generation_id == classic.generation_id
    assert {m.member_id: m.assignment for m in reloaded.members.values()} == \
        {m.member_id: m.assignment for m in classic.members.values()}
    assert reloaded.offsets[("a", 0)].offset == 42
    await trio.testing.wait_all_tasks_blocked()


def test_classic_member_metadata_is_kafkas_tagged_field():
    """ConsumerGroupMemberMetadataValue with ClassicMemberMetadata (tag 0),
    byte for byte, and back."""
    value = cr.encode_value(
        cr.MEMBER_METADATA, instance_id=None, rack_id=None, client_id="c", client_host="h",
        subscribed_topic_names=["t"], subscribed_topic_regex=None, rebalance_timeout_ms=5,
        server_assignor=None, classic_member_metadata={
            "session_timeout_ms": 45000,
            "supported_protocols": [{"name": "range", "metadata": b"xy"}]})
    golden = bytes.fromhex(
        "0000"        # value version 0
        "00" "00"     # InstanceId, RackId: null (compact nullable strings)
        "0263" "0268"  # ClientId "c", ClientHost "h"
        "020274"      # SubscribedTopicNames ["t"]
        "00"          # SubscribedTopicRegex: null
        "00000005"    # RebalanceTimeoutMs 5
        "00"          # ServerAssignor: null
        "01" "00" "11"  # the value's tagged fields: one, tag 0, 17 bytes
        "01"          # ClassicMemberMetadata present
        "0000afc8"    # SessionTimeoutMs 45000
        "02" "0672616e6765" "037879" "00"  # SupportedProtocols [("range", b"xy")]
        "00")         # ClassicMemberMetadata's tagged fields
    assert value == golden
    classic = cr.decode_value(cr.MEMBER_METADATA, golden).classic_member_metadata
    assert (classic.session_timeout_ms, [(p.name, p.metadata) for p in
                                         classic.supported_protocols]) == (45000, [("range", b"xy")])
    plain = cr.encode_value(
        cr.MEMBER_METADATA, instance_id=None, rack_id=None, client_id="c", client_host="h",
        subscribed_topic_names=["t"], subscribed_topic_regex=None, rebalance_timeout_ms=5,
        server_assignor=None)
    assert plain == golden[:17] + b"\x00"  # no tagged field for a consumer-protocol member
    assert cr.decode_value(cr.MEMBER_METADATA, plain).classic_member_metadata is None
