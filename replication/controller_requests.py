"""Requests a broker sends to the controller: AlterPartition and ControlledShutdown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol import broker_apis as ib
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.elections import LeaderAndIsr
from replication.peer import Peer

ALTER_PARTITION_VERSION = 1
CONTROLLED_SHUTDOWN_VERSION = 3


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's ISR change, asked under the leader's epochs."""

    tp: TopicPartition
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


async def send_alter_partition(peer: Peer, broker: int, broker_epoch: int,
                               changes: list[IsrChange]
                               ) -> list[tuple[str, LeaderAndIsr | None]]:
    """Ask the controller to set these ISRs in one request; per change, in
    order: (error name or "", the state now).

    Raises:
        PeerError: the controller did not answer.
    """
    req = ib.AlterPartitionRequest[ALTER_PARTITION_VERSION]
    topics: dict[str, list[Any]] = {}
    for c in changes:
        topics.setdefault(c.tp[0], []).append(req.TopicData.PartitionData(
            partition_index=c.tp[1], leader_epoch=c.leader_epoch, new_isr=c.isr,
            leader_recovery_state=0, partition_epoch=c.partition_epoch))
    body = req(broker_id=broker, broker_epoch=broker_epoch, topics=[
        req.TopicData(topic_name=name, partitions=parts) for name, parts in topics.items()])
    resp = await peer.request(ib.AlterPartitionRequest, ib.AlterPartitionResponse,
                              ALTER_PARTITION_VERSION, body)
    if resp.error_code:
        return [(ErrorCode(resp.error_code).name, None)] * len(changes)
    got: dict[TopicPartition, tuple[str, LeaderAndIsr | None]] = {}
    for topic in resp.topics:
        for p in topic.partitions:
            state = LeaderAndIsr(p.leader_id, p.leader_epoch, tuple(p.isr), -1,
                                 p.partition_epoch)
            got[(topic.topic_name, p.partition_index)] = (
                "" if not p.error_code else ErrorCode(p.error_code).name, state)
    return [got.get(c.tp, ("UNKNOWN_SERVER_ERROR", None)) for c in changes]


async def send_controlled_shutdown(peer: Peer, broker: int, broker_epoch: int
                                   ) -> tuple[ErrorCode, list[TopicPartition]]:
    """Ask the controller to move leaderships away; (error, partitions still led).

    Raises:
        PeerError: the controller did not answer.
    """
    req = ib.ControlledShutdownRequest[CONTROLLED_SHUTDOWN_VERSION]
    resp = await peer.request(ib.ControlledShutdownRequest, ib.ControlledShutdownResponse,
                              CONTROLLED_SHUTDOWN_VERSION,
                              req(broker_id=broker, broker_epoch=broker_epoch))
    return (ErrorCode(resp.error_code),
            [(p.topic_name, p.partition_index) for p in resp.remaining_partitions])
