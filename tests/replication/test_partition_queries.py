"""The per-partition answers for the non-data APIs (``replication.partition_queries``),
over a ReplicaManager with real logs."""

from __future__ import annotations

from replication import partition_queries
from replication.replica_manager import ReplicaManager
from tests.helpers import batch
from tests.replication.hosting import host

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
