"""The controller's election and ISR rules (pure functions)."""

from __future__ import annotations

import pytest

from replication.elections import (
    NO_LEADER,
    LeaderAndIsr,
    assign_replicas,
    controlled_shutdown_election,
    initial_state,
    offline_election,
    preferred_election,
    remove_replica,
)

REPLICAS = [1, 2, 3]
CE = 7  # controller epoch


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, 1, version=3)


def test_initial_state_leads_with_the_first_live_replica():
    assert initial_state(REPLICAS, {2, 3}, CE) == LeaderAndIsr(2, 0, (2, 3), CE)
    assert initial_state(REPLICAS, set(), CE) is None


def test_offline_election_prefers_assignment_order_within_the_live_isr():
    got = offline_election(REPLICAS, state(NO_LEADER, (3, 2)), {2, 3}, False, CE)
    assert (got.leader, got.isr, got.leader_epoch, got.controller_epoch) == (2, (3, 2), 5, CE)
    assert got.version == 3  # the CAS expects the version read


def test_offline_election_without_a_live_isr_member_is_clean_by_default():
    assert offline_election(REPLICAS, state(NO_LEADER, (1,)), {2, 3}, False, CE) is None
    unclean = offline_election(REPLICAS, state(NO_LEADER, (1,)), {2, 3}, True, CE)
    assert (unclean.leader, unclean.isr) == (2, (2,))


def test_removing_a_replica():
    assert remove_replica(state(1, (1, 2, 3)), 2, CE).isr == (1, 3)
    led = remove_replica(state(1, (1, 2, 3)), 1, CE)
    assert (led.leader, led.isr, led.leader_epoch) == (NO_LEADER, (2, 3), 5)
    # The last ISR member stays, so only it can lead cleanly when it returns.
    last = remove_replica(state(1, (1,)), 1, CE)
    assert (last.leader, last.isr) == (NO_LEADER, (1,))
    assert remove_replica(state(1, (1, 2)), 3, CE) is None


def test_controlled_shutdown_moves_leadership_inside_the_isr():
    got = controlled_shutdown_election(REPLICAS, state(1, (1, 2, 3)), {1, 2, 3}, {1}, CE)
    assert (got.leader, got.isr, got.leader_epoch) == (2, (2, 3), 5)
    assert controlled_shutdown_election(REPLICAS, state(1, (1,)), {1, 2, 3}, {1}, CE) is None


def test_preferred_election():
    got = preferred_election(REPLICAS, state(2, (2, 1)), {1, 2}, CE)
    assert (got.leader, got.leader_epoch) == (1, 5)
    assert preferred_election(REPLICAS, state(2, (2,)), {1, 2}, CE) is None   # not in sync
    assert preferred_election(REPLICAS, state(2, (2, 1)), {2}, CE) is None    # not live
    assert preferred_election(REPLICAS, state(1, (1, 2)), {1, 2}, CE) is None  # already


@pytest.mark.parametrize("brokers,partitions,rf", [([1, 2, 3], 6, 3), ([1, 2, 3, 4], 8, 2),
                                                   ([5], 3, 1), ([1, 2, 3], 50, 3)])
def test_assignment_spreads_leaders_and_never_repeats_a_broker(brokers, partitions, rf):
    for seed in range(4):
        got = assign_replicas(brokers, partitions, rf, seed=seed)
        assert sorted(got) == list(range(partitions))
        for replicas in got.values():
            assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= set(brokers)
        leaders = [r[0] for r in got.values()]
        counts = [leaders.count(b) for b in brokers]
        assert max(counts) - min(counts) <= 1


def test_assignment_of_added_partitions_continues_the_pattern():
    whole = assign_replicas([1, 2, 3], 6, 2, seed=1)
    tail = assign_replicas([1, 2, 3], 3, 2, start_partition=3, seed=1)
    assert tail == {p: whole[p] for p in (3, 4, 5)}


def test_members_registered_after_the_state_was_written_leave_the_isr():
    from replication.elections import NO_LEADER, LeaderAndIsr, drop_restarted

    state = LeaderAndIsr(1, 4, (1, 2, 3), 7, version=9, zxid=100)
    # Broker 2 registered (epoch = its znode's zxid) after the ISR was written.
    assert drop_restarted(state, {1: 50, 2: 150, 3: 60}, 8) == \
        LeaderAndIsr(1, 4, (1, 3), 8, version=9, zxid=100)
    # The leader restarted: it loses the leadership (a new epoch, no leader yet).
    moved = drop_restarted(state, {1: 150, 2: 50, 3: 60}, 8)
    assert moved is not None and (moved.leader, moved.leader_epoch, moved.isr) == \
        (NO_LEADER, 5, (2, 3))
    # Nobody restarted, the zxid is unknown, or every member restarted: no change.
    assert drop_restarted(state, {1: 50, 2: 60, 3: 70}, 8) is None
    assert drop_restarted(LeaderAndIsr(1, 4, (1, 2), 7), {1: 500, 2: 600}, 8) is None
    assert drop_restarted(state, {1: 150, 2: 160, 3: 170}, 8) is None


def test_rack_alternated_order_takes_one_broker_per_rack_in_turn():
    from replication.elections import rack_alternated

    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "a"}
    assert rack_alternated(racks) == [1, 3, 5, 2, 4, 6]


@pytest.mark.parametrize("racks,rf", [
    ({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}, 3),
    ({1: "a", 2: "a", 3: "a", 4: "b"}, 2),
    ({1: "a", 2: "b", 3: "a", 4: "b", 5: "a", 6: "b"}, 3),
    ({1: "x", 2: "y", 3: "z"}, 3),
])
def test_rack_aware_assignment_spreads_every_partition_over_racks(racks, rf):
    from replication.elections import assign_replicas_rack_aware

    rack_count = len(set(racks.values()))
    for seed in range(6):
        got = assign_replicas_rack_aware(racks, 24, rf, seed=seed)
        assert sorted(got) == list(range(24))
        for replicas in got.values():
            assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= set(racks)
            assert len({racks[b] for b in replicas}) == min(rf, rack_count)
        leaders = [r[0] for r in got.values()]
        counts = [leaders.count(b) for b in racks]
        assert max(counts) - min(counts) <= 1


def test_rack_aware_assignment_of_added_partitions_continues_the_pattern():
    from replication.elections import assign_replicas_rack_aware

    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    whole = assign_replicas_rack_aware(racks, 8, 2, seed=3)
    tail = assign_replicas_rack_aware(racks, 4, 2, start_partition=4, seed=3)
    assert tail == {p: whole[p] for p in (4, 5, 6, 7)}
