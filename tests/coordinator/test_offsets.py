"""Offset commits, fetches, deletes, retention and reload from __consumer_offsets.

Runs under ``autojump_clock``; the coordinator's wall clock follows trio's,
so retention tests fast-forward days in no real time.
"""

from __future__ import annotations

import pytest
import trio

from broker.coordinator import GroupCoordinator, admin
from broker.coordinator.group import GroupState
from broker.coordinator.offsets import PartitionCommit
from protocol.errors import ErrorCode as E
from replication.internal_topics import OFFSETS_TOPIC
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock
from tests.coordinator.test_coordinator import request, stable_group
from tests.coordinator.test_group import subscription

S = GroupState
RETENTION_S = 10080 * 60  # offsets.retention.minutes default
# Long-lived members in retention tests: the longest session allowed, heartbeats
# well inside it, so a simulated week takes a few hundred heartbeats.
LONG_SESSION_MS = 1_800_000
HEARTBEAT_S = 600


def commits(*pairs: tuple[int, int], topic="t", metadata: str | None = "") -> list[PartitionCommit]:
    return [PartitionCommit(topic, p, o, -1, metadata) for p, o in pairs]


async def keep_alive(coord: GroupCoordinator, group: str, member_id: str, generation: int,
                     *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Heartbeat like a live consumer with a long session."""
    task_status.started()
    while coord.heartbeat(group, generation, member_id, None) is E.NONE:
        await trio.sleep(HEARTBEAT_S)


def fetched(coord: GroupCoordinator, group="g", partitions=None) -> dict:
    return {tp: (v.offset if v else None) for tp, v in coord.offsets.fetch(group, partitions)}


async def test_standalone_commit_creates_group_and_fetch_returns_it(coordinator, autojump_clock):
    offsets = coordinator.offsets
    assert offsets.commit("g", -1, "", None, -1, commits((0, 5), (1, 7))) == [E.NONE, E.NONE]
    assert fetched(coordinator) == {("t", 0): 5, ("t", 1): 7}
    assert fetched(coordinator, partitions=[("t", 1), ("t", 9)]) == {("t", 1): 7, ("t", 9): None}
    assert fetched(coordinator, "unknown", [("t", 0)]) == {("t", 0): None}
    group = coordinator.groups["g"]
    assert group.state is S.EMPTY and group.protocol_type is None


async def test_commit_validation(coordinator, nursery, autojump_clock):
    offsets = coordinator.offsets
    assert offsets.commit("new", 3, "m", None, -1, commits((0, 1))) == [E.ILLEGAL_GENERATION]
    a, b = await stable_group(coordinator, nursery, 2)
    assert offsets.commit("g", 1, a, None, -1, commits((0, 1))) == [E.NONE]
    assert offsets.commit("g", 0, a, None, -1, commits((0, 1))) == [E.ILLEGAL_GENERATION]
    assert offsets.commit("g", 1, "x", None, -1, commits((0, 1))) == [E.UNKNOWN_MEMBER_ID]
    # A non-member commit is refused while the group has members.
    assert offsets.commit("g", -1, "", None, -1, commits((0, 1))) == [E.UNKNOWN_MEMBER_ID]
    too_big = "x" * 4097
    assert offsets.commit("g", 1, a, None, -1, commits((0, 2), (1, 2), metadata=too_big)) == \
        [E.OFFSET_METADATA_TOO_LARGE, E.OFFSET_METADATA_TOO_LARGE]
    assert fetched(coordinator) == {("t", 0): 1}
    # A new member arrives: commits of the current generation are still allowed while
    # the group prepares to rebalance, refused while it completes.
    c_first = await coordinator.join_group(request())
    nursery.start_soon(coordinator.join_group, request(c_first.member_id))
    await trio.testing.wait_all_tasks_blocked()
    assert coordinator.groups["g"].state is S.PREPARING_REBALANCE
    assert offsets.commit("g", 1, b, None, -1, commits((0, 3))) == [E.NONE]
    nursery.start_soon(coordinator.join_group, request(b))
    await coordinator.join_group(request(a))
    assert coordinator.groups["g"].state is S.COMPLETING_REBALANCE
    assert offsets.commit("g", 2, a, None, -1, commits((0, 4))) == [E.REBALANCE_IN_PROGRESS]
    assert fetched(coordinator) == {("t", 0): 3}


async def test_offset_delete(coordinator, nursery, autojump_clock):
    offsets = coordinator.offsets
    assert offsets.delete("none", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, [])
    offsets.commit("g", -1, "", None, -1, commits((0, 5), (1, 6)))
    assert offsets.delete("g", [("t", 0), ("t", 3)]) == (E.NONE, [E.NONE, E.NONE])
    assert fetched(coordinator) == {("t", 1): 6}
    # A consumer group with members: subscribed topics cannot lose their offsets.
    c = await coordinator.join_group(request(protocols=[("range", subscription(0, ["t"]))],
                                             v4=False, group="cg"))
    await coordinator.sync_group("cg", 1, c.member_id, None, None, None, {})
    offsets.commit("cg", 1, c.member_id, None, -1, commits((0, 1)) + commits((0, 1), topic="u"))
    assert offsets.delete("cg", [("t", 0), ("u", 0)]) == \
        (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    assert fetched(coordinator, "cg") == {("t", 0): 1}


async def test_delete_groups(coordinator, nursery, autojump_clock):
    coordinator.offsets.commit("empty", -1, "", None, -1, commits((0, 5)))
    await stable_group(coordinator, nursery, 1, group="busy")
    errors = admin.delete_groups(coordinator.groups, coordinator.offsets,
                                 ["empty", "busy", "ghost"])
    assert errors == [E.NONE, E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND]
    assert "empty" not in coordinator.groups
    assert fetched(coordinator, "empty", [("t", 0)]) == {("t", 0): None}
    assert [g.group_id for g in admin.list_groups(coordinator.groups, None, None)] == ["busy"]
    assert admin.list_groups(coordinator.groups, ["empty"], None) == []
    assert admin.list_groups(coordinator.groups, ["STABLE"], ["Classic"])[0].state == "Stable"
    assert admin.list_groups(coordinator.groups, None, ["consumer"]) == []
    described = admin.describe_group(coordinator.groups, "busy")
    assert described.protocol_data == "range" and described.members[0].assignment
    assert admin.describe_group(coordinator.groups, "ghost").state == "Dead"


async def test_empty_group_offsets_expire_after_retention(config, node, nursery,
                                                          autojump_clock):
    coord = GroupCoordinator(config, node.internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    (a,) = await stable_group(coord, nursery, 1, session_ms=LONG_SESSION_MS)
    assert coord.offsets.commit("g", 1, a, None, -1, commits((0, 5))) == [E.NONE]
    await nursery.start(keep_alive, coord, "g", a, 1)
    # Stable, with subscriptions we cannot parse: nothing expires.
    await trio.sleep(RETENTION_S + 600)
    assert fetched(coord) == {("t", 0): 5}
    coord.leave_group("g", [(a, None)])
    await trio.sleep(RETENTION_S - 3600)
    assert fetched(coord) == {("t", 0): 5}
    await trio.sleep(3600 + 600)  # plus one offsets.retention.check.interval.ms
    assert "g" not in coord.groups
    assert fetched(coord) == {}


async def test_standalone_offsets_expire_by_commit_time(coordinator, autojump_clock):
    coordinator.offsets.commit("g", -1, "", None, -1, commits((0, 5)))
    await trio.sleep(RETENTION_S / 2)
    coordinator.offsets.commit("g", -1, "", None, -1, commits((1, 6)))
    await trio.sleep(RETENTION_S / 2 + 600)
    assert fetched(coordinator) == {("t", 1): 6}
    # Long.MAX means forever (clamped, not wrapped into the past as in Kafka).
    assert coordinator.offsets.commit("g", -1, "", None, 2**63 - 1, commits((3, 8))) == [E.NONE]
    # An explicit retention (OffsetCommit v2-v4) wins.
    coordinator.offsets.commit("g", -1, "", None, 1_000, commits((2, 7)))
    await trio.sleep(601)
    assert ("t", 2) not in fetched(coordinator)
    assert ("t", 3) in fetched(coordinator)


async def test_unsubscribed_topics_of_stable_consumer_group_expire(coordinator, nursery,
                                                                   autojump_clock):
    c = await coordinator.join_group(request(protocols=[("range", subscription(0, ["t"]))],
                                             v4=False, session_ms=LONG_SESSION_MS))
    await coordinator.sync_group("g", 1, c.member_id, None, None, None, {})
    await nursery.start(keep_alive, coordinator, "g", c.member_id, 1)
    coordinator.offsets.commit("g", 1, c.member_id, None, -1,
                               commits((0, 1)) + commits((0, 2), topic="gone"))
    await trio.sleep(RETENTION_S + 600)
    assert fetched(coordinator) == {("t", 0): 1}


@pytest.mark.parametrize("shutdown_cleanly", [True, False])
async def test_offsets_and_membership_survive_restart(tmp_path, autojump_clock,
                                                      shutdown_cleanly):
    config = make_config(tmp_path)
    node = make_node(config)
    async with trio.open_nursery() as nursery:
        coord = GroupCoordinator(config, node.internal.offsets, trio_wall_clock)
        await nursery.start(coord.run)
        a, b = await stable_group(coord, nursery, 2)
        coord.offsets.commit("g", 1, a, None, -1, commits((0, 11), (1, 12)))
        coord.offsets.commit("g", 1, b, None, -1, commits((1, 13)))
        coord.offsets.commit("solo", -1, "", None, -1, commits((0, 1)))
        coord.offsets.delete("solo", [("t", 0)])
        coord.offsets.commit("gone", -1, "", None, -1, commits((0, 1)))
        admin.delete_groups(coord.groups, coord.offsets, ["gone"])
        nursery.cancel_scope.cancel()
    if shutdown_cleanly:
        await node.replicas.shutdown()

    reloaded = make_node(config)
    assert reloaded.metadata.topic(OFFSETS_TOPIC).internal
    async with trio.open_nursery() as nursery:
        coord = GroupCoordinator(config, reloaded.internal.offsets, trio_wall_clock)
        await nursery.start(coord.run)
        assert fetched(coord) == {("t", 0): 11, ("t", 1): 13}
        # "solo" lost its last offset and had no metadata: it is gone, as in Kafka.
        assert set(coord.groups) == {"g"}
        group = coord.groups["g"]
        assert (group.state, group.generation_id, group.leader_id) == (S.STABLE, 1, a)
        assert list(group.members) == [a, b]
        # Members carry on without a rebalance...
        assert coord.heartbeat("g", 1, a, None) is E.NONE
        sync = await coord.sync_group("g", 1, b, None, None, None, {})
        assert sync.assignment == f"assign-{b}".encode()
        # ...and one that does not come back is expired as usual.
        while coord.heartbeat("g", 1, a, None) is E.NONE:
            await trio.sleep(1)
        assert list(coord.groups["g"].members) == [a]
        nursery.cancel_scope.cancel()
