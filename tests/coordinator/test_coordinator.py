"""Membership and rebalances of GroupCoordinator, timed by trio's MockClock.

Every test takes ``autojump_clock``: trio's clock jumps to the next timer
whenever all tasks are blocked, so session and rebalance timeouts take no
real time and elapsed times can be asserted exactly.
"""

from __future__ import annotations

import pytest
import trio

from broker.coordinator import GroupCoordinator
from broker.coordinator.group import GroupState, JoinRequest, JoinResult
from protocol.errors import ErrorCode as E

S = GroupState
SESSION_MS = 10_000
REBALANCE_MS = 30_000
INITIAL_DELAY_S = 3.0  # group.initial.rebalance.delay.ms default


def request(member_id="", group="g", *, instance=None, protocols=(("range", b"meta"),),
            session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS, protocol_type="consumer",
            v4=True, v9=False, client_id="c") -> JoinRequest:
    return JoinRequest(group, member_id, instance, client_id, "/127.0.0.1", session_ms,
                       rebalance_ms, protocol_type, list(protocols), v4, v9)


async def join_in_background(nursery: trio.Nursery, coord: GroupCoordinator,
                             req: JoinRequest) -> list[JoinResult]:
    """Start a JoinGroup; the returned list receives its result."""
    box: list[JoinResult] = []

    async def run() -> None:
        box.append(await coord.join_group(req))

    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()
    return box


async def until(condition, step: float = 0.01) -> None:
    while not condition():
        await trio.sleep(step)


async def new_member_id(coord: GroupCoordinator, group="g", **kw) -> str:
    first = await coord.join_group(request("", group, **kw))
    assert first.error is E.MEMBER_ID_REQUIRED and first.member_id
    return first.member_id


async def stable_group(coord: GroupCoordinator, nursery: trio.Nursery, n: int,
                       group="g", session_ms=SESSION_MS) -> list[str]:
    """Bring ``n`` members to a Stable generation; returns their ids, leader first."""
    ids = [await new_member_id(coord, group) for _ in range(n)]
    boxes = [await join_in_background(nursery, coord, request(m, group, session_ms=session_ms))
             for m in ids]
    while not all(boxes):
        await trio.sleep(0.1)
    results = [b[0] for b in boxes]
    gen = results[0].generation_id
    leader = results[0].leader_id
    assignments = {m: f"assign-{m}".encode() for m in ids}
    synced = await coord.sync_group(group, gen, leader, None, None, None, assignments)
    assert synced.error is E.NONE
    for m in ids:
        if m != leader:
            assert (await coord.sync_group(group, gen, m, None, None, None, {})).error is E.NONE
    assert coord.groups[group].state is S.STABLE
    return [leader] + [m for m in ids if m != leader]


async def test_member_id_required_then_join_after_initial_delay(coordinator, autojump_clock):
    member_id = await new_member_id(coordinator)
    assert member_id.startswith("c-")
    start = trio.current_time()
    result = await coordinator.join_group(request(member_id))
    assert trio.current_time() - start == pytest.approx(INITIAL_DELAY_S)
    assert result.error is E.NONE and result.generation_id == 1
    assert result.leader_id == member_id and result.protocol_name == "range"
    assert result.members == [(member_id, None, b"meta")]
    assert coordinator.groups["g"].state is S.COMPLETING_REBALANCE
    sync = await coordinator.sync_group("g", 1, member_id, None, "consumer", "range",
                                        {member_id: b"mine"})
    assert (sync.error, sync.assignment) == (E.NONE, b"mine")
    assert coordinator.groups["g"].state is S.STABLE
    assert coordinator.heartbeat("g", 1, member_id, None) is E.NONE


async def test_old_join_versions_get_a_member_id_at_once(coordinator, autojump_clock):
    result = await coordinator.join_group(request("", v4=False))
    assert result.error is E.NONE and result.member_id and result.generation_id == 1


async def test_initial_delay_waits_for_more_members(coordinator, nursery, autojump_clock):
    a, b = await new_member_id(coordinator), await new_member_id(coordinator)
    start = trio.current_time()
    box_a = await join_in_background(nursery, coordinator, request(a))
    await trio.sleep(2)
    box_b = await join_in_background(nursery, coordinator, request(b))
    await until(lambda: bool(box_a and box_b))
    # b arrived inside the first delay, so the delay was armed once more.
    assert trio.current_time() - start == pytest.approx(2 * INITIAL_DELAY_S, abs=0.02)
    assert box_a[0].generation_id == box_b[0].generation_id == 1
    assert len(box_a[0].members) == 2 and box_b[0].members == []


async def test_new_member_triggers_rebalance_of_stable_group(coordinator, nursery,
                                                           autojump_clock):
    (a,) = await stable_group(coordinator, nursery, 1)
    b = await new_member_id(coordinator)
    box_b = await join_in_background(nursery, coordinator, request(b))
    assert coordinator.groups["g"].state is S.PREPARING_REBALANCE
    assert coordinator.heartbeat("g", 1, a, None) is E.REBALANCE_IN_PROGRESS
    assert not box_b
    result_a = await coordinator.join_group(request(a))
    await trio.testing.wait_all_tasks_blocked()
    assert result_a.generation_id == box_b[0].generation_id == 2
    assert result_a.leader_id == a and {m for m, _, _ in result_a.members} == {a, b}
    assert box_b[0].members == []
    # Stale generation everywhere now.
    assert coordinator.heartbeat("g", 1, a, None) is E.ILLEGAL_GENERATION
    assert (await coordinator.sync_group("g", 1, a, None, None, None, {})).error is \
        E.ILLEGAL_GENERATION


async def test_follower_sync_waits_for_leader(coordinator, nursery, autojump_clock):
    ids = [await new_member_id(coordinator) for _ in range(2)]
    boxes = [await join_in_background(nursery, coordinator, request(m)) for m in ids]
    await until(lambda: all(boxes))
    leader = boxes[0][0].leader_id
    follower = next(m for m in ids if m != leader)
    parked: list = []

    async def follower_sync() -> None:
        parked.append(await coordinator.sync_group("g", 1, follower, None, None, None, {}))

    nursery.start_soon(follower_sync)
    await trio.testing.wait_all_tasks_blocked()
    assert not parked
    await coordinator.sync_group("g", 1, leader, None, None, None, {follower: b"F", leader: b"L"})
    await trio.testing.wait_all_tasks_blocked()
    assert (parked[0].error, parked[0].assignment) == (E.NONE, b"F")


async def test_session_expiry_removes_member_and_rebalances(coordinator, nursery,
                                                            autojump_clock):
    a, b = await stable_group(coordinator, nursery, 2)
    start = trio.current_time()
    # Only a heartbeats; b's session runs out.
    while coordinator.heartbeat("g", 1, a, None) is E.NONE:
        await trio.sleep(1)
    waited = trio.current_time() - start
    assert SESSION_MS / 1000 <= waited <= SESSION_MS / 1000 + 1
    assert b not in coordinator.groups["g"].members
    result = await coordinator.join_group(request(a))
    assert result.generation_id == 2 and [m for m, _, _ in result.members] == [a]
    assert coordinator.heartbeat("g", 2, b, None) is E.UNKNOWN_MEMBER_ID


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(coordinator, nursery,
                                                                  autojump_clock):
    a, b = await stable_group(coordinator, nursery, 2)
    start = trio.current_time()
    c = await new_member_id(coordinator)
    box_c = await join_in_background(nursery, coordinator, request(c))
    box_a = await join_in_background(nursery, coordinator, request(a))
    # b keeps heartbeating (so its session lives) but never rejoins.
    while not box_c:
        assert coordinator.heartbeat("g", 1, b, None) in (E.REBALANCE_IN_PROGRESS,
                                                          E.UNKNOWN_MEMBER_ID)
        await trio.sleep(1)
    assert trio.current_time() - start == pytest.approx(REBALANCE_MS / 1000, abs=1)
    assert box_a[0].generation_id == 2 and set(coordinator.groups["g"].members) == {a, c}


async def test_member_that_never_syncs_is_dropped(coordinator, nursery, autojump_clock):
    ids = [await new_member_id(coordinator) for _ in range(2)]
    boxes = [await join_in_background(nursery, coordinator, request(m)) for m in ids]
    await until(lambda: all(boxes))
    leader = boxes[0][0].leader_id
    lazy = next(m for m in ids if m != leader)
    await coordinator.sync_group("g", 1, leader, None, None, None, {})
    for _ in range(REBALANCE_MS // 1000 + 1):  # the leader stays alive
        coordinator.heartbeat("g", 1, leader, None)
        await trio.sleep(1)
    group = coordinator.groups["g"]
    assert lazy not in group.members and group.state is S.PREPARING_REBALANCE


async def test_join_errors(coordinator, nursery, autojump_clock):
    assert (await coordinator.join_group(request(group=""))).error is E.INVALID_GROUP_ID
    for bad in (5999, 1_800_001):
        assert (await coordinator.join_group(request(session_ms=bad))).error is \
            E.INVALID_SESSION_TIMEOUT
    assert (await coordinator.join_group(request("nobody"))).error is E.UNKNOWN_MEMBER_ID
    assert (await coordinator.join_group(request(protocols=()))).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coordinator.join_group(request(protocol_type=""))).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    await stable_group(coordinator, nursery, 1)
    assert (await coordinator.join_group(request(protocol_type="connect"))).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coordinator.join_group(request(protocols=[("sticky", b"")]))).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coordinator.join_group(request("nobody"))).error is E.UNKNOWN_MEMBER_ID


async def test_sync_and_heartbeat_errors(coordinator, nursery, autojump_clock):
    (a,) = await stable_group(coordinator, nursery, 1)
    assert coordinator.heartbeat("nope", 1, a, None) is E.UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("g", 1, "x", None) is E.UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("", 1, a, None) is E.INVALID_GROUP_ID
    assert (await coordinator.sync_group("g", 1, a, None, "connect", None, {})).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coordinator.sync_group("g", 1, a, None, None, "rr", {})).error is \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coordinator.sync_group("g", 1, "x", None, None, None, {})).error is \
        E.UNKNOWN_MEMBER_ID


async def test_stable_follower_rejoin_with_same_metadata_changes_nothing(coordinator, nursery,
                                                                         autojump_clock):
    _, b = await stable_group(coordinator, nursery, 2)
    result = await coordinator.join_group(request(b))
    assert (result.error, result.generation_id, result.members) == (E.NONE, 1, [])
    assert coordinator.groups["g"].state is S.STABLE


async def test_leave_group(coordinator, nursery, autojump_clock):
    a, b = await stable_group(coordinator, nursery, 2)
    code, errors = coordinator.leave_group("g", [(b, None), ("ghost", None)])
    assert code is E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert coordinator.groups["g"].state is S.PREPARING_REBALANCE
    result = await coordinator.join_group(request(a))
    assert result.generation_id == 2
    assert coordinator.leave_group("g", [(a, None)]) == (E.NONE, [E.NONE])
    # Nobody is left to wait for: the rebalance ends at once, in Empty.
    group = coordinator.groups["g"]
    assert (group.state, group.generation_id) == (S.EMPTY, 3)
    assert coordinator.leave_group("unknown", [("m", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


async def test_last_member_leaving_empties_group(coordinator, nursery, autojump_clock):
    (a,) = await stable_group(coordinator, nursery, 1)
    coordinator.leave_group("g", [(a, None)])
    group = coordinator.groups["g"]
    assert group.state is S.EMPTY and group.generation_id == 2 and not group.members


async def test_pending_member_that_never_rejoins_expires(coordinator, autojump_clock):
    pending = await new_member_id(coordinator)
    assert pending in coordinator.groups["g"].pending_members
    await trio.sleep(SESSION_MS / 1000 + 0.1)
    assert pending not in coordinator.groups["g"].pending_members
    # It can no longer join with that id.
    assert (await coordinator.join_group(request(pending))).error is E.UNKNOWN_MEMBER_ID


async def test_static_member_restart_keeps_generation(coordinator, nursery, autojump_clock):
    a = await new_member_id(coordinator)
    box_a = await join_in_background(nursery, coordinator, request(a))
    box_s = await join_in_background(nursery, coordinator, request("", instance="i-1"))
    await until(lambda: bool(box_a and box_s))
    static_id = box_s[0].member_id
    assert box_a[0].leader_id == a  # a joined first
    await coordinator.sync_group("g", 1, a, None, None, None, {a: b"A", static_id: b"S"})
    await coordinator.sync_group("g", 1, static_id, "i-1", None, None, {})
    # The static member restarts: no member id, same instance id.
    again = await coordinator.join_group(request("", instance="i-1"))
    assert again.error is E.NONE and again.generation_id == 1 and again.member_id != static_id
    assert coordinator.groups["g"].state is S.STABLE
    sync = await coordinator.sync_group("g", 1, again.member_id, "i-1", None, None, {})
    assert sync.assignment == b"S"
    assert coordinator.heartbeat("g", 1, static_id, "i-1") is E.FENCED_INSTANCE_ID
    assert coordinator.heartbeat("g", 1, static_id, None) is E.UNKNOWN_MEMBER_ID
    assert coordinator.leave_group("g", [(static_id, "i-1")]) == (E.NONE,
                                                                  [E.FENCED_INSTANCE_ID])
    assert coordinator.leave_group("g", [("", "i-1"), ("", "i-9")]) == \
        (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])


async def test_static_leader_restart_skips_assignment_on_v9(coordinator, autojump_clock):
    first = await coordinator.join_group(request("", instance="i-1"))
    await coordinator.sync_group("g", 1, first.member_id, "i-1", None, None,
                                 {first.member_id: b"x"})
    again = await coordinator.join_group(request("", instance="i-1", v9=True))
    assert (again.error, again.generation_id, again.skip_assignment) == (E.NONE, 1, True)
    assert again.leader_id == again.member_id and len(again.members) == 1
    # Before v9 a rejoining static leader makes the group rebalance.
    third = await coordinator.join_group(request("", instance="i-1"))
    assert third.generation_id == 2 and not third.skip_assignment


async def test_rejoin_while_completing_rebalance_resends_the_join_response(
        coordinator, nursery, autojump_clock):
    a = await new_member_id(coordinator)
    first = await coordinator.join_group(request(a))
    again = await coordinator.join_group(request(a))
    assert (again.generation_id, again.members) == (first.generation_id, first.members)
    assert coordinator.groups["g"].state is S.COMPLETING_REBALANCE


async def test_rebalance_while_completing_answers_parked_syncs(coordinator, nursery,
                                                               autojump_clock):
    ids = [await new_member_id(coordinator) for _ in range(2)]
    boxes = [await join_in_background(nursery, coordinator, request(m)) for m in ids]
    await until(lambda: all(boxes))
    leader = boxes[0][0].leader_id
    follower = next(m for m in ids if m != leader)
    parked: list = []

    async def follower_sync() -> None:
        parked.append(await coordinator.sync_group("g", 1, follower, None, None, None, {}))

    nursery.start_soon(follower_sync)
    await trio.testing.wait_all_tasks_blocked()
    coordinator.leave_group("g", [(leader, None)])
    await trio.testing.wait_all_tasks_blocked()
    assert parked[0].error is E.REBALANCE_IN_PROGRESS
