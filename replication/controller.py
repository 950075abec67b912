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
``ControllerChannel``, which keeps one ordered queue per broker. This
module decides when to act; how an election is carried out (the partitions
an event touches, the batched writes, the requests that announce them) is
the ``Elector``'s job (``controller_elections``), reached as ``self.elector``.

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
from replication import admin_elections, elections
from replication import controller_remote_deletes as remote_deletes
from replication.admin_elections import ElectionType, TopicResults
from replication.controller_channel import ControllerChannel
from replication.controller_context import ControllerContext
from replication.controller_elections import Elector
from replication.controller_remote_deletes import MarkDeleted
from replication.controller_requests import IsrChange
from replication.elections import LEADER_DURING_DELETE, LeaderAndIsr
from replication.metrics import ControllerStats
from replication.reassignment import Reassigner, Reassignment
from replication.zk_configs import ZkConfigs
from replication.zk_membership import ZkMembership
from replication.zk_partition_states import ZkPartitionStates
from replication.zookeeper import ZkClient
from storage.pace import Pacer

log = structlog.get_logger(__name__)


class Controller:
    def __init__(self, config: BrokerConfig, zk: ZkClient, channel: ControllerChannel) -> None:
        self.config = config
        self.zk = zk
        self.configs = ZkConfigs(zk)
        self.membership = ZkMembership(zk, config.listeners.inter_broker)
        self.partition_states = ZkPartitionStates(zk)
        self.channel = channel
        self.node_id: int = config["node.id"]
        self.ctx = ControllerContext()
        self.active = False
        self.lock = trio.Lock()
        self.stats = ControllerStats()
        self.elector = Elector(self)
        self.reassigner = Reassigner(self)
        # Set by the tiering wiring: marks a deleted tiered topic's partitions
        # for remote deletion (``controller_remote_deletes``).
        self.mark_remote_deletes: MarkDeleted | None = None
        # Set when unclean.leader.election.enable may have become true (a dynamic change).
        self._unclean_enabled = trio.Event()
        channel.resync = self._resync

    def _resync(self, broker: int) -> None:
        self.channel.send_update_metadata(self.ctx, [broker], None)
        self.channel.send_leader_and_isr(self.ctx, broker, self.ctx.replica_partitions(broker))

    # -- election --------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Compete for the controller role forever."""
        task_status.started()
        while True:
            if await self.membership.try_become_controller(self.node_id):
                try:
                    await self._act()
                except Exception:
                    log.exception("controller failed; resigning")
                finally:
                    await self._resign()
            await self.membership.wait_controller_gone()

    async def _act(self) -> None:
        async with trio.open_nursery() as nursery:
            async with self.lock:
                self.ctx = ControllerContext(epoch=await self.membership.increment_controller_epoch())
                self.reassigner = Reassigner(self)
                self.active = True
                log.info("became controller", node_id=self.node_id, epoch=self.ctx.epoch)
                await self._load()
            nursery.start_soon(self._watch_brokers)
            nursery.start_soon(self._watch_topics)
            nursery.start_soon(self._watch_deletions)
            nursery.start_soon(self._rebalance_loop)
            nursery.start_soon(self._elect_when_unclean_enabled)
            await self.membership.wait_controller_lost(self.node_id)
            nursery.cancel_scope.cancel()

    async def _resign(self) -> None:
        if self.active:
            log.info("resigned as controller", node_id=self.node_id, epoch=self.ctx.epoch)
        self.active = False
        self.channel.clear()

    # -- loading ---------------------------------------------------------------

    async def _load(self) -> None:
        brokers = await self.membership.get_brokers()
        self.ctx.brokers = {b.node_id: b.endpoint for b in brokers}
        self.ctx.broker_epochs = {b.node_id: b.epoch for b in brokers}
        self.channel.set_brokers(self.ctx.brokers)
        for topic in await self.zk.get_topics():
            await self._load_topic(topic)
        restarted = await self.elector.write_many(
            self.elector.restart_choices(list(self.ctx.assignments)))
        changed = {*restarted, *await self.elector.ensure_leaders(list(self.ctx.assignments))}
        log.info("controller loaded", brokers=sorted(self.ctx.brokers),
                 partitions=len(self.ctx.assignments), elected=len(changed))
        self.channel.send_update_metadata(self.ctx, sorted(self.ctx.brokers), None)
        for broker in self.ctx.brokers:
            self.channel.send_leader_and_isr(self.ctx, broker, self.ctx.replica_partitions(broker))
        # Topics left in /admin/delete_topics: the deletions watch's first event.

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment, config and partition states; returns new partitions."""
        assignment = await self.zk.get_topic_assignment(topic)
        if assignment is None:
            return []
        self.ctx.topic_ids[topic] = assignment.topic_id
        own = (await self.configs.get_topic_config(topic)).get("unclean.leader.election.enable")
        self.ctx.unclean[topic] = None if own is None else str(own).lower() == "true"
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
        return await self.elector.write(tp, new)

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
        self.elector.announce(changed)

    def delete_replicas(self, tp: TopicPartition, brokers: list[int]) -> None:
        """StopReplica with delete for ``tp`` to those of ``brokers`` registered
        (their local copy only, for ``reassignment``)."""
        for broker in brokers:
            if broker in self.ctx.brokers:
                self.channel.send_stop_replica(self.ctx, broker, [tp], delete=True)

    # -- brokers ---------------------------------------------------------------

    async def _watch_brokers(self) -> None:
        async for brokers in self.membership.watch_brokers():
            async with self.lock:
                await self.elector.on_brokers(brokers)

    def unclean_default_changed(self) -> None:
        """The broker's unclean.leader.election.enable changed (a dynamic config):
        if it is now true, the acting controller elects the partitions left
        without a leader, as Kafka's controller does."""
        if self.config["unclean.leader.election.enable"]:
            self._unclean_enabled.set()

    async def _elect_when_unclean_enabled(self) -> None:
        while True:
            await self._unclean_enabled.wait()
            self._unclean_enabled = trio.Event()
            async with self.lock:
                offline = [tp for tp, s in self.ctx.states.items() if s.leader not in self.ctx.live]
                changed = await self.elector.ensure_leaders(offline)
                log.info("unclean leader election enabled", offline=len(offline),
                         elected=len(changed))
                self.elector.announce(changed)

    # -- topics ----------------------------------------------------------------

    async def _watch_topics(self) -> None:
        async for topics in self.zk.watch_topics():
            async with self.lock:
                added: list[TopicPartition] = []
                for topic in topics:
                    added.extend(await self._load_topic(topic))
                changed = await self.elector.ensure_leaders(added)
                if changed:
                    log.info("partitions created", count=len(changed))
                self.elector.announce(changed)

    async def _watch_deletions(self) -> None:
        async for _ in self.zk.watch_topic_deletions():
            while not await self._process_deletions():
                await trio.sleep(remote_deletes.RETRY_S)

    async def _process_deletions(self) -> bool:
        """Delete the topics in /admin/delete_topics; whether none is left.

        A tiered topic's partitions are marked for remote deletion first,
        without the lock (the markers are written to other brokers); a topic
        not marked yet stays for the next attempt.
        """
        ready = []
        topics = await self.zk.get_topics_to_delete()
        for topic in topics:
            if await remote_deletes.mark_deleted_topic(
                    self.mark_remote_deletes, topic, self.ctx.topic_ids.get(topic),
                    len(self.ctx.partitions_of(topic)),
                    await self.configs.get_topic_config(topic)):
                ready.append(topic)
        async with self.lock:
            for topic in ready:
                await self._delete_topic(topic)
        return len(ready) == len(topics)

    async def _delete_topic(self, topic: str) -> None:
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
            done = set(await self.elector.write_many([(tp, new) for _, tp, _, new in writes]))
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

    async def elect_leaders(self, kind: ElectionType, wanted: list[tuple[str, list[int]]] | None
                            ) -> TopicResults | None:
        """Elections an operator asked for (``admin_elections``); None if this
        broker is not the controller."""
        async with self.lock:
            if not self.active:
                return None
            return await admin_elections.elect(self.ctx, self.elector, self.stats, kind, wanted)

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
            for tp in self.ctx.replica_partitions(broker):
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
                if await self.elector.write(tp, new):
                    changed.append(tp)
            self.elector.announce(changed)
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
                if new is not None and await self.elector.write(tp, new):
                    changed.append(tp)
        self.elector.announce(changed)
        return changed
