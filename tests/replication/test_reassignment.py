"""Reassignment bookkeeping (KIP-455): which replicas a move adds and removes,
and the widened replica set while it runs (target first, so its head is the
preferred leader)."""

from __future__ import annotations

from replication.reassignment import Reassignment


def test_growing_the_replication_factor():
    move = Reassignment(original=(1, 2), target=(1, 2, 3))
    assert (move.adding, move.removing, move.replicas) == ([3], [], [1, 2, 3])


def test_moving_a_partition_keeps_the_old_replicas_until_done():
    move = Reassignment(original=(1, 2), target=(3, 2))
    assert move.adding == [3]
    assert move.removing == [1]
    assert move.replicas == [3, 2, 1]


def test_shrinking_removes_without_adding():
    move = Reassignment(original=(1, 2, 3), target=(2,))
    assert (move.adding, move.removing, move.replicas) == ([], [1, 3], [2, 1, 3])
