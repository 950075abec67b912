"""The cluster controller (ZooKeeper mode): one broker at a time decides who leads.

Theory of operation
-------------------
Every broker runs ``Controller.run``: it tries to create the ephemeral
``/controller`` znode; the one that succeeds bumps ``/controller_epoch``
(compare-and-set) and acts as controller until its ZooKeeper session ends;
the others wait for the znode to go away and try again.

The acting controller keeps an in-memory copy of what it decides from —
live brokers (with their epochs), topic assignments, each partition's
leader/epoch/ISR with its znode version — and is the only writer of
partition state: every change is written with a compare-and-set on the
version it read, then sent to the brokers (LeaderAndIsr to the replicas of
the changed partitions, UpdateMetadata to every live broker) through the
``ControllerChannel``, which keeps one ordered queue per broker.

What makes it act (each under one lock, so one change is handled at a time):
- becoming controller: read everything, elect leaders for partitions that
  have none (or a dead one), then send the full state to every broker;
- the set of live brokers changes (a watch on /brokers/ids): partitions led
  by a lost broker get a new leader from their live ISR, the lost broker
  leaves every ISR; a new (or restarted) broker gets the full metadata and
  its partitions, and offline partitions it can lead are elected;
- topics are created, grown or marked for deletion (watches on
  /brokers/topics, each topic, /admin/delete_topics);
- a leader asks to change its ISR (AlterPartition) or a broker asks to shut
  down (ControlledShutdown);
- periodically, preferred replicas get their leadership back
  (auto.leader.rebalance.enable).

Error handling: a compare-and-set that fails means our copy is stale: the
partition is re-read and the event handled again. Losing the ZooKeeper
session ends the controller role (``resign``); the next controller starts
from ZooKeeper, which holds everything that was decided.
"""

from __future__ import annotations

import random

import structlog
import trio

from config import BrokerConfig
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication import elections
from replication.controller_channel import ControllerChannel
from replication.controller_context import ControllerContext
from replication.controller_requests import IsrChange
from replication.elections import LEADER_DURING_DELETE, NO_LEADER, LeaderAndIsr
from replication.metrics import ControllerStats
from replication.reassignment import Reassigner, Reassignment
from replication.zk_configs import ZkConfigs
from replication.zk_partition_states import ZkPartitionStates
from replication.zookeeper import RegisteredBroker, ZkClient
from storage.pace import Pacer

log = structlog.get_logger(__name__)

# Partition-state writes sent to ZooKeeper at once (pipelined on the session).
WRITE_BATCH = 1000


class Controller:
    def __init__(self, config: BrokerConfig, zk: ZkClient, channel: ControllerChannel) -> None:
        self.config = config
        self.zk = zk
        self.configs = ZkConfigs(zk)
        self.partition_states = ZkPartitionStates(zk)
        self.channel = channel
        self.node_id: int = config["node.id"]
        self.ctx = ControllerContext()
        self.active = False
        self.lock = trio.Lock()
        self.stats = ControllerStats()
        self.reassigner = Reassigner(self)
        channel.resync = self._resync

    def _resync(self, broker: int) -> None:
        self.channel.send_update_metadata(self.ctx, [broker], None)
        self.channel.send_leader_and_isr(self.ctx, broker, self._replica_partitions(broker))

    # -- election --------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Compete for the controller role forever."""
        task_status.started()
        while True:
            if await self.zk.try_become_controller(self.node_id):
                try:
                    await self._act()
                except Exception:
                    log.exception("controller failed; resigning")
                finally:
                    await self._resign()
            await self.zk.wait_controller_gone()

    async def _act(self) -> None:
        async with trio.open_nursery() as nursery:
            async with self.lock:
                self.ctx = ControllerContext(epoch=await self.zk.increment_controller_epoch())
                self.reassigner = Reassigner(self)
                self.active = True
                log.info("became controller", node_id=self.node_id, epoch=self.ctx.epoch)
                await self._load()
            nursery.start_soon(self._watch_brokers)
            nursery.start_soon(self._watch_topics)
            nursery.start_soon(self._watch_deletions)
            nursery.start_soon(self._rebalance_loop)
            await self.zk.wait_controller_lost(self.node_id)
            nursery.cancel_scope.cancel()

    async def _resign(self) -> None:
        if self.active:
            log.info("resigned as controller", node_id=self.node_id, epoch=self.ctx.epoch)
        self.active = False
        self.channel.clear()

    # -- loading ---------------------------------------------------------------

    async def _load(self) -> None:
        brokers = await self.zk.get_brokers()
        self.ctx.brokers = {b.node_id: b.endpoint for b in brokers}
        self.ctx.broker_epochs = {b.node_id: b.epoch for b in brokers}
        self.channel.set_brokers(self.ctx.brokers)
        for topic in await self.zk.get_topics():
            await self._load_topic(topic)
        restarted = await self._write_many(self._restart_choices(list(self.ctx.assignments)))
        changed = {*restarted, *await self._ensure_leaders(list(self.ctx.assignments))}
        log.info("controller loaded", brokers=sorted(self.ctx.brokers),
                 partitions=len(self.ctx.assignments), elected=len(changed))
        self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), None)
        for broker in self.ctx.brokers:
            self.channel.send_leader_and_isr(self.ctx, broker, self._replica_partitions(broker))
        await self._process_deletions()

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment, config and partition states; returns new partitions."""
        assignment = await self.zk.get_topic_assignment(topic)
        if assignment is None:
            return []
        self.ctx.topic_ids[topic] = assignment.topic_id
        config = await self.configs.get_topic_config(topic)
        default_unclean = self.config["unclean.leader.election.enable"]
        self.ctx.unclean[topic] = str(config.get("unclean.leader.election.enable",
                                                 default_unclean)).lower() == "true"
        added = []
        unknown = []
        for p, replicas in assignment.partitions.items():
            tp = (topic, p)
            if tp not in self.ctx.assignments:
                added.append(tp)
            self.ctx.assignments[tp] = list(replicas)
            if tp not in self.ctx.states:
                unknown.append(tp)
        for tp, got in zip(unknown, await self.partition_states.get_partition_states(unknown), strict=True):
            if got is not None:
                self.ctx.states[tp] = got
        return added

    async def _ensure_leader(self, tp: TopicPartition) -> bool:
        """Give ``tp`` a state (new partition) or a live leader; True if it changed."""
        replicas = self.ctx.assignments[tp]
        current = self.ctx.states.get(tp)
        if current is None:
            new = elections.initial_state(replicas, self.ctx.live, self.ctx.epoch)
            if new is None:
                return False
            created = await self.partition_states.create_partition_state(tp[0], tp[1], new)
            if created is None:  # someone created it meanwhile: take theirs and retry
                got = await self.partition_states.get_partition_state(tp[0], tp[1])
                if got is not None:
                    self.ctx.states[tp] = got
                return await self._ensure_leader(tp) if got is not None else False
            self.ctx.states[tp] = elections.LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                                         new.controller_epoch, *created)
            return True
        new = self._offline_choice(tp, current)
        if new is None:
            return False
        written = await self._write(tp, new)
        if written and new.leader != NO_LEADER and new.leader not in current.isr:
            self.stats.unclean_elections.inc()
        return written

    def _offline_choice(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        """The state ``tp`` moves to when its leader is not live (None: it keeps
        a live leader, or nothing can change)."""
        if current.leader in self.ctx.live:
            return None
        new = elections.offline_election(self.ctx.assignments[tp], current, self.ctx.live,
                                         self.ctx.unclean.get(tp[0], False), self.ctx.epoch)
        if new is None:
            if current.leader != NO_LEADER:
                new = elections.remove_replica(current, current.leader, self.ctx.epoch)
            if new is None:
                return None
            log.warning("partition offline: no live in-sync replica", topic=tp[0],
                        partition=tp[1], isr=list(current.isr))
        if new.leader != NO_LEADER and new.leader not in current.isr:
            log.warning("unclean leader election", topic=tp[0], partition=tp[1],
                        leader=new.leader)
        return new

    async def _ensure_leaders(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """``_ensure_leader`` for many partitions; the elections of partitions
        that have a state are written in one pipelined batch."""
        changed: list[TopicPartition] = []
        elected: list[tuple[TopicPartition, LeaderAndIsr]] = []
        unclean: set[TopicPartition] = set()
        new_states: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in tps:
            current = self.ctx.states.get(tp)
            if current is None:
                initial = elections.initial_state(self.ctx.assignments[tp], self.ctx.live,
                                                  self.ctx.epoch)
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
            created = await self.partition_states.create_partition_states(
                [(tp[0], tp[1], new) for tp, new in chunk])
            for (tp, new), done in zip(chunk, created, strict=True):
                if done is None:  # someone created it meanwhile: the one-by-one path
                    if await self._ensure_leader(tp):
                        changed.append(tp)
                    continue
                self.ctx.states[tp] = LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                                   new.controller_epoch, *done)
                changed.append(tp)
        for tp in await self._write_many(elected):
            changed.append(tp)
            if tp in unclean:
                self.stats.unclean_elections.inc()
        return changed

    def _restart_choices(self, tps: list[TopicPartition]
                         ) -> list[tuple[TopicPartition, LeaderAndIsr]]:
        """The new states of those of ``tps`` whose ISR holds brokers that
        restarted since it was decided (see ``elections.drop_restarted``)."""
        out = []
        for tp in tps:
            state = self.ctx.states.get(tp)
            new = None if state is None else elections.drop_restarted(
                state, self.ctx.broker_epochs, self.ctx.epoch)
            if state is not None and new is not None:
                log.info("restarted brokers leave the ISR", topic=tp[0], partition=tp[1],
                         left=[b for b in state.isr if b not in new.isr])
                out.append((tp, new))
        return out

    async def _write(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        """Compare-and-set ``new`` (expecting its version); refresh our copy on conflict."""
        written = await self.partition_states.update_partition_state(tp[0], tp[1], new, new.version)
        return await self._took(tp, new, written)

    async def _write_many(self, changes: list[tuple[TopicPartition, LeaderAndIsr]]
                          ) -> list[TopicPartition]:
        """``_write`` for many partitions, pipelined in batches; the ones written."""
        done: list[TopicPartition] = []
        for i in range(0, len(changes), WRITE_BATCH):
            chunk = changes[i:i + WRITE_BATCH]
            results = await self.partition_states.update_partition_states(
                [(tp[0], tp[1], new, new.version) for tp, new in chunk])
            for (tp, new), written in zip(chunk, results, strict=True):
                if await self._took(tp, new, written):
                    done.append(tp)
        return done

    async def _took(self, tp: TopicPartition, new: LeaderAndIsr,
                    written: tuple[int, int] | None) -> bool:
        """A compare-and-set's outcome: our copy updated, or re-read on conflict."""
        if written is None:
            log.info("partition state changed under us; re-reading", topic=tp[0],
                     partition=tp[1])
            got = await self.partition_states.get_partition_state(tp[0], tp[1])
            if got is not None:
                self.ctx.states[tp] = got
            return False
        old = self.ctx.states.get(tp)
        self.ctx.states[tp] = LeaderAndIsr(new.leader, new.leader_epoch, new.isr,
                                           new.controller_epoch, *written)
        if new.leader != NO_LEADER and (old is None or old.leader_epoch != new.leader_epoch):
            log.info("leader elected", topic=tp[0], partition=tp[1], leader=new.leader,
                     leader_epoch=new.leader_epoch, isr=list(new.isr))
        return True

    # -- what the reassignments and the gauges ask of the acting controller ---------

    @property
    def epoch(self) -> int:
        """The controller epoch of this broker's current (or last) term."""
        return self.ctx.epoch

    def assignment(self, tp: TopicPartition) -> list[int] | None:
        """``tp``'s assigned replicas, preferred first (None: no such partition)."""
        replicas = self.ctx.assignments.get(tp)
        return None if replicas is None else list(replicas)

    def partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """``tp``'s leader, ISR and version as last written (None: none yet)."""
        return self.ctx.states.get(tp)

    def is_registered(self, broker: int) -> bool:
        """Whether ``broker`` is registered (shutting down or not)."""
        return broker in self.ctx.brokers

    def is_live(self, broker: int) -> bool:
        """Whether ``broker`` is registered and not shutting down (it may lead)."""
        return broker in self.ctx.live

    def offline_partition_count(self) -> int:
        """Kafka's OfflinePartitionsCount (see ``ControllerContext``)."""
        return self.ctx.offline_partition_count()

    async def write_state(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        """Compare-and-set a partition's state (for ``reassignment``)."""
        return await self._write(tp, new)

    async def write_assignment(self, tp: TopicPartition, replicas: list[int]) -> None:
        """Write ``tp``'s replica list into its topic's assignment (for
        ``reassignment``); nothing if the topic has no assignment (deleted)."""
        assignment = await self.zk.get_topic_assignment(tp[0])
        if assignment is None:
            return
        partitions = dict(assignment.partitions)
        partitions[tp[1]] = list(replicas)
        await self.zk.set_topic_assignment(tp[0], assignment.topic_id, partitions)
        self.ctx.assignments[tp] = list(replicas)

    def announce_partitions(self, changed: list[TopicPartition]) -> None:
        """LeaderAndIsr to the replicas of ``changed``, UpdateMetadata to all."""
        self._announce(changed)

    def delete_replicas(self, tp: TopicPartition, brokers: list[int]) -> None:
        """StopReplica with delete for ``tp`` to those of ``brokers`` registered
        (their local copy only, for ``reassignment``)."""
        for broker in brokers:
            if broker in self.ctx.brokers:
                self.channel.send_stop_replica(self.ctx, broker, [tp], delete=True)

    def _replica_partitions(self, broker: int) -> list[TopicPartition]:
        return [tp for tp, replicas in self.ctx.assignments.items() if broker in replicas]

    def _announce(self, changed: list[TopicPartition]) -> None:
        """LeaderAndIsr to the replicas of ``changed``; UpdateMetadata to everyone."""
        if not changed:
            return
        targets: dict[int, list[TopicPartition]] = {}
        for tp in changed:
            for replica in self.ctx.assignments[tp]:
                if replica in self.ctx.brokers:
                    targets.setdefault(replica, []).append(tp)
        for broker, tps in targets.items():
            self.channel.send_leader_and_isr(self.ctx, broker, tps)
        self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), changed)

    # -- brokers ---------------------------------------------------------------

    async def _watch_brokers(self) -> None:
        async for brokers in self.zk.watch_brokers():
            async with self.lock:
                await self._on_brokers(brokers)

    async def _on_brokers(self, brokers: list) -> None:
        now = {b.node_id: b for b in brokers}
        old_epochs = self.ctx.broker_epochs
        lost = [b for b in self.ctx.brokers if b not in now or now[b].epoch != old_epochs.get(b)]
        joined = [b for b in now if b not in self.ctx.brokers or now[b].epoch != old_epochs.get(b)]
        if not lost and not joined:
            return
        started = trio.current_time()
        try:
            await self._on_broker_change(now, lost, joined)
        finally:
            # Kafka's LeaderElectionRateAndTimeMs times exactly this event.
            self.stats.leader_election_ms.observe((trio.current_time() - started) * 1000)

    async def _on_broker_change(self, now: dict[int, RegisteredBroker], lost: list[int],
                                joined: list[int]) -> None:
        log.info("brokers changed", lost=lost, joined=joined, live=sorted(now))
        for b in lost:
            self.ctx.brokers.pop(b, None)
            self.ctx.shutting_down.discard(b)
        # One pass over the assignments, and one pipelined batch of writes per
        # step: a lost broker hosting thousands of partitions is a few round
        # trips to ZooKeeper, not one per partition.
        removed: dict[TopicPartition, LeaderAndIsr] = {}
        for b in lost:
            for tp in self._replica_partitions(b):
                state = removed.get(tp) or self.ctx.states.get(tp)
                if state is None:
                    continue
                new = elections.remove_replica(state, b, self.ctx.epoch)
                if new is not None:
                    removed[tp] = new
        changed: dict[TopicPartition, None] = dict.fromkeys(
            await self._write_many(list(removed.items())))
        self.ctx.brokers = {i: b.endpoint for i, b in now.items()}
        self.ctx.broker_epochs = {i: b.epoch for i, b in now.items()}
        self.channel.set_brokers(self.ctx.brokers)
        # Before any election: a restarted broker must not be chosen.
        rejoined = dict.fromkeys(tp for b in joined for tp in self._replica_partitions(b))
        changed.update(dict.fromkeys(
            await self._write_many(self._restart_choices(list(rejoined)))))
        changed.update(dict.fromkeys(await self._ensure_leaders(list(self.ctx.assignments))))
        if joined:
            self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), None)
            for b in joined:
                self.channel.send_leader_and_isr(self.ctx, b, self._replica_partitions(b))
        self._announce(list(changed))

    # -- topics ----------------------------------------------------------------

    async def _watch_topics(self) -> None:
        async for topics in self.zk.watch_topics():
            async with self.lock:
                added: list[TopicPartition] = []
                for topic in topics:
                    added.extend(await self._load_topic(topic))
                changed = await self._ensure_leaders(added)
                if changed:
                    log.info("partitions created", count=len(changed))
                self._announce(changed)

    async def _watch_deletions(self) -> None:
        async for _ in self.zk.watch_topic_deletions():
            async with self.lock:
                await self._process_deletions()

    async def _process_deletions(self) -> None:
        for topic in await self.zk.get_topics_to_delete():
            tps = self.ctx.partitions_of(topic)
            for tp in tps:
                state = self.ctx.states.get(tp)
                if state is not None:
                    self.ctx.states[tp] = LeaderAndIsr(LEADER_DURING_DELETE, state.leader_epoch,
                                                       state.isr, self.ctx.epoch, state.version)
            self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), tps)
            for broker in self.ctx.brokers:
                mine = [tp for tp in tps if broker in self.ctx.assignments[tp]]
                if mine:
                    self.channel.send_stop_replica(self.ctx, broker, mine, delete=True)
            await self.zk.delete_topic(topic)
            for tp in tps:
                self.ctx.assignments.pop(tp, None)
                self.ctx.states.pop(tp, None)
            self.ctx.topic_ids.pop(topic, None)
            log.info("topic deleted", topic=topic, partitions=len(tps))

    # -- requests from brokers ------------------------------------------------------

    async def alter_partitions(self, broker: int, broker_epoch: int,
                               changes: list[IsrChange]
                               ) -> list[tuple[str, LeaderAndIsr | None]]:
        """A leader's ISR changes, written together; per change, in order:
        (error name or "", the state now)."""
        async with self.lock:
            if not self.active:
                return [("NOT_CONTROLLER", None)] * len(changes)
            answers: list[tuple[str, LeaderAndIsr | None]] = [("", None)] * len(changes)
            writes: list[tuple[int, TopicPartition, LeaderAndIsr, LeaderAndIsr]] = []
            seen: set[TopicPartition] = set()
            pacer = Pacer()
            for i, change in enumerate(changes):
                await pacer.tick()
                error, state = self._check_isr_change(broker, broker_epoch, change, seen)
                seen.add(change.tp)
                if error or state is None:
                    answers[i] = (error, state)
                else:
                    writes.append((i, change.tp, state,
                                   state.with_isr(change.isr, self.ctx.epoch)))
            done = set(await self._write_many([(tp, new) for _, tp, _, new in writes]))
            changed: list[TopicPartition] = []
            for i, tp, old, new in writes:
                await pacer.tick()
                if tp not in done:
                    answers[i] = ("INVALID_UPDATE_VERSION", self.ctx.states.get(tp))
                    continue
                log.info("isr changed", topic=tp[0], partition=tp[1], old=list(old.isr),
                         new=list(new.isr))
                changed.append(tp)
                answers[i] = ("", self.ctx.states[tp])
            if changed:
                self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), changed)
                for tp in changed:
                    await self.reassigner.maybe_complete(tp)
            return answers

    def _check_isr_change(self, broker: int, broker_epoch: int, change: IsrChange,
                          seen: set[TopicPartition]) -> tuple[str, LeaderAndIsr | None]:
        """Why ``change`` cannot be written ("" if it can), and the state now."""
        tp, isr = change.tp, change.isr
        state = self.ctx.states.get(tp)
        if state is None or tp not in self.ctx.assignments:
            return "UNKNOWN_TOPIC_OR_PARTITION", None
        if tp in seen:
            return "INVALID_REQUEST", state
        if state.leader != broker:
            return "NOT_LEADER_OR_FOLLOWER", state
        if change.leader_epoch != state.leader_epoch:
            return "FENCED_LEADER_EPOCH", state
        if change.partition_epoch != state.version:
            return "INVALID_UPDATE_VERSION", state
        if broker_epoch >= 0 and broker_epoch != self.ctx.broker_epochs.get(broker, -1):
            return "STALE_BROKER_EPOCH", state
        if any(r not in self.ctx.assignments[tp] for r in isr) or broker not in isr:
            return "INVALID_REQUEST", state
        if any(r not in self.ctx.live for r in isr if r not in state.isr):
            return "INELIGIBLE_REPLICA", state
        return "", state

    # -- reassignments (KIP-455) --------------------------------------------------

    async def alter_reassignments(self, wanted: list[tuple[TopicPartition, list[int] | None]]
                                  ) -> list[tuple[ErrorCode, str | None]] | None:
        """Start or cancel reassignments; None if this broker is not the controller."""
        async with self.lock:
            if not self.active:
                return None
            return [await self.reassigner.alter(tp, target) for tp, target in wanted]

    async def list_reassignments(self, wanted: set[TopicPartition] | None
                                 ) -> list[tuple[TopicPartition, Reassignment, list[int]]] | None:
        """Reassignments in progress; None if this broker is not the controller."""
        async with self.lock:
            if not self.active:
                return None
            return self.reassigner.ongoing(wanted)

    async def controlled_shutdown(self, broker: int, broker_epoch: int
                                  ) -> tuple[str, list[TopicPartition]]:
        """Move leaderships off ``broker``; returns (error, partitions it still leads)."""
        async with self.lock:
            if not self.active:
                return "NOT_CONTROLLER", []
            if broker not in self.ctx.brokers:
                return "BROKER_NOT_AVAILABLE", []
            if broker_epoch >= 0 and broker_epoch != self.ctx.broker_epochs.get(broker, -1):
                return "STALE_BROKER_EPOCH", []
            self.ctx.shutting_down.add(broker)
            changed, still = [], []
            for tp in self._replica_partitions(broker):
                state = self.ctx.states.get(tp)
                if state is None:
                    continue
                if state.leader == broker:
                    new = elections.controlled_shutdown_election(
                        self.ctx.assignments[tp], state, set(self.ctx.brokers),
                        self.ctx.shutting_down, self.ctx.epoch)
                    if new is None:
                        still.append(tp)
                        continue
                elif broker in state.isr and len(state.isr) > 1:
                    new = state.with_isr([r for r in state.isr if r != broker], self.ctx.epoch)
                else:
                    continue
                if await self._write(tp, new):
                    changed.append(tp)
            self._announce(changed)
            log.info("controlled shutdown", broker=broker, moved=len(changed),
                     still_leading=len(still))
            return "", still

    # -- preferred leaders --------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        if not self.config["auto.leader.rebalance.enable"]:
            return
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await trio.sleep(interval * (0.9 + 0.2 * random.random()))
            async with self.lock:
                await self.elect_preferred_leaders(
                    self.config["leader.imbalance.per.broker.percentage"])

    async def elect_preferred_leaders(self, threshold_percent: int = 0) -> list[TopicPartition]:
        """Preferred-replica election on every broker whose imbalance is above the threshold."""
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp, replicas in self.ctx.assignments.items():
            if replicas:
                by_broker.setdefault(replicas[0], []).append(tp)
        changed = []
        for broker, tps in by_broker.items():
            imbalanced = [tp for tp in tps
                          if self.ctx.states.get(tp) and self.ctx.states[tp].leader != broker]
            if not tps or len(imbalanced) * 100 <= threshold_percent * len(tps):
                continue
            for tp in imbalanced:
                new = elections.preferred_election(self.ctx.assignments[tp], self.ctx.states[tp],
                                                   self.ctx.live, self.ctx.epoch)
                if new is not None and await self._write(tp, new):
                    changed.append(tp)
        self._announce(changed)
        return changed
