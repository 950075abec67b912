"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata, StopReplica.

Theory of operation: one ordered queue and one sender task per live broker
(Kafka's ControllerChannelManager). A request is built from the controller's
state when it is queued, so it says what the controller decided at that
moment; the sender delivers requests to its broker one at a time, in order,
retrying a failed send (with a backoff) until it succeeds or the broker
leaves the cluster. Brokers ignore requests from an older controller epoch,
so a request that arrives late after a newer one is harmless.

A batch of partitions goes as requests of at most ``REQUEST_PARTITIONS``
partitions each, in order: a broker decodes a request in one event-loop step,
and a LeaderAndIsr for thousands of partitions takes tens of milliseconds to
decode. Each partition's state stands alone, so a batch in several requests
means the same as in one.

Bounds: a queue holds at most ``MAX_QUEUED`` requests; a broker that cannot
take them that fast is resent the full state instead (its queue is cleared
and ``resync`` queues one UpdateMetadata + LeaderAndIsr with everything), so
memory stays bounded however long a broker is slow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from config.listeners import PROTOCOL_IDS
from protocol import broker_apis as ib
from protocol.partition import TopicPartition
from replication.elections import LeaderAndIsr
from replication.metadata_cache import BrokerEndpoint, ListenerEndpoint
from replication.peer import Connector, Peer, PeerError

if TYPE_CHECKING:
    from replication.controller_context import ControllerContext

log = structlog.get_logger(__name__)


LEADER_AND_ISR_VERSION = 5
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
# Requests waiting for one broker before it is resent the full state instead.
MAX_QUEUED = 1000
# Pause after a failed send before trying again (the broker may be restarting).
RETRY_BACKOFF_S = 0.2
# Kafka's LeaderAndIsr type for a full (not incremental) request.
FULL_TYPE = 1
# Partitions per LeaderAndIsr / UpdateMetadata / StopReplica request.
REQUEST_PARTITIONS = 250


def _chunks(tps: list[TopicPartition]) -> list[list[TopicPartition]]:
    """``tps`` sorted, in runs of ``REQUEST_PARTITIONS`` (one empty run for none)."""
    ordered = sorted(tps)
    return [ordered[i:i + REQUEST_PARTITIONS]
            for i in range(0, len(ordered), REQUEST_PARTITIONS)] or [[]]


def _listeners(e: BrokerEndpoint) -> tuple[ListenerEndpoint, ...]:
    return e.listeners or (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", e.host, e.port),)


class ControllerChannel:
    def __init__(self, node_id: int, timeout_ms: int, connector: Connector | None = None
                 ) -> None:
        self.node_id = node_id
        self.timeout_ms = timeout_ms
        # How the connections to the brokers are secured (None: plain TCP).
        self.connector = connector
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._queues: dict[int, deque[tuple[Any, Any, int, Any]]] = {}
        self._wake: dict[int, trio.Event] = {}
        self._senders: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        # Queues the full state for a broker whose queue overflowed (set by the controller).
        self.resync: Callable[[int], None] | None = None

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def set_brokers(self, brokers: dict[int, BrokerEndpoint]) -> None:
        """Start senders for new brokers, stop those of brokers that left."""
        for broker in list(self._senders):
            if broker not in brokers or brokers[broker] != self._brokers.get(broker):
                self._senders.pop(broker).cancel()
                self._queues.pop(broker, None)
        self._brokers = dict(brokers)
        assert self._nursery is not None
        for broker, endpoint in brokers.items():
            if broker not in self._senders:
                scope = trio.CancelScope()
                self._senders[broker] = scope
                self._queues[broker] = deque()
                self._wake[broker] = trio.Event()
                self._nursery.start_soon(self._send_loop, broker, endpoint, scope)

    def clear(self) -> None:
        """Resigned: drop everything queued and stop every sender."""
        for scope in self._senders.values():
            scope.cancel()
        self._senders.clear()
        self._queues.clear()
        self._brokers = {}

    def _enqueue(self, broker: int, item: tuple[Any, Any, int, Any]) -> None:
        queue = self._queues.get(broker)
        if queue is None:
            return
        if len(queue) >= MAX_QUEUED and self.resync is not None:
            log.warning("controller queue full; broker will get the full state", broker=broker)
            queue.clear()
            self.resync(broker)  # built from the current state, which includes ``item``
            return
        queue.append(item)
        self._wake[broker].set()

    async def _send_loop(self, broker: int, endpoint: BrokerEndpoint,
                         scope: trio.CancelScope) -> None:
        peer = Peer(broker, endpoint.host, endpoint.port, f"controller-{self.node_id}",
                    request_timeout_ms=self.timeout_ms, connector=self.connector)
        with scope:
            try:
                while True:
                    queue = self._queues[broker]
                    if not queue:
                        self._wake[broker] = trio.Event()
                        await self._wake[broker].wait()
                        continue
                    req_cls, resp_cls, version, body = queue[0]
                    try:
                        response = await peer.request(req_cls, resp_cls, version, body)
                    except PeerError as exc:
                        log.debug("controller request failed; retrying", broker=broker,
                                  api=req_cls.__name__, error=str(exc))
                        await trio.sleep(RETRY_BACKOFF_S)
                        continue
                    if queue and queue[0][3] is body:
                        queue.popleft()
                    if getattr(response, "error_code", 0):
                        log.warning("broker refused controller request", broker=broker,
                                    api=req_cls.__name__, error=response.error_code)
            finally:
                with trio.CancelScope(shield=True):
                    await peer.close()

    # -- requests ----------------------------------------------------------------

    def send_leader_and_isr(self, ctx: ControllerContext, broker: int,
                            tps: list[TopicPartition]) -> None:
        if not tps:
            return
        for chunk in _chunks(tps):
            self._leader_and_isr(ctx, broker, chunk)

    def _leader_and_isr(self, ctx: ControllerContext, broker: int,
                        tps: list[TopicPartition]) -> None:
        req = ib.LeaderAndIsrRequest[LEADER_AND_ISR_VERSION]
        topic_cls = req.LeaderAndIsrTopicState
        part_cls = topic_cls.LeaderAndIsrPartitionState
        by_topic: dict[str, list[Any]] = {}
        leaders: set[int] = set()
        for tp in tps:
            state = ctx.states.get(tp)
            if state is None:
                continue
            leaders.add(state.leader)
            by_topic.setdefault(tp[0], []).append(part_cls(
                partition_index=tp[1], controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=state.version, replicas=list(ctx.assignments[tp]),
                adding_replicas=[], removing_replicas=[], is_new=False))
        live = [req.LeaderAndIsrLiveLeader(broker_id=b, host_name=ctx.brokers[b].host,
                                           port=ctx.brokers[b].port)
                for b in sorted(leaders) if b in ctx.brokers]
        body = req(controller_id=self.node_id, controller_epoch=ctx.epoch,
                   broker_epoch=ctx.broker_epochs.get(broker, -1), request_type=FULL_TYPE,
                   topic_states=[topic_cls(topic_name=t, topic_id=ctx.topic_ids.get(t),
                                           partition_states=ps)
                                 for t, ps in by_topic.items()],
                   live_leaders=live)
        self._enqueue(broker, (ib.LeaderAndIsrRequest, ib.LeaderAndIsrResponse,
                               LEADER_AND_ISR_VERSION, body))

    def send_update_metadata(self, ctx: ControllerContext, brokers: list[int],
                             tps: list[TopicPartition] | None) -> None:
        """UpdateMetadata for ``tps`` (None: every partition) to each of ``brokers``."""
        for chunk in _chunks(list(ctx.states) if tps is None else tps):
            self._update_metadata(ctx, brokers, chunk)

    def _update_metadata(self, ctx: ControllerContext, brokers: list[int],
                         tps: list[TopicPartition]) -> None:
        req = ib.UpdateMetadataRequest[UPDATE_METADATA_VERSION]
        topic_cls = req.UpdateMetadataTopicState
        part_cls = topic_cls.UpdateMetadataPartitionState
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            state: LeaderAndIsr | None = ctx.states.get(tp)
            if state is None or tp not in ctx.assignments:
                continue
            replicas = ctx.assignments[tp]
            by_topic.setdefault(tp[0], []).append(part_cls(
                partition_index=tp[1], controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                zk_version=state.version, replicas=list(replicas),
                offline_replicas=[r for r in replicas if r not in ctx.brokers]))
        end_cls = req.UpdateMetadataBroker.UpdateMetadataEndpoint
        live = [req.UpdateMetadataBroker(
            id=b, endpoints=[end_cls(port=le.port, host=le.host, listener=le.name,
                                     security_protocol=PROTOCOL_IDS[le.security_protocol])
                             for le in _listeners(e)],
            rack=e.rack) for b, e in sorted(ctx.brokers.items())]
        for broker in brokers:
            body = req(controller_id=self.node_id, controller_epoch=ctx.epoch,
                       broker_epoch=ctx.broker_epochs.get(broker, -1),
                       topic_states=[topic_cls(topic_name=t, topic_id=ctx.topic_ids.get(t),
                                               partition_states=ps)
                                     for t, ps in by_topic.items()],
                       live_brokers=live)
            self._enqueue(broker, (ib.UpdateMetadataRequest, ib.UpdateMetadataResponse,
                                   UPDATE_METADATA_VERSION, body))

    def send_stop_replica(self, ctx: ControllerContext, broker: int,
                          tps: list[TopicPartition], delete: bool) -> None:
        if not tps:
            return
        for chunk in _chunks(tps):
            self._stop_replica(ctx, broker, chunk, delete)

    def _stop_replica(self, ctx: ControllerContext, broker: int,
                      tps: list[TopicPartition], delete: bool) -> None:
        req = ib.StopReplicaRequest[STOP_REPLICA_VERSION]
        topic_cls = req.StopReplicaTopicState
        part_cls = topic_cls.StopReplicaPartitionState
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            state = ctx.states.get(tp)
            by_topic.setdefault(tp[0], []).append(part_cls(
                partition_index=tp[1],
                leader_epoch=-2 if delete else (state.leader_epoch if state else -1),
                delete_partition=delete))
        body = req(controller_id=self.node_id, controller_epoch=ctx.epoch,
                   broker_epoch=ctx.broker_epochs.get(broker, -1),
                   topic_states=[topic_cls(topic_name=t, partition_states=ps)
                                 for t, ps in by_topic.items()])
        self._enqueue(broker, (ib.StopReplicaRequest, ib.StopReplicaResponse,
                               STOP_REPLICA_VERSION, body))
