"""How the acting controller changes leaders: it applies the rules of
``elections`` to what it knows (``ControllerContext``), persists each new
partition state with a compare-and-set, and tells the brokers.

``elections`` decides one partition at a time and touches nothing;
``controller`` decides *when* to act (its term, its watches, its lock, the
brokers' requests). What sits between the two lives here: choosing the
partitions an event affects, writing their new states to ZooKeeper in
pipelined batches, keeping the context in step with what was written, and
sending LeaderAndIsr and UpdateMetadata for what changed. The biggest user
is the reaction to brokers coming and going (``on_brokers``), which is the
event whose cost grows with the cluster, so its batching is kept together.

Concurrency: every method is called with the controller's lock held; nothing
here takes it.

Error handling: a compare-and-set that fails means the context is stale:
the partition's state is re-read from ZooKeeper and the change reported as
not written; the caller handles the next event from the fresh copy.
"""

from __future__ import annotations

from typing import Protocol

import structlog
import trio

from config import BrokerConfig
from protocol.partition import TopicPartition
from replication import elections
from replication.controller_channel import ControllerChannel
from replication.controller_context import ControllerContext
from replication.elections import NO_LEADER, LeaderAndIsr
from replication.metrics import ControllerStats
from replication.zk_membership import RegisteredBroker
from replication.zk_partition_states import ZkPartitionStates

log = structlog.get_logger(__name__)

# Partition-state writes sent to ZooKeeper at once (pipelined on the session).
WRITE_BATCH = 1000


class ElectingController(Protocol):
    """What the elector uses of the controller (``replication.controller``):
    read on every call, since the context is replaced at each new term."""

    ctx: ControllerContext
    partition_states: ZkPartitionStates
    channel: ControllerChannel
    stats: ControllerStats
    # The broker's config: unclean.leader.election.enable is read at each election.
    config: BrokerConfig


class Elector:
    """Leader elections and partition-state writes for the acting controller."""

    def __init__(self, controller: ElectingController) -> None:
        self.controller = controller

    # -- elections ---------------------------------------------------------------

    async def _ensure_leader(self, tp: TopicPartition) -> bool:
        """Give ``tp`` a state (new partition) or a live leader; True if it changed."""
        ctx = self.controller.ctx
        states = self.controller.partition_states
        replicas = ctx.assignments[tp]
        current = ctx.states.get(tp)
        if current is None:
            new = elections.initial_state(replicas, ctx.live, ctx.epoch)
            if new is None:
                return False
            created = await states.create_partition_state(tp[0], tp[1], new)
            if created is None:  # someone created it meanwhile: take theirs and retry
                got = await states.get_partition_state(tp[0], tp[1])
                if got is not None:
                    ctx.states[tp] = got
                return await self._ensure_leader(tp) if got is not None else False
            ctx.states[tp] = elections.LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                                    new.controller_epoch, *created)
            return True
        new = self._offline_choice(tp, current)
        if new is None:
            return False
        written = await self.write(tp, new)
        if written and new.leader != NO_LEADER and new.leader not in current.isr:
            self.controller.stats.unclean_elections.inc()
        return written

    def _offline_choice(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        """The state ``tp`` moves to when its leader is not live (None: it keeps
        a live leader, or nothing can change)."""
        ctx = self.controller.ctx
        if current.leader in ctx.live:
            return None
        new = elections.offline_election(ctx.assignments[tp], current, ctx.live,
                                         ctx.unclean_allowed(tp[0], self.controller.config[
                                             "unclean.leader.election.enable"]), ctx.epoch)
        if new is None:
            if current.leader != NO_LEADER:
                new = elections.remove_replica(current, current.leader, ctx.epoch)
            if new is None:
                return None
            log.warning("partition offline: no live in-sync replica", topic=tp[0],
                        partition=tp[1], isr=list(current.isr))
        if new.leader != NO_LEADER and new.leader not in current.isr:
            log.warning("unclean leader election", topic=tp[0], partition=tp[1],
                        leader=new.leader)
        return new

    async def ensure_leaders(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Give each of ``tps`` a state (new partition) or a live leader; the
        ones that changed. The elections of partitions that have a state are
        written in one pipelined batch."""
        ctx = self.controller.ctx
        changed: list[TopicPartition] = []
        elected: list[tuple[TopicPartition, LeaderAndIsr]] = []
        unclean: set[TopicPartition] = set()
        new_states: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in tps:
            current = ctx.states.get(tp)
            if current is None:
                initial = elections.initial_state(ctx.assignments[tp], ctx.live, ctx.epoch)
                if initial is not None:
                    new_states.append((tp, initial))
                continue
            new = self._offline_choice(tp, current)
            if new is not None:
                elected.append((tp, new))
                if new.leader != NO_LEADER and new.leader not in current.isr:
                    unclean.add(tp)
        for i in range(0, len(new_states), WRITE_BATCH):
            chunk = new_states[i:i + WRITE_BATCH]
            created = await self.controller.partition_states.create_partition_states(
                [(tp[0], tp[1], new) for tp, new in chunk])
            for (tp, new), done in zip(chunk, created, strict=True):
                if done is None:  # someone created it meanwhile: the one-by-one path
                    if await self._ensure_leader(tp):
                        changed.append(tp)
                    continue
                ctx.states[tp] = LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                              new.controller_epoch, *done)
                changed.append(tp)
        for tp in await self.write_many(elected):
            changed.append(tp)
            if tp in unclean:
                self.controller.stats.unclean_elections.inc()
        return changed

    def restart_choices(self, tps: list[TopicPartition]
                        ) -> list[tuple[TopicPartition, LeaderAndIsr]]:
        """The new states of those of ``tps`` whose ISR holds brokers that
        restarted since it was decided (see ``elections.drop_restarted``)."""
        ctx = self.controller.ctx
        out = []
        for tp in tps:
            state = ctx.states.get(tp)
            new = None if state is None else elections.drop_restarted(
                state, ctx.broker_epochs, ctx.epoch)
            if state is not None and new is not None:
                log.info("restarted brokers leave the ISR", topic=tp[0], partition=tp[1],
                         left=[b for b in state.isr if b not in new.isr])
                out.append((tp, new))
        return out

    # -- writing and announcing ------------------------------------------------------

    async def write(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        """Compare-and-set ``new`` (expecting its version); refresh our copy on conflict."""
        written = await self.controller.partition_states.update_partition_state(
            tp[0], tp[1], new, new.version)
        return await self._took(tp, new, written)

    async def write_many(self, changes: list[tuple[TopicPartition, LeaderAndIsr]]
                         ) -> list[TopicPartition]:
        """``write`` for many partitions, pipelined in batches; the ones written."""
        done: list[TopicPartition] = []
        for i in range(0, len(changes), WRITE_BATCH):
            chunk = changes[i:i + WRITE_BATCH]
            results = await self.controller.partition_states.update_partition_states(
                [(tp[0], tp[1], new, new.version) for tp, new in chunk])
            for (tp, new), written in zip(chunk, results, strict=True):
                if await self._took(tp, new, written):
                    done.append(tp)
        return done

    async def _took(self, tp: TopicPartition, new: LeaderAndIsr,
                    written: tuple[int, int] | None) -> bool:
        """A compare-and-set's outcome: our copy updated, or re-read on conflict."""
        ctx = self.controller.ctx
        if written is None:
            log.info("partition state changed under us; re-reading", topic=tp[0],
                     partition=tp[1])
            got = await self.controller.partition_states.get_partition_state(tp[0], tp[1])
            if got is not None:
                ctx.states[tp] = got
            return False
        old = ctx.states.get(tp)
        ctx.states[tp] = LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                      new.controller_epoch, *written)
        if new.leader != NO_LEADER and (old is None or old.leader_epoch != new.leader_epoch):
            log.info("leader elected", topic=tp[0], partition=tp[1], leader=new.leader,
                     leader_epoch=new.leader_epoch, isr=list(new.isr))
        return True

    def announce(self, changed: list[TopicPartition]) -> None:
        """LeaderAndIsr to the replicas of ``changed``; UpdateMetadata to everyone."""
        if not changed:
            return
        ctx = self.controller.ctx
        targets: dict[int, list[TopicPartition]] = {}
        for tp in changed:
            for replica in ctx.assignments[tp]:
                if replica in ctx.brokers:
                    targets.setdefault(replica, []).append(tp)
        for broker, tps in targets.items():
            self.controller.channel.send_leader_and_isr(ctx, broker, tps)
        self.controller.channel.send_update_metadata(ctx, sorted(ctx.brokers), changed)

    # -- brokers coming and going -----------------------------------------------------

    async def on_brokers(self, brokers: list[RegisteredBroker]) -> None:
        """React to the registered brokers now being ``brokers`` (the
        controller's watch on /brokers/ids); nothing if none came or went."""
        ctx = self.controller.ctx
        now = {b.node_id: b for b in brokers}
        old_epochs = ctx.broker_epochs
        lost = [b for b in ctx.brokers if b not in now or now[b].epoch != old_epochs.get(b)]
        joined = [b for b in now if b not in ctx.brokers or now[b].epoch != old_epochs.get(b)]
        if not lost and not joined:
            return
        started = trio.current_time()
        try:
            await self._on_broker_change(now, lost, joined)
        finally:
            # Kafka's LeaderElectionRateAndTimeMs times exactly this event.
            self.controller.stats.leader_election_ms.observe(
                (trio.current_time() - started) * 1000)

    async def _on_broker_change(self, now: dict[int, RegisteredBroker], lost: list[int],
                                joined: list[int]) -> None:
        ctx = self.controller.ctx
        channel = self.controller.channel
        log.info("brokers changed", lost=lost, joined=joined, live=sorted(now))
        for b in lost:
            ctx.brokers.pop(b, None)
            ctx.shutting_down.discard(b)
        # One pass over the assignments, and one pipelined batch of writes per
        # step: a lost broker hosting thousands of partitions is a few round
        # trips to ZooKeeper, not one per partition.
        removed: dict[TopicPartition, LeaderAndIsr] = {}
        for b in lost:
            for tp in ctx.replica_partitions(b):
                state = removed.get(tp) or ctx.states.get(tp)
                if state is None:
                    continue
                new = elections.remove_replica(state, b, ctx.epoch)
                if new is not None:
                    removed[tp] = new
        changed: dict[TopicPartition, None] = dict.fromkeys(
            await self.write_many(list(removed.items())))
        ctx.brokers = {i: b.endpoint for i, b in now.items()}
        ctx.broker_epochs = {i: b.epoch for i, b in now.items()}
        channel.set_brokers(ctx.brokers)
        # Before any election: a restarted broker must not be chosen.
        rejoined = dict.fromkeys(tp for b in joined for tp in ctx.replica_partitions(b))
        changed.update(dict.fromkeys(
            await self.write_many(self.restart_choices(list(rejoined)))))
        changed.update(dict.fromkeys(await self.ensure_leaders(list(ctx.assignments))))
        if joined:
            channel.send_update_metadata(ctx, sorted(ctx.brokers), None)
            for b in joined:
                channel.send_leader_and_isr(ctx, b, ctx.replica_partitions(b))
        self.announce(list(changed))
