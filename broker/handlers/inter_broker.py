"""Controller-to-broker and broker-to-controller requests (ZooKeeper mode):
LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown, AlterPartition.

A single-node broker has no controller: it refuses the first three with
STALE_CONTROLLER_EPOCH and the last two with NOT_CONTROLLER. In cluster mode
the first three go to ``ClusterNode`` (which fences old controller epochs)
and the last two to the controller, answered NOT_CONTROLLER by a broker that
is not the active controller.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, Session
from config.listeners import PROTOCOL_NAMES
from protocol import broker_apis as ib
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from replication.cluster import PartitionUpdate
from replication.controller_requests import IsrChange
from replication.metadata_cache import BrokerEndpoint, ListenerEndpoint, PartitionState


def _error(ctx: BrokerContext, api: str, code: ErrorCode) -> ErrorCode:
    if code:
        ctx.metrics.error(api, code)
    return code


async def handle_leader_and_isr(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = ib.LeaderAndIsrResponse[header.api_version]
    if ctx.cluster is None:
        return resp(error_code=_error(ctx, "LeaderAndIsr", ErrorCode.STALE_CONTROLLER_EPOCH),
                    topics=[])
    updates = [PartitionUpdate(t.topic_name, p.partition_index, t.topic_id, PartitionState(
        p.leader, p.leader_epoch, list(p.replicas), list(p.isr), [], p.partition_epoch))
        for t in req.topic_states for p in t.partition_states]
    code, errors = await ctx.cluster.leader_and_isr(req.controller_epoch, updates)
    topic_cls = resp.LeaderAndIsrTopicError
    topics = []
    for t in req.topic_states:
        topics.append(topic_cls(topic_id=t.topic_id, partition_errors=[
            topic_cls.LeaderAndIsrPartitionError(
                partition_index=p.partition_index,
                error_code=_error(ctx, "LeaderAndIsr",
                                  errors.get((t.topic_name, p.partition_index), code)))
            for p in t.partition_states]))
    return resp(error_code=_error(ctx, "LeaderAndIsr", code), topics=topics)


async def handle_update_metadata(ctx: BrokerContext, header: RequestHeader,
                                 req: Any, session: Session) -> Any:
    resp = ib.UpdateMetadataResponse[header.api_version]
    if ctx.cluster is None:
        return resp(error_code=_error(ctx, "UpdateMetadata", ErrorCode.STALE_CONTROLLER_EPOCH))
    inter_broker = ctx.config.listeners.inter_broker
    brokers = []
    for b in req.live_brokers:
        ends = tuple(ListenerEndpoint(e.listener, PROTOCOL_NAMES.get(e.security_protocol,
                                                                     "PLAINTEXT"),
                                      e.host, e.port) for e in b.endpoints)
        inter = next((e for e in ends if e.name == inter_broker), None)
        if inter is not None:
            brokers.append(BrokerEndpoint(b.id, inter.host, inter.port, b.rack, ends))
    partitions = [(t.topic_name, t.topic_id, p.partition_index, PartitionState(
        p.leader, p.leader_epoch, list(p.replicas), list(p.isr), list(p.offline_replicas),
        p.zk_version)) for t in req.topic_states for p in t.partition_states]
    code = await ctx.cluster.update_metadata(req.controller_id, req.controller_epoch, brokers,
                                             partitions)
    return resp(error_code=_error(ctx, "UpdateMetadata", code))


async def handle_stop_replica(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = ib.StopReplicaResponse[header.api_version]
    if ctx.cluster is None:
        return resp(error_code=_error(ctx, "StopReplica", ErrorCode.STALE_CONTROLLER_EPOCH),
                    partition_errors=[])
    wanted = [((t.topic_name, p.partition_index), p.delete_partition)
              for t in req.topic_states for p in t.partition_states]
    code, errors = await ctx.cluster.stop_replica(req.controller_epoch, wanted)
    return resp(error_code=_error(ctx, "StopReplica", code), partition_errors=[
        resp.StopReplicaPartitionError(topic_name=tp[0], partition_index=tp[1], error_code=e)
        for tp, e in errors.items()])


async def handle_controlled_shutdown(ctx: BrokerContext, header: RequestHeader,
                                     req: Any, session: Session) -> Any:
    resp = ib.ControlledShutdownResponse[header.api_version]
    if ctx.cluster is None or not ctx.cluster.controller.active:
        return resp(error_code=_error(ctx, "ControlledShutdown", ErrorCode.NOT_CONTROLLER),
                    remaining_partitions=[])
    error, still = await ctx.cluster.controller.controlled_shutdown(req.broker_id,
                                                                    req.broker_epoch)
    code = ErrorCode[error] if error else ErrorCode.NONE
    return resp(error_code=_error(ctx, "ControlledShutdown", code), remaining_partitions=[
        resp.RemainingPartition(topic_name=t, partition_index=p) for t, p in still])


async def handle_alter_partition(ctx: BrokerContext, header: RequestHeader,
                                 req: Any, session: Session) -> Any:
    resp = ib.AlterPartitionResponse[header.api_version]
    if ctx.cluster is None or not ctx.cluster.controller.active:
        return resp(throttle_time_ms=0,
                    error_code=_error(ctx, "AlterPartition", ErrorCode.NOT_CONTROLLER),
                    topics=[])
    changes = [IsrChange((t.topic_name, p.partition_index), p.leader_epoch,
                         p.partition_epoch, list(p.new_isr))
               for t in req.topics for p in t.partitions]
    answers = iter(await ctx.cluster.controller.alter_partitions(req.broker_id,
                                                                 req.broker_epoch, changes))
    topic_cls = resp.TopicData
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            error, state = next(answers)
            code = _error(ctx, "AlterPartition", ErrorCode[error] if error else ErrorCode.NONE)
            parts.append(topic_cls.PartitionData(
                partition_index=p.partition_index, error_code=code,
                leader_id=state.leader if state else -1,
                leader_epoch=state.leader_epoch if state else -1,
                isr=list(state.isr) if state else [], leader_recovery_state=0,
                partition_epoch=state.version if state else -1))
        topics.append(topic_cls(topic_name=t.topic_name, partitions=parts))
    return resp(throttle_time_ms=0, error_code=0, topics=topics)


HANDLERS = {
    ib.LeaderAndIsrRequest.API_KEY: handle_leader_and_isr,
    ib.UpdateMetadataRequest.API_KEY: handle_update_metadata,
    ib.StopReplicaRequest.API_KEY: handle_stop_replica,
    ib.ControlledShutdownRequest.API_KEY: handle_controlled_shutdown,
    ib.AlterPartitionRequest.API_KEY: handle_alter_partition,
}
