"""Checks shared by the data-path handlers."""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaApiError
from replication.partition import Partition


def check_leader_epoch(part: Partition, current_leader_epoch: int) -> None:
    """Kafka's fencing rule for requests that carry the client's view of the epoch.

    Raises:
        KafkaApiError: FENCED_LEADER_EPOCH if the client is behind,
            UNKNOWN_LEADER_EPOCH if it is ahead of this broker.
    """
    if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
        return
    if current_leader_epoch < part.leader_epoch:
        raise KafkaApiError(ErrorCode.FENCED_LEADER_EPOCH,
                            f"epoch {current_leader_epoch} < {part.leader_epoch}")
    raise KafkaApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                        f"epoch {current_leader_epoch} > {part.leader_epoch}")
