"""The group coordinator: entry points of the group APIs, partition ownership, offsets.

Theory of operation: a group belongs to the broker leading its partition
of ``__consumer_offsets``. Which partitions this broker owns, loading them
and unloading them is the shared coordinator runtime's job
(``broker.coordinator_runtime``; requests for groups of a partition not
owned here get NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS from
``check``, so clients look the coordinator up again). Loading a partition
replays its groups, offsets and transactional offsets and arms the members'
session timers; unloading drops its groups at once, answering parked
requests NOT_COORDINATOR, and the new leader rebuilds them from its own log.

The group protocol itself lives beside this class: ``classic`` checks
JoinGroup, SyncGroup, Heartbeat and LeaveGroup and turns them into
membership changes, ``rebalance`` runs the rebalances and the timers they
need. This class keeps what every group protocol shares: ownership, the
groups, durability, offsets (``offsets.OffsetManager``,
``txn_offsets.TxnOffsets``) and the timers' nursery; and it applies the
online migration between the protocols (``migration``): a classic group
replaced by the consumer group it becomes, and back, in memory and in
``__consumer_offsets`` (classic record tombstoned / consumer records
tombstoned, the other written), the group's offsets carried over.

Within an owned partition, requests run on the event loop and change group
state without awaiting in between, so a request sees and leaves a group
consistent. A JoinGroup or SyncGroup that has to wait for other members
parks on a ``Reply``; whoever completes the rebalance fills every parked
reply. Writes go to the local log at once (the in-memory state always
matches it); before a request that wrote is answered, it waits until the
in-sync replicas have the write (``durable``), as Kafka's acks=all appends
do, and answers the append's error instead if they never do. Timers use
trio's clock; wall-clock time (``wall_clock``) is only written into records
and used for offset retention.

Error handling: client mistakes come back as ``ErrorCode`` values in the
results; an exception from a timer callback is our bug and is logged
without stopping the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from broker.coordinator import migration
from broker.coordinator.classic import ClassicGroups
from broker.coordinator.classic_members import ClassicMembers
from broker.coordinator.consumer import (
    ConsumerGroups,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    TopicView,
)
from broker.coordinator.consumer_group import ConsumerGroup, ConsumerMember
from broker.coordinator.consumer_store import ConsumerGroupRecords
from broker.coordinator.group import Group, GroupState, JoinRequest, JoinResult, Reply, SyncResult
from broker.coordinator.offsets import OffsetManager, PartitionCommit
from broker.coordinator.offsets_store import group_tombstone, load_groups, offsets_store
from broker.coordinator.rebalance import Rebalancer, answer_parked
from broker.coordinator.timers import Timers
from broker.coordinator.txn_offsets import TxnOffsets
from broker.coordinator_runtime import CoordinatorRuntime
from config import BrokerConfig
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.internal_topics import InternalTopic
from storage.log.manager import now_ms

log = structlog.get_logger(__name__)

E = ErrorCode


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, topic: InternalTopic,
                 wall_clock: Callable[[], int] = now_ms, follow_leadership: bool = False) -> None:
        """Args:
            follow_leadership: cluster mode: own only the partitions this broker
                leads, as ``on_leadership`` reports them (else: all, at start).
        """
        self.config = config
        self.wall_clock = wall_clock
        self.groups: dict[str, Group] = {}
        self.store = offsets_store(topic, wall_clock)
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets = OffsetManager(config, self.groups, self.store, wall_clock,
                                     self._consumer_topics, self.drop_empty_consumer_groups)
        self.txn_offsets = TxnOffsets(self.store, self, wall_clock)
        self.timers = Timers()
        self.rebalance = Rebalancer(config, self.groups, self.store, self.timers, wall_clock)
        self.classic = ClassicGroups(config, self.groups, self.rebalance, wall_clock)
        # KIP-848 groups (group.protocol=consumer) are ``consumer_groups``;
        # their offsets live in ``groups`` like those of any group.
        self.consumer_records = ConsumerGroupRecords(self.store)
        self.consumer = ConsumerGroups(config, self.groups, self.consumer_groups, self.timers,
                                       self.consumer_records.sync, self._upgrade,
                                       self._downgrade)
        # Classic-protocol members inside consumer groups (online migration).
        self.classic_members = ClassicMembers(self.consumer, self._downgrade_replaced)
        self.partitions: CoordinatorRuntime[None] = CoordinatorRuntime(
            "group coordinator", self.store, self._load, self._unload,
            follow_leadership=follow_leadership)

    # -- lifecycle -------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run timers and partition loads until cancelled. On one broker, first
        create ``__consumer_offsets`` and load every partition of it."""
        async with trio.open_nursery() as nursery:
            self.timers.attach(nursery)
            await self.partitions.start(nursery)
            nursery.start_soon(self.offsets.run_expiry)
            task_status.started()
            await trio.sleep_forever()

    def on_leadership(self, tp: TopicPartition, leader: bool) -> None:
        """This broker became (or stopped being) the leader of ``tp``."""
        self.partitions.on_leadership(tp, leader)

    def check(self, group_id: str) -> ErrorCode:
        """NONE if this broker coordinates ``group_id`` now; else what to answer."""
        return self.partitions.check(group_id)

    def _consumer_topics(self, group_id: str) -> set[str] | None:
        group = self.consumer_groups.get(group_id)
        return group.subscribed_topics() if group is not None and group.members else None

    def drop_empty_consumer_groups(self) -> None:
        """Forget (and tombstone) consumer groups with no members and no offsets
        left, as Kafka's cleanup does once an empty group's offsets expired."""
        for group_id, group in list(self.consumer_groups.items()):
            shell = self.groups.get(group_id)
            if group.members or (shell is not None and shell.offsets):
                continue
            if self.consumer_records.delete(group_id) is E.NONE:
                del self.consumer_groups[group_id]
                log.info("empty consumer group removed", group=group_id)

    def _load(self, partition: int) -> None:
        """Replay one partition's groups, offsets and transactional offsets."""
        loaded, consumer_records = load_groups(self.store, partition)
        self.groups.update(loaded)
        for group in loaded.values():
            self.rebalance.loaded(group)
        for group_id, records in consumer_records.items():
            consumer_group = self.consumer_records.rebuild(group_id, records)
            if consumer_group is not None:
                self.consumer_groups[group_id] = consumer_group
                self.consumer.loaded(consumer_group)
        self.txn_offsets.replay_partition(partition)
        log.info("group coordinator loaded partition", partition=partition, groups=len(loaded),
                 consumer_groups=len(consumer_records))

    def _unload(self, partition: int) -> int:
        """Drop the groups of a partition this broker no longer leads; how many."""
        dropped = 0
        for group_id, group in list(self.groups.items()):
            if self.store.partition_of(group_id) != partition:
                continue
            self.rebalance.dropped(group)
            del self.groups[group_id]
            dropped += 1
        for group_id, consumer_group in list(self.consumer_groups.items()):
            if self.store.partition_of(group_id) == partition:
                self.consumer.dropped(consumer_group)
                self.consumer_records.forget(group_id)
                del self.consumer_groups[group_id]
                dropped += 1
        self.txn_offsets.unload(partition)
        return dropped

    async def durable(self, group_id: str, error: ErrorCode = E.NONE) -> ErrorCode:
        """``error`` if set; else wait until the group's writes so far are replicated."""
        if error is not E.NONE:
            return error
        return await self.store.wait_durable(group_id, self.config["offsets.commit.timeout.ms"])

    async def commit_offsets(self, group_id: str | None, generation_id: int, member_id: str,
                             group_instance_id: str | None, retention_ms: int,
                             commits: list[PartitionCommit], version: int) -> list[ErrorCode]:
        """OffsetCommit (request ``version``), answered once the in-sync replicas
        have the offsets. A consumer group's commit carries a member epoch."""
        consumer_group = self.consumer_groups.get(group_id) if group_id else None
        if consumer_group is not None:
            error = consumer_group.validate_commit(member_id, generation_id, version)
            if error is not E.NONE:
                return [error] * len(commits)
            # Validated: stored as a commit from outside group management.
            generation_id, member_id, group_instance_id = -1, "", None
        results = self.offsets.commit(group_id, generation_id, member_id, group_instance_id,
                                      retention_ms, commits)
        if group_id is None or E.NONE not in results:
            return results
        error = await self.durable(group_id)
        return [error if r is E.NONE else r for r in results]

    async def txn_offset_commit(self, group_id: str, producer_id: int, epoch: int,
                                generation_id: int, member_id: str,
                                group_instance_id: str | None,
                                commits: list[PartitionCommit]) -> list[ErrorCode]:
        """TxnOffsetCommit: stage the offsets until the transaction's marker lands
        here; answered once the in-sync replicas have them."""
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = consumer_group.validate_commit(member_id, generation_id, 0,
                                                   transactional=True)
        else:
            error = self.txn_offsets.validate_member(group_id, generation_id, member_id,
                                                     group_instance_id)
        if error is not E.NONE:
            return [error] * len(commits)
        results = self.txn_offsets.stage(group_id, producer_id, epoch, commits)
        if E.NONE not in results:
            return results
        error = await self.durable(group_id)
        return [error if r is E.NONE else r for r in results]


    # -- the classic group protocol --------------------------------------------

    async def join_group(self, req: JoinRequest, topics: TopicView | None = None) -> JoinResult:
        """JoinGroup; to a non-empty consumer group, as one of its classic
        members (``topics``: the broker's topics, to resolve the subscription)."""
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            if consumer_group.members:
                if self._policy() == "disabled":
                    return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
                result = self.classic_members.join(consumer_group, req, topics or NO_TOPICS)
                error = await self.durable(req.group_id, result.error)
                return result if error is result.error else JoinResult(error, result.member_id)
            error = self.consumer_records.delete(req.group_id)
            if error is not E.NONE:
                return JoinResult(error, req.member_id)
            del self.consumer_groups[req.group_id]
        outcome = self.classic.join(req)
        result = await outcome.wait() if isinstance(outcome, Reply) else outcome
        error = await self.durable(req.group_id, result.error)
        return result if error is result.error else JoinResult(error, result.member_id)

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.classic_members.sync(consumer_group, generation_id, member_id,
                                             group_instance_id, protocol_type, protocol_name)
        outcome = self.classic.sync(group_id, generation_id, member_id, group_instance_id,
                                    protocol_type, protocol_name, assignments)
        result = await outcome.wait() if isinstance(outcome, Reply) else outcome
        error = await self.durable(group_id, result.error)
        return result if error is result.error else SyncResult(error)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.classic_members.heartbeat(consumer_group, generation_id, member_id,
                                                  group_instance_id)
        return self.classic.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup; see ``ClassicGroups.leave`` (``ClassicMembers.leave``
        for the classic members of a consumer group)."""
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return E.NONE, self.classic_members.leave(consumer_group, leaving)
        return self.classic.leave(group_id, leaving)

    # -- the consumer group protocol (KIP-848) ---------------------------------

    async def consumer_heartbeat(self, req: HeartbeatRequest,
                                 topics: TopicView) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (see ``ConsumerGroups.heartbeat``), answered
        once the in-sync replicas have what it wrote."""
        result = self.consumer.heartbeat(req, topics)
        if not req.group_id:
            return result
        error = await self.durable(req.group_id, result.error)
        return result if error is result.error else HeartbeatResult(error, None, None, 0)

    # -- online migration between the protocols (``migration``) ---------------

    def _policy(self) -> str:
        return str(self.config["group.consumer.migration.policy"]).lower()

    def _upgrade(self, classic: Group, topics: TopicView) -> ConsumerGroup | None:
        """A consumer-protocol member joins the non-empty classic group: the
        consumer group it becomes, its classic record tombstoned; None if
        the conversion is not allowed.

        Raises:
            HeartbeatError: no room for the joining member, or the tombstone
                could not be written.
        """
        gid = classic.group_id
        if not migration.can_upgrade(self._policy(), classic,
                                     self.config["group.consumer.max.size"]):
            log.info("classic group not upgraded", group=gid, policy=self._policy(),
                     protocol_type=classic.protocol_type)
            return None
        max_size = self.config["group.consumer.max.size"]
        if len(classic.members) >= max_size:
            # No room for the joining member: refused before anything changes.
            raise HeartbeatError(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached "
                                 f"its maximum capacity of {max_size} members.")
        try:
            converted = migration.to_consumer_group(classic, topics.lookup)
        except ValueError as exc:
            log.warning("classic group not upgraded: malformed consumer protocol", group=gid,
                        error=str(exc))
            return None
        error = self.store.append(gid, [group_tombstone(gid)])
        if error is not E.NONE:
            raise HeartbeatError(error, f"Group {gid} could not be upgraded.")
        for member in classic.members.values():
            answer_parked(member, E.REBALANCE_IN_PROGRESS)
        self.rebalance.dropped(classic)
        shell = self.groups[gid] = Group(gid, GroupState.EMPTY, self.wall_clock())
        shell.offsets = classic.offsets
        self.consumer_groups[gid] = converted
        for converted_member in converted.members.values():
            self.consumer.arm_session(converted, converted_member)
        log.info("classic group upgraded to a consumer group", group=gid,
                 epoch=converted.group_epoch, members=len(converted.members))
        return converted

    def _downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> ErrorCode | None:
        """``leaving`` is about to go: if it is the last consumer-protocol
        member and the policy allows, the group becomes a classic group that
        rebalances at once; the error of writing that. None: no downgrade."""
        if not migration.can_downgrade(self._policy(), group, leaving.member_id):
            return None
        return self._to_classic(group, leaving.member_id, f"downgraded from a consumer group: "
                                f"member {leaving.member_id} left")

    def _downgrade_replaced(self, group: ConsumerGroup) -> ErrorCode | None:
        """A classic static member took the place of the last consumer-protocol
        member: the group becomes classic, Stable (no rebalance), if the policy
        allows; the error of writing that. None: no downgrade."""
        if not migration.downgrade_enabled(self._policy()) or \
                group.classic_members() != len(group.members):
            return None
        return self._to_classic(group, "", None)

    def _to_classic(self, group: ConsumerGroup, leaving_id: str,
                    rebalance: str | None) -> ErrorCode | None:
        """Replace ``group`` by the classic group its members (but ``leaving_id``)
        form, rebalancing it for the reason ``rebalance`` unless None."""
        gid = group.group_id
        try:
            classic = migration.to_classic_group(group, leaving_id, self.wall_clock())
        except ValueError as exc:
            log.warning("consumer group not downgraded: malformed consumer protocol", group=gid,
                        error=str(exc))
            return None
        self.consumer.dropped(group)
        deleted = self.consumer_records.delete(gid)
        del self.consumer_groups[gid]
        shell = self.groups.get(gid)
        if shell is not None:
            classic.offsets = shell.offsets
        self.groups[gid] = classic
        stored = self.rebalance.store_group(classic)
        self.rebalance.loaded(classic)
        if rebalance is not None:
            self.rebalance.prepare(classic, rebalance)
        log.info("consumer group downgraded to a classic group", group=gid,
                 generation=classic.generation_id, members=len(classic.members))
        return deleted if deleted is not E.NONE else stored


# A JoinGroup's view of the broker's topics when the caller has none (tests of the classic protocol).
NO_TOPICS = TopicView(lambda name: None, lambda: (), lambda name: False)
