"""The per-partition answers for the non-data APIs (``replication.partition_queries``),
over a ReplicaManager with real logs."""

from __future__ import annotations

import uuid

import pytest

from config import BrokerConfig, TopicConfigs
from replication import partition_queries
from replication.metadata_cache import PartitionState
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager
from tests.helpers import batch


@pytest.fixture
def replicas(tmp_path):
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1",
                                        "replica.lag.time.max.ms": "1000"})
    rm = ReplicaManager(config, LogManager(config))
    yield rm
    for lg in rm.logs.logs.values():
        lg.close()


def host(rm: ReplicaManager, tp: tuple[str, int], leader: int, isr: list[int],
         replicas: tuple[int, ...] = (1, 2, 3), min_isr: int = 2):
    cfg = TopicConfigs(rm.config, {"min.insync.replicas": str(min_isr)}).log_config()
    state = PartitionState(leader, 0, list(replicas), isr)
    if leader == rm.node_id:
        return rm.become_leader(tp, uuid.uuid4(), cfg, state)
    return rm.become_follower(tp, uuid.uuid4(), cfg, state)


# -- DescribeLogDirs -----------------------------------------------------------------


async def test_describe_log_dirs_lag_is_behind_the_leaders_high_watermark(replicas):
    host(replicas, ("led", 0), 1, [1, 2, 3])
    await replicas.append(("led", 0), batch([b"a", b"b"]), acks=1)
    followed = host(replicas, ("followed", 0), 2, [2, 3])
    replicas.append_as_follower(("followed", 0), _leader_batch(replicas, 3))
    followed.leader_high_watermark = 10  # from the leader's last fetch response
    lags = {p.topic: p.offset_lag for p in partition_queries.log_dir_partitions(replicas)}
    assert (lags["led"], lags["followed"]) == (0, 7)
    followed.leader_high_watermark = 3
    lags = {p.topic: p.offset_lag for p in partition_queries.log_dir_partitions(replicas)}
    assert lags["followed"] == 0


def _leader_batch(replicas: ReplicaManager, count: int) -> bytearray:
    """``count`` records as a leader wrote them (offsets 0.., epoch 0)."""
    source = host(replicas, ("source", 0), 1, [1], replicas=(1,), min_isr=1)
    source.log.append_as_leader(batch([b"r"] * count), 0)
    data = source.log.read(0, 1 << 20, source.log.end_offset, True).data
    return bytearray(data)
