"""Coordinators that follow partition leadership (cluster mode): load on
becoming leader, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS otherwise, and
unload (answering parked requests) on losing it. Single-node core underneath;
leadership changes are told to the coordinators as the cluster node tells them.
"""

from __future__ import annotations

import itertools

import trio
import trio.testing

from broker.coordinator import GroupCoordinator
from broker.coordinator.offsets import PartitionCommit
from broker.transactions import TransactionCoordinator
from broker.transactions.markers import MarkerWriter
from protocol.errors import ErrorCode as E
from replication.internal_topics import OFFSETS_TOPIC, TRANSACTION_TOPIC
from tests.coordinator.conftest import trio_wall_clock
from tests.coordinator.test_coordinator import join_in_background, request


async def _coordinator(nursery, config, node) -> GroupCoordinator:
    coord = GroupCoordinator(config, node.internal.offsets, trio_wall_clock,
                             follow_leadership=True)
    await coord.store.ensure_topic()
    await nursery.start(coord.run)
    return coord


async def test_group_coordinator_loads_and_unloads_with_leadership(nursery, config, node):
    coord = await _coordinator(nursery, config, node)
    tp = (OFFSETS_TOPIC, coord.store.partition_of("g"))
    assert coord.check("g") is E.NOT_COORDINATOR

    coord.on_leadership(tp, True)
    assert coord.check("g") is E.COORDINATOR_LOAD_IN_PROGRESS
    await trio.testing.wait_all_tasks_blocked()
    assert coord.check("g") is E.NONE
    commit = [PartitionCommit("t", 0, 42, -1, None)]
    assert await coord.commit_offsets("g", -1, "", None, -1, commit, version=9) == [E.NONE]

    coord.on_leadership(tp, False)
    assert coord.check("g") is E.NOT_COORDINATOR and "g" not in coord.groups

    coord.on_leadership(tp, True)  # leadership back: rebuilt from the log
    await trio.testing.wait_all_tasks_blocked()
    [(_, value)] = coord.offsets.fetch("g", [("t", 0)])
    assert value is not None and value.offset == 42


async def test_unloading_answers_parked_joins_not_coordinator(nursery, config, node):
    coord = await _coordinator(nursery, config, node)
    tp = (OFFSETS_TOPIC, coord.store.partition_of("g"))
    coord.on_leadership(tp, True)
    await trio.testing.wait_all_tasks_blocked()
    box = await join_in_background(nursery, coord, request(v4=False))  # waits: initial delay
    assert not box
    coord.on_leadership(tp, False)
    await trio.testing.wait_all_tasks_blocked()
    assert box and box[0].error is E.NOT_COORDINATOR


async def test_leadership_lost_before_the_load_ran_leaves_it_unloaded(nursery, config, node):
    coord = await _coordinator(nursery, config, node)
    tp = (OFFSETS_TOPIC, coord.store.partition_of("g"))
    coord.on_leadership(tp, True)
    coord.on_leadership(tp, False)
    await trio.testing.wait_all_tasks_blocked()
    assert coord.check("g") is E.NOT_COORDINATOR


async def test_transaction_coordinator_follows_leadership(nursery, config, node):
    groups = await _coordinator(nursery, config, node)
    pids = itertools.count(7)

    async def allocate() -> int:
        return next(pids)

    txns = TransactionCoordinator(config, node.internal.transactions, groups,
                                  MarkerWriter(0, node.replicas, node.metadata, 30_000),
                                  allocate, trio_wall_clock, follow_leadership=True)
    await txns.store.ensure_topic()
    await nursery.start(txns.run)
    tp = (TRANSACTION_TOPIC, txns.store.partition_of("tx"))
    assert (await txns.init_producer_id("tx", 60_000, None)).error is E.NOT_COORDINATOR
    txns.on_leadership(tp, True)
    assert (await txns.init_producer_id("tx", 60_000, None)).error \
        is E.COORDINATOR_LOAD_IN_PROGRESS
    await trio.testing.wait_all_tasks_blocked()
    first = await txns.init_producer_id("tx", 60_000, None)
    assert (first.error, first.producer_id, first.producer_epoch) == (E.NONE, 7, 0)

    txns.on_leadership(tp, False)
    assert "tx" not in txns.txns
    assert await txns.end_txn("tx", 7, 0, True) is E.NOT_COORDINATOR
    txns.on_leadership(tp, True)
    await trio.testing.wait_all_tasks_blocked()
    again = await txns.init_producer_id("tx", 60_000, None)  # same id, next epoch
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, 7, 1)
