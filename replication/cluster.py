"""A broker in cluster mode (``zookeeper.connect`` set): its parts and the
controller's requests it carries out.

Start: connect to ZooKeeper (a missing chroot or an unreachable server is a
clear error, not a hang), take the cluster id from it (checked against
meta.properties), open the logs of topics ZooKeeper still has (others were
deleted while we were away and are removed), then register under
/brokers/ids. Partitions are neither led nor followed until the controller
says so with LeaderAndIsr; until UpdateMetadata arrives the metadata cache
knows only this broker.

Controller requests (``leader_and_isr``, ``update_metadata``,
``stop_replica``) are refused when they come from an older controller epoch
than one already seen (STALE_CONTROLLER_EPOCH), and a partition state whose
leader epoch is older than ours is ignored, so a delayed request never
undoes a newer decision.

Leadership hooks: ``on_leadership`` listeners (the coordinators) hear
(tp, is_leader) after every change, to load or unload internal-topic state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
import trio

from config import BrokerConfig, TopicConfigs
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.controller import Controller
from replication.controller_channel import ControllerChannel
from replication.controller_requests import (
    IsrChange,
    send_alter_partition,
    send_controlled_shutdown,
)
from replication.elections import LEADER_DURING_DELETE, LeaderAndIsr
from replication.fetcher_manager import FetcherManager
from replication.internal_topics import INTERNAL_TOPICS, InternalTopics
from replication.isr import IsrManager
from replication.metadata import META_FILE, LocalMetadataStore, TopicInfo
from replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from replication.peer import Connector, Peer, PeerError
from replication.replica_manager import ReplicaManager
from replication.zk_admin import ZkTopicAdmin
from replication.zk_configs import ZkConfigs
from replication.zk_membership import ZkMembership
from replication.zookeeper import ZkClient
from storage.log.manager import LogManager, now_ms
from storage.pace import Pacer

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class PartitionUpdate:
    """One partition of a LeaderAndIsr request."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None
    state: PartitionState


@dataclass(slots=True)
class ClusterNode:
    config: BrokerConfig
    zk: ZkClient
    store: LocalMetadataStore
    metadata: MetadataCache
    replicas: ReplicaManager
    admin: ZkTopicAdmin
    internal: InternalTopics
    channel: ControllerChannel
    controller: Controller
    fetchers: FetcherManager
    isr: IsrManager
    # How connections to other brokers are secured (None: plain TCP).
    connector: Connector | None = None
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    controller_epoch: int = -1
    broker_epoch: int = -1
    on_leadership: list[Callable[[TopicPartition, bool], None]] = field(default_factory=list)

    @property
    def node_id(self) -> int:
        return self.config["node.id"]

    @property
    def membership(self) -> ZkMembership:
        """This broker's registration in ZooKeeper (``zk_membership``)."""
        return ZkMembership(self.zk, self.config.listeners.inter_broker)

    # -- start ---------------------------------------------------------------------


    async def load_logs(self) -> None:
        for topic in await self.zk.get_topics():
            assignment = await self.zk.get_topic_assignment(topic)
            if assignment is not None:
                self.topic_ids[topic] = assignment.topic_id
                self.topic_configs[topic] = await ZkConfigs(self.zk).get_topic_config(topic)
        self.replicas.logs.load(self._log_config_for, self.topic_ids.get)

    def _log_config_for(self, topic: str):  # type: ignore[no-untyped-def]
        configs = self.topic_configs.get(topic)
        return TopicConfigs(self.config, configs).log_config() if configs is not None else None

    async def _topic_config(self, topic: str) -> dict[str, str]:
        if topic not in self.topic_configs:
            self.topic_configs[topic] = await ZkConfigs(self.zk).get_topic_config(topic)
        return self.topic_configs[topic]

    async def run(self, endpoint: BrokerEndpoint,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start what serves controller requests, then register (the controller
        may send LeaderAndIsr at once), then compete for the controller role."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.channel.run)
            await nursery.start(self.fetchers.run)
            await nursery.start(self.isr.run)
            nursery.start_soon(self._watch_config_changes)
            self.metadata.set_brokers([endpoint])
            self.broker_epoch = await self.membership.register_broker(endpoint)
            log.info("registered in ZooKeeper", node_id=self.node_id,
                     broker_epoch=self.broker_epoch)
            nursery.start_soon(self._reregister_on_new_session)
            nursery.start_soon(self.admin.prefetch_producer_ids)
            await nursery.start(self.controller.run)
            task_status.started()

    async def _reregister_on_new_session(self) -> None:
        async for _ in self.zk.new_sessions():
            endpoint = self.metadata.broker(self.node_id)
            if endpoint is None:
                continue
            self.broker_epoch = await self.membership.register_broker(endpoint)
            log.info("re-registered after a new ZooKeeper session", node_id=self.node_id,
                     broker_epoch=self.broker_epoch)

    async def _watch_config_changes(self) -> None:
        async for topics in self.zk.watch_config_changes():
            for topic in topics:
                configs = await ZkConfigs(self.zk).get_topic_config(topic)
                self.topic_configs[topic] = configs
                info = self.metadata.topic(topic)
                if info is not None:
                    self.metadata.put_topic(TopicInfo(info.name, info.topic_id, info.partitions,
                                                      dict(configs), internal=info.internal))
                cfg = TopicConfigs(self.config, configs).log_config()
                for part in [p for p in self.replicas.hosted() if p.topic == topic]:
                    self.replicas.update_log_config(part.tp, cfg)
                log.info("topic config changed", topic=topic, configs=configs)

    # -- controller requests ----------------------------------------------------------

    def _stale(self, controller_epoch: int) -> bool:
        if controller_epoch < self.controller_epoch:
            log.info("ignoring request from an old controller", epoch=controller_epoch,
                     current=self.controller_epoch)
            return True
        self.controller_epoch = controller_epoch
        return False

    async def leader_and_isr(self, controller_epoch: int, updates: list[PartitionUpdate]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if self._stale(controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        pacer = Pacer()
        for u in updates:
            tp = (u.topic, u.partition)
            errors[tp] = await self._apply(u, tp)
            await pacer.tick()
        return ErrorCode.NONE, errors

    async def _apply(self, u: PartitionUpdate, tp: TopicPartition) -> ErrorCode:
        state = u.state
        part = self.replicas.get(tp)
        if part is not None and state.leader_epoch < part.leader_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if self.node_id not in state.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if u.topic_id is not None:
            self.topic_ids[u.topic] = u.topic_id
        topic_id = self.topic_ids.get(u.topic) or uuid.uuid4()
        cfg = TopicConfigs(self.config, await self._topic_config(u.topic)).log_config()
        same_epoch = part is not None and state.leader_epoch == part.leader_epoch
        if state.leader == self.node_id:
            if same_epoch and part is not None and part.is_leader(self.node_id):
                part.partition_epoch = state.partition_epoch
                part.replicas = list(state.replicas)  # a reassignment may change them
                self.replicas.followers.update_isr(tp, state.isr)
                return ErrorCode.NONE
            self.fetchers.unfollow(tp)
            self.replicas.become_leader(tp, topic_id, cfg, state)
            log.info("became leader", topic=tp[0], partition=tp[1],
                     leader_epoch=state.leader_epoch, isr=state.isr)
            self._tell(tp, True)
        else:
            if same_epoch and part is not None and part.leader_id == state.leader \
                    and tp in self.fetchers.assigned:
                part.isr = list(state.isr)
                part.replicas = list(state.replicas)
                part.partition_epoch = state.partition_epoch
                return ErrorCode.NONE
            was_leader = part is not None and part.is_leader(self.node_id)
            self.replicas.become_follower(tp, topic_id, cfg, state)
            if state.leader >= 0:
                self.fetchers.follow(tp, state.leader, state.leader_epoch)
            else:
                self.fetchers.unfollow(tp)
            log.info("became follower", topic=tp[0], partition=tp[1], leader=state.leader,
                     leader_epoch=state.leader_epoch)
            if was_leader or part is None:
                self._tell(tp, False)
        return ErrorCode.NONE

    def _tell(self, tp: TopicPartition, leader: bool) -> None:
        for listener in self.on_leadership:
            try:
                listener(tp, leader)
            except Exception:
                log.exception("leadership listener failed", topic=tp[0], partition=tp[1])

    async def update_metadata(self, controller_id: int, controller_epoch: int,
                              brokers: list[BrokerEndpoint],
                              partitions: list[tuple[str, uuid.UUID | None, int, PartitionState]]
                              ) -> ErrorCode:
        if self._stale(controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.metadata.set_controller(controller_id)
        self.metadata.set_brokers(brokers)
        grown: dict[str, int] = {}
        for topic, topic_id, index, state in partitions:
            if state.leader == LEADER_DURING_DELETE:
                self.metadata.remove_topic(topic)
                continue
            self.metadata.put_partition((topic, index), state)
            grown[topic] = max(grown.get(topic, 0), index + 1)
            if topic_id is not None:
                self.topic_ids[topic] = topic_id
        for topic, count in grown.items():
            info = self.metadata.topic(topic)
            topic_id = self.topic_ids.get(topic)
            if topic_id is None:
                continue
            partitions_known = max(count, info.partitions if info is not None else 0)
            self.metadata.put_topic(TopicInfo(topic, topic_id, partitions_known,
                                              dict(await self._topic_config(topic)),
                                              internal=topic in INTERNAL_TOPICS))
        return ErrorCode.NONE

    async def stop_replica(self, controller_epoch: int,
                           partitions: list[tuple[TopicPartition, bool]]
                           ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if self._stale(controller_epoch):
            return ErrorCode.STALE_CONTROLLER_EPOCH, {}
        pacer = Pacer()
        for tp, delete in partitions:
            await pacer.tick()
            self.fetchers.unfollow(tp)
            p = self.replicas.get(tp)
            was_leader = p is not None and p.is_leader(self.node_id)
            # Only the local copy: a deleted tiered topic's remote data is removed
            # by the leader of its metadata partition, on the controller's
            # DELETE_PARTITION_MARKED (replication.controller_remote_deletes).
            await self.replicas.stop_replica(tp, delete)
            if was_leader:
                self._tell(tp, False)
            if delete:
                self.topic_configs.pop(tp[0], None)
        return ErrorCode.NONE, dict.fromkeys((tp for tp, _ in partitions), ErrorCode.NONE)

    # -- talking to the controller ------------------------------------------------------

    def controller_peer(self) -> Peer | None:
        endpoint = self.metadata.broker(self.metadata.controller_id)
        if endpoint is None:
            return None
        return Peer(endpoint.node_id, endpoint.host, endpoint.port, f"broker-{self.node_id}",
                    request_timeout_ms=self.config["controller.socket.timeout.ms"],
                    connector=self.connector)

    def peer_for(self, leader: int, fetcher_id: int) -> Peer | None:
        endpoint = self.metadata.broker(leader)
        if endpoint is None:
            return None
        return Peer(leader, endpoint.host, endpoint.port,
                    f"replica-fetcher-{self.node_id}-{fetcher_id}",
                    request_timeout_ms=self.config["replica.socket.timeout.ms"],
                    connector=self.connector)


def meta_cluster_id(log_dir: str) -> str | None:
    """The cluster id meta.properties records, if any."""
    try:
        with open(f"{log_dir}/{META_FILE}", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "cluster.id":
                    return value
    except OSError:
        return None
    return None


async def open_cluster_node(config: BrokerConfig, connector: Connector | None = None,
                            clock: Callable[[], int] = now_ms) -> ClusterNode:
    """Connect to ZooKeeper and assemble the broker's cluster-mode parts;
    ``connector`` secures their connections to other brokers (None: plain TCP).

    Raises:
        ZkConfigError: ZooKeeper unreachable or its chroot missing.
        MetaPropertiesError: the log dir belongs to another cluster or node id.
    """
    zk = await ZkClient.connect(config["zookeeper.connect"],
                                config["zookeeper.session.timeout.ms"],
                                config["zookeeper.connection.timeout.ms"])
    cluster_id = await zk.get_or_create_cluster_id(meta_cluster_id(config.log_dir)
                                                   or uuid.uuid4().hex[:22])
    store = LocalMetadataStore(config.log_dir, config["node.id"], cluster_id)
    metadata = MetadataCache(cluster_id)
    replicas = ReplicaManager(config, LogManager(config, clock))
    replicas.rack_of = lambda broker: (e.rack if (e := metadata.broker(broker)) else None)
    admin = ZkTopicAdmin(config, zk, metadata)
    channel = ControllerChannel(config["node.id"], config["controller.socket.timeout.ms"],
                                connector)
    controller = Controller(config, zk, channel)
    node_holder: list[ClusterNode] = []

    async def alter(changes: list[IsrChange]) -> list[tuple[str, LeaderAndIsr | None]]:
        return await alter_partitions(node_holder[0], changes)

    node = ClusterNode(config, zk, store, metadata, replicas, admin,
                       InternalTopics(config, admin, metadata, replicas), channel, controller,
                       FetcherManager(config, replicas, lambda leader, f: node_holder[0].peer_for(leader, f)),
                       IsrManager(config, replicas, alter), connector)
    node_holder.append(node)
    await node.load_logs()
    return node


async def alter_partitions(node: ClusterNode, changes: list[IsrChange]
                           ) -> list[tuple[str, LeaderAndIsr | None]]:
    """Ask the controller (in process if it is us) to change these ISRs."""
    if node.controller.active:
        return await node.controller.alter_partitions(node.node_id, node.broker_epoch, changes)
    peer = node.controller_peer()
    if peer is None:
        raise RuntimeError("no controller known")
    try:
        return await send_alter_partition(peer, node.node_id, node.broker_epoch, changes)
    finally:
        await peer.close()


async def controlled_shutdown(node: ClusterNode) -> None:
    """Ask the controller to move this broker's leaderships away before it stops
    (controlled.shutdown.max.retries attempts, retry.backoff.ms apart)."""
    attempts = max(node.config["controlled.shutdown.max.retries"], 1)
    backoff = node.config["controlled.shutdown.retry.backoff.ms"] / 1000
    for attempt in range(1, attempts + 1):
        try:
            with trio.fail_after(node.config["controller.socket.timeout.ms"] / 1000):
                if node.controller.active:
                    error, still = await node.controller.controlled_shutdown(
                        node.node_id, node.broker_epoch)
                    code = ErrorCode[error] if error else ErrorCode.NONE
                else:
                    peer = node.controller_peer()
                    if peer is None:
                        raise PeerError("no controller known")
                    try:
                        code, still = await send_controlled_shutdown(peer, node.node_id,
                                                                     node.broker_epoch)
                    finally:
                        await peer.close()
        except (PeerError, trio.TooSlowError) as exc:
            log.info("controlled shutdown attempt failed", attempt=attempt, error=str(exc))
        else:
            if code is ErrorCode.NONE and not still:
                log.info("controlled shutdown done", attempt=attempt)
                return
            log.info("controlled shutdown incomplete", attempt=attempt, error=code.name,
                     still_leading=len(still))
        if attempt < attempts:
            await trio.sleep(backoff)
    log.warning("controlled shutdown did not complete; stopping anyway")
