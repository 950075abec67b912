"""The topic writer of cluster mode: topic changes go to ZooKeeper, the controller acts.

Creating a topic writes its config (``/config/topics/<t>``) and then its
replica assignment (``/brokers/topics/<t>``, spread over the live brokers:
Kafka's rack-aware placement when brokers have a ``broker.rack``, a broker
without one counting as a rack of its own as in KRaft-mode Kafka, else
the rack-unaware spread); the controller sees the new znode, elects leaders and
tells the brokers. Deleting writes ``/admin/delete_topics/<t>``; growing
rewrites the assignment with the new partitions; altering configs rewrites
``/config/topics/<t>`` and leaves a change notification every broker
watches. Each call returns once ZooKeeper has the change; a caller that
needs the brokers to have applied it (CreateTopics does, so the client's
next Metadata sees leaders) waits with ``wait_for_topic``.

Producer ids come in blocks of ``PRODUCER_ID_BLOCK`` claimed from
``/latest_producer_id_block`` with compare-and-set, so no two brokers ever
hand out the same id.
"""

from __future__ import annotations

import random
import uuid

import structlog
import trio

from config import BrokerConfig, TopicConfigs
from protocol.errors import ErrorCode, KafkaApiError
from replication.elections import assign_replicas, assign_replicas_rack_aware
from replication.metadata import TopicInfo, validate_topic_name
from replication.metadata_cache import MetadataCache
from replication.zk_configs import ZkConfigs
from replication.zookeeper import ZkClient

log = structlog.get_logger(__name__)

# How long CreateTopics waits for the controller to elect the new topic's leaders.
TOPIC_PROPAGATION_TIMEOUT_S = 10.0


class ZkTopicAdmin:
    def __init__(self, config: BrokerConfig, zk: ZkClient, metadata: MetadataCache) -> None:
        self.config = config
        self.zk = zk
        self.configs = ZkConfigs(zk)
        self.metadata = metadata
        self.node_id: int = config["node.id"]
        self._pid_next = 0
        self._pid_end = 0
        self._pid_lock = trio.Lock()

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], internal: bool = False,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        validate_topic_name(name)
        TopicConfigs(self.config, configs)
        live = [b.node_id for b in self.metadata.brokers()]
        if replication_factor > len(live):
            raise KafkaApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"Replication factor: {replication_factor} larger than "
                                f"available brokers: {len(live)}.")
        existing = await self.zk.get_topics()
        collide = name.replace(".", "_")
        for other in existing:
            if other == name:
                raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                    f"Topic '{name}' already exists.")
            if other.replace(".", "_") == collide:
                raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"topic {name!r} collides with existing topic {other!r}")
        topic_id = uuid.uuid4()
        if assignment is None:
            assignment = self._assign(partitions, replication_factor, 0)
        await self.configs.set_topic_config(name, configs)
        if not await self.zk.create_topic_assignment(name, topic_id, assignment):
            raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        log.info("topic created", topic=name, partitions=partitions,
                 replication_factor=replication_factor, configs=configs)
        info = TopicInfo(name, topic_id, partitions, dict(configs), internal=internal)
        await self.wait_for_topic(name, partitions)
        return self.metadata.topic(name) or info

    async def wait_for_topic(self, name: str, partitions: int) -> None:
        """Until this broker's metadata shows every partition of ``name`` with a leader
        (or the propagation timeout: the client's retry will see it)."""
        with trio.move_on_after(TOPIC_PROPAGATION_TIMEOUT_S):
            while True:
                info = self.metadata.topic(name)
                if info is not None and info.partitions >= partitions and all(
                        (s := self.metadata.partition((name, p))) is not None and s.leader >= 0
                        for p in range(partitions)):
                    return
                await trio.sleep(0.02)

    async def delete_topic(self, name: str) -> None:
        await self.zk.mark_topic_for_deletion(name)
        with trio.move_on_after(TOPIC_PROPAGATION_TIMEOUT_S):
            while self.metadata.topic(name) is not None:
                await trio.sleep(0.02)

    async def create_partitions(self, name: str, count: int) -> None:
        assignment = await self.zk.get_topic_assignment(name)
        if assignment is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"The topic '{name}' does not exist.")
        current = len(assignment.partitions)
        rf = len(next(iter(assignment.partitions.values())))
        added = self._assign(count - current, rf, current)
        await self.zk.set_topic_assignment(name, assignment.topic_id,
                                           {**assignment.partitions, **added})
        await self.wait_for_topic(name, count)

    def _assign(self, partitions: int, replication_factor: int, start_partition: int
                ) -> dict[int, list[int]]:
        brokers = self.metadata.brokers()
        seed = random.randrange(1 << 30)
        if any(b.rack for b in brokers):
            racks = {b.node_id: b.rack or "" for b in brokers}
            return assign_replicas_rack_aware(racks, partitions, replication_factor,
                                              start_partition, seed)
        return assign_replicas([b.node_id for b in brokers], partitions, replication_factor,
                               start_partition, seed)

    async def alter_configs(self, name: str, configs: TopicConfigs) -> None:
        await self.configs.set_topic_config(name, configs.overrides)
        await self.configs.notify_topic_config_change(name)

    async def allocate_producer_id(self) -> int:
        """The next id of this broker's block; a new block is claimed when it runs out.

        Raises:
            KafkaApiError: COORDINATOR_NOT_AVAILABLE if ZooKeeper cannot be reached.
        """
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                await self._claim_block()
            pid = self._pid_next
            self._pid_next += 1
            return pid

    async def prefetch_producer_ids(self) -> None:
        """Claim a block at start, so InitProducerId works while ZooKeeper is away."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    await self._claim_block()
                except KafkaApiError:
                    pass  # claimed on first use instead

    async def _claim_block(self) -> None:
        try:
            self._pid_next, self._pid_end = await self.zk.allocate_producer_id_block(
                self.node_id)
        except Exception as exc:  # kazoo's connection and retry errors
            log.warning("cannot claim a producer id block", error=repr(exc))
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                "producer ids unavailable: ZooKeeper unreachable") from None
        log.info("producer id block claimed", start=self._pid_next, end=self._pid_end)
