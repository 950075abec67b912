"""Hosting a partition on a test's ReplicaManager as leader or follower."""

from __future__ import annotations

import uuid

from config import TopicConfigs
from replication.metadata_cache import PartitionState
from replication.partition import Partition
from replication.replica_manager import ReplicaManager


def host(rm: ReplicaManager, tp: tuple[str, int], leader: int, isr: list[int],
         replicas: tuple[int, ...] = (1, 2, 3), min_isr: int = 2) -> Partition:
    cfg = TopicConfigs(rm.config, {"min.insync.replicas": str(min_isr)}).log_config()
    state = PartitionState(leader, 0, list(replicas), isr)
    if leader == rm.node_id:
        return rm.become_leader(tp, uuid.uuid4(), cfg, state)
    return rm.become_follower(tp, uuid.uuid4(), cfg, state)
