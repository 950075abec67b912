"""Replication metrics: the gauges computed from partition and controller state,
the snapshot the exporter reads (never the live state), and the meters counted
where Kafka counts them (ISR changes by the leader, follower fetch bytes,
broker-change handling and unclean elections on the controller)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from prometheus_client import CollectorRegistry

from config import BrokerConfig
from replication.controller import Controller
from replication.controller_context import ControllerContext
from replication.controller_requests import IsrChange
from replication.elections import LEADER_DURING_DELETE, NO_LEADER, LeaderAndIsr
from replication.fetch import FetchParams, FetchPartition
from replication.isr import IsrManager
from replication.metadata_cache import BrokerEndpoint
from replication.metrics import (
    ControllerGauges,
    ReplicaGauges,
    ReplicationCollector,
)
from replication.zk_membership import RegisteredBroker
from tests.helpers import batch
from tests.replication.hosting import host


def total(counter: Any) -> float:
    """A counter's value, as exported."""
    return next(s.value for f in counter.collect() for s in f.samples
                if s.name.endswith("_total"))


def scrape(collector: ReplicationCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {s.name: s.value for family in registry.collect() for s in family.samples}


# -- gauges ---------------------------------------------------------------------


def test_replica_gauges_count_led_partitions_by_isr_size(replicas):
    host(replicas, ("full", 0), 1, [1, 2, 3])
    host(replicas, ("at-min", 0), 1, [1, 2])
    host(replicas, ("under-min", 0), 1, [1])
    host(replicas, ("followed", 0), 2, [2])  # a follower's ISR is not its to report
    gauges = ReplicaGauges.of(replicas.hosted(), 1)
    assert gauges == ReplicaGauges(partition_count=4, leader_count=3, under_replicated=2,
                                   under_min_isr=1, at_min_isr=1)


def test_a_single_replica_partition_is_never_under_replicated(replicas):
    host(replicas, ("rf1", 0), 1, [1], replicas=(1,), min_isr=1)
    gauges = ReplicaGauges.of(replicas.hosted(), 1)
    assert (gauges.under_replicated, gauges.under_min_isr, gauges.at_min_isr) == (0, 0, 1)


def test_offline_partitions_are_those_without_a_live_leader():
    ctx = ControllerContext(brokers={1: BrokerEndpoint(1, "h", 1), 2: BrokerEndpoint(2, "h", 2)},
                            shutting_down={2})
    for name in ("live", "dead", "none", "shutting-down", "deleting", "never-elected"):
        ctx.assignments[(name, 0)] = [1, 2, 3]
    ctx.states = {("live", 0): LeaderAndIsr(1, 0, (1,), 0),
                  ("dead", 0): LeaderAndIsr(3, 0, (3,), 0),
                  ("none", 0): LeaderAndIsr(NO_LEADER, 0, (3,), 0),
                  ("shutting-down", 0): LeaderAndIsr(2, 0, (2,), 0),
                  ("deleting", 0): LeaderAndIsr(LEADER_DURING_DELETE, 0, (1,), 0)}
    assert ctx.offline_partition_count() == 4


def test_controller_gauges_are_zero_unless_active():
    controller = Controller(BrokerConfig.from_mapping({"node.id": "1"}), None,  # type: ignore[arg-type]
                            FakeChannel())  # type: ignore[arg-type]
    controller.ctx.assignments[("t", 0)] = [1]
    assert ControllerGauges.of(controller) == ControllerGauges(0, 0)
    controller.active = True
    assert ControllerGauges.of(controller) == ControllerGauges(1, 1)


# -- the snapshot -------------------------------------------------------------------


def test_the_exporter_reads_the_snapshot_not_the_live_state(replicas):
    host(replicas, ("t", 0), 1, [1, 2, 3])
    collector = ReplicationCollector(replicas, None)
    collector.snapshot()
    replicas.followers.update_isr(("t", 0), [1])  # the event loop moves on...
    values = scrape(collector)
    assert values["tierd_UnderReplicatedPartitions"] == 0  # ...the scrape sees the snapshot
    assert values["tierd_LeaderCount"] == 1 and values["tierd_PartitionCount"] == 1
    collector.snapshot()
    assert scrape(collector)["tierd_UnderReplicatedPartitions"] == 1


def test_single_node_mode_exports_no_controller_gauges(replicas):
    collector = ReplicationCollector(replicas, None)
    collector.snapshot()
    values = scrape(collector)
    assert "tierd_ActiveControllerCount" not in values
    assert values["tierd_IsrShrinksPerSec_total"] == 0
    assert values["tierd_ReplicationBytesOutPerSec_total"] == 0


async def test_the_snapshot_task_refreshes_the_gauges(replicas, autojump_clock):
    host(replicas, ("t", 0), 1, [1, 2, 3])
    collector = ReplicationCollector(replicas, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(collector.run, 1.0)
        await trio.sleep(0.5)
        replicas.followers.update_isr(("t", 0), [1, 2])
        assert collector.latest.replica.under_replicated == 0
        await trio.sleep(1)
        assert collector.latest.replica.under_replicated == 1
        nursery.cancel_scope.cancel()


# -- meters ------------------------------------------------------------------------


def committing_alter(asked: list[list[int]]) -> Any:
    """A controller that commits every AlterPartition, recording the ISRs asked for."""

    async def alter(changes: list[IsrChange]):
        asked.extend(c.isr for c in changes)
        return [("", LeaderAndIsr(1, c.leader_epoch, tuple(c.isr), 0, c.partition_epoch + 1))
                for c in changes]

    return alter


async def test_isr_shrink_and_expand_are_counted_once_committed(replicas, autojump_clock):
    tp = ("t", 0)
    part = host(replicas, tp, 1, [1, 2, 3])
    asked: list[list[int]] = []
    alter = committing_alter(asked)
    isr = IsrManager(replicas.config, replicas, alter)
    stats = replicas.stats
    async with trio.open_nursery() as nursery:
        await nursery.start(isr.run)
        replicas.followers.update_follower(tp, 2, 0)
        replicas.followers.update_follower(tp, 3, 0)
        # Replica 3 stops fetching; 2 keeps fetching from the log end.
        for _ in range(6):
            await trio.sleep(0.4)
            replicas.followers.update_follower(tp, 2, part.log.end_offset)
        assert asked == [[1, 2]] and part.isr == [1, 2]
        assert (total(stats.isr_shrinks), total(stats.isr_expands)) == (1, 0)
        replicas.followers.update_follower(tp, 3, part.log.end_offset)
        await trio.testing.wait_all_tasks_blocked()
        assert part.isr == [1, 2, 3]
        assert (total(stats.isr_shrinks), total(stats.isr_expands)) == (1, 1)
        nursery.cancel_scope.cancel()


async def test_a_refused_isr_change_is_not_counted(replicas, autojump_clock):
    tp = ("t", 0)
    part = host(replicas, tp, 1, [1, 2, 3])

    async def alter(changes: list[IsrChange]):
        return [("INVALID_UPDATE_VERSION", LeaderAndIsr(1, c.leader_epoch, (1, 2, 3), 0, 5))
                for c in changes]

    isr = IsrManager(replicas.config, replicas, alter)
    async with trio.open_nursery() as nursery:
        await nursery.start(isr.run)
        await trio.sleep(1.6)
        nursery.cancel_scope.cancel()
    assert part.isr == [1, 2, 3]
    assert total(replicas.stats.isr_shrinks) == 0


async def test_follower_fetch_bytes_count_as_replication_bytes_out(replicas):
    tp = ("t", 0)
    host(replicas, tp, 1, [1], min_isr=1)  # the high watermark follows the log end
    await replicas.append(tp, batch([b"x" * 100]), acks=1)
    await replicas.append(tp, batch([b"y" * 100]), acks=1)
    consumer = await replicas.fetch(FetchParams([FetchPartition("t", 0, 0, 1 << 20)]))
    stats = replicas.stats
    assert total(stats.bytes_out) == 0  # a consumer's fetch is not replication
    follower = await replicas.fetch(FetchParams([FetchPartition("t", 0, 0, 1 << 20)],
                                                replica_id=2))
    assert total(stats.bytes_out) == len(follower[0].records) == len(consumer[0].records) > 100


# -- the controller ----------------------------------------------------------------


class FakeChannel:
    resync: Any = None

    def set_brokers(self, brokers: Any) -> None:
        pass

    def send_update_metadata(self, *args: Any) -> None:
        pass

    def send_leader_and_isr(self, *args: Any) -> None:
        pass


class FakePartitionStates:
    """Partition state writes always succeed (version + 1, at a growing zxid)."""

    zxid = 1000

    async def update_partition_state(self, topic: str, partition: int, state: LeaderAndIsr,
                                     expected_version: int) -> tuple[int, int]:
        self.zxid += 1
        return expected_version + 1, self.zxid

    async def update_partition_states(self, updates: list[tuple[str, int, LeaderAndIsr, int]]
                                      ) -> list[tuple[int, int]]:
        return [await self.update_partition_state(*u) for u in updates]


def broker(node: int, epoch: int = 1) -> RegisteredBroker:
    return RegisteredBroker(node, BrokerEndpoint(node, "127.0.0.1", 9000 + node), epoch)


async def test_broker_changes_are_timed_and_unclean_elections_counted(autojump_clock):
    config = BrokerConfig.from_mapping({"node.id": "1"})
    controller = Controller(config, None, FakeChannel())  # type: ignore[arg-type]
    controller.partition_states = FakePartitionStates()  # type: ignore[assignment]
    ctx = controller.ctx
    ctx.brokers = {n: broker(n).endpoint for n in (1, 2, 3)}
    ctx.broker_epochs = dict.fromkeys((1, 2, 3), 1)
    ctx.assignments = {("clean", 0): [2, 3, 1], ("unclean", 0): [2, 3, 1]}
    ctx.unclean = {"clean": False, "unclean": True}
    ctx.states = {("clean", 0): LeaderAndIsr(2, 0, (2, 3), 0),
                  ("unclean", 0): LeaderAndIsr(2, 0, (2,), 0)}
    stats = controller.stats
    await controller.elector.on_brokers([broker(1), broker(3)])  # broker 2 lost
    assert ctx.states[("clean", 0)].leader == 3
    assert ctx.states[("unclean", 0)].leader == 3
    assert total(stats.unclean_elections) == 1
    await controller.elector.on_brokers([broker(1), broker(3)])  # no change: no event
    await controller.elector.on_brokers([broker(1), broker(2, epoch=2), broker(3)])  # 2 returns
    samples = {s.name: s.value for f in stats.leader_election_ms.collect() for s in f.samples}
    assert samples["tierd_LeaderElectionRateAndTimeMs_count"] == 2
    assert total(stats.unclean_elections) == 1


async def test_a_follower_out_of_the_isr_rejoins_only_on_a_fetch_of_its_own(
        replicas, autojump_clock):
    """Its last report from before it left (a broker killed, its disk wiped)
    must not readmit it when the next ISR check runs."""
    tp = ("t", 0)
    part = host(replicas, tp, 1, [1, 2, 3])
    asked: list[list[int]] = []
    alter = committing_alter(asked)
    isr = IsrManager(replicas.config, replicas, alter)
    await replicas.append(tp, batch([b"a"]), acks=1)
    replicas.followers.update_follower(tp, 2, 1)
    replicas.followers.update_follower(tp, 3, 1)
    assert part.high_watermark == 1
    # The controller drops 3 (its broker's session ended): a LeaderAndIsr.
    replicas.followers.update_isr(tp, [1, 2])
    async with trio.open_nursery() as nursery:
        await nursery.start(isr.run)
        for _ in range(4):
            await trio.sleep(0.4)
            replicas.followers.update_follower(tp, 2, part.log.end_offset)
        assert asked == [] and part.isr == [1, 2]  # 3 is not readmitted by its old report
        replicas.followers.update_follower(tp, 3, 1)  # the restarted broker fetched up to the end
        await trio.testing.wait_all_tasks_blocked()
        assert asked == [[1, 2, 3]] and part.isr == [1, 2, 3]
        nursery.cancel_scope.cancel()
