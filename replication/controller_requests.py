"""Requests a broker sends to the controller: AlterPartition and ControlledShutdown."""

from __future__ import annotations

from protocol import broker_apis as ib
from protocol.errors import ErrorCode
from replication.elections import LeaderAndIsr
from replication.peer import Peer
from storage.log.manager import TopicPartition

ALTER_PARTITION_VERSION = 1
CONTROLLED_SHUTDOWN_VERSION = 3


async def send_alter_partition(peer: Peer, broker: int, broker_epoch: int, tp: TopicPartition,
                               leader_epoch: int, partition_epoch: int,
                               isr: list[int]) -> tuple[str, LeaderAndIsr | None]:
    """Ask the controller to set ``tp``'s ISR; (error name or "", the state now).

    Raises:
        PeerError: the controller did not answer.
    """
    req = ib.AlterPartitionRequest[ALTER_PARTITION_VERSION]
    body = req(broker_id=broker, broker_epoch=broker_epoch, topics=[req.TopicData(
        topic_name=tp[0], partitions=[req.TopicData.PartitionData(
            partition_index=tp[1], leader_epoch=leader_epoch, new_isr=isr,
            leader_recovery_state=0, partition_epoch=partition_epoch)])])
    resp = await peer.request(ib.AlterPartitionRequest, ib.AlterPartitionResponse,
                              ALTER_PARTITION_VERSION, body)
    if resp.error_code:
        return ErrorCode(resp.error_code).name, None
    for topic in resp.topics:
        for p in topic.partitions:
            if (topic.topic_name, p.partition_index) != tp:
                continue
            state = LeaderAndIsr(p.leader_id, p.leader_epoch, tuple(p.isr), -1,
                                 p.partition_epoch)
            return ("" if not p.error_code else ErrorCode(p.error_code).name), state
    return "UNKNOWN_SERVER_ERROR", None


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
