"""Compaction of ``__remote_log_metadata`` in a cluster (issue 26): three brokers,
a real ZooKeeper, one shared directory tier.

The leader of the metadata partition compacts it while one of its followers
is down; the live follower moves its log start with the leader's and holds
the same records from there on. The broker that was down comes back below
the new log start: it replicates from there and its metadata manager, whose
snapshot predates the compaction, rebuilds from the restatement. Left alone
(the two others killed) it serves every live segment from the tier and
never brings a deleted one back.
"""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from system_tests._proc import RawClient
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import (
    produce,
    read_from,
    tiered_config,
    wait_metadata_in_sync,
)
from system_tests.tiered_helpers import (
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    ONE_BATCH_PER_SEGMENT,
    FsTier,
    read_metadata,
)

RECORDS = 12
DELETED = 8  # records (one segment each) below the new log start
COMPACTING = {
    "rlmm.config.remote.log.metadata.snapshot.interval.ms": "100",
    "rlmm.config.remote.log.metadata.compaction.min.superseded.records": "0",
}


def metadata_partition_of(cluster: Cluster, node: int) -> int:
    """The metadata partition holding records (the test's topic is the only tiered one)."""
    [p] = wait_for("records in a metadata partition", lambda: [  # a list: p may be 0
        p for p in range(METADATA_PARTITIONS) if cluster.segment_batches(node, METADATA_TOPIC, p)])
    return p


def log_start(cluster: Cluster, node: int, partition: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=cluster.brokers[node].bootstrap,
                             request_timeout_ms=10_000)
    try:
        tp = TopicPartition(METADATA_TOPIC, partition)
        return int(consumer.beginning_offsets([tp], timeout_ms=10_000)[tp])
    finally:
        consumer.close()


def batches_from(cluster: Cluster, node: int, partition: int, start: int) -> list:
    """(base, last, CRC) of a replica's metadata batches at or above ``start``."""
    return [b for b in cluster.segment_batches(node, METADATA_TOPIC, partition) if b[0] >= start]


def test_followers_converge_and_an_offline_replica_rebuilds(cluster: Cluster, topic: str,
                                                            tmp_path: Path) -> None:
    tier = FsTier(tmp_path / "remote")
    cluster.start({**tiered_config(tier), **COMPACTING})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    values = [f"v{i}".encode() for i in range(RECORDS)]
    assert produce(cluster, topic, values) == list(range(RECORDS))
    wait_for("segments tiered", lambda: len(tier.log_objects(topic)) >= RECORDS - 1)

    any_node = cluster.live[0]
    p = metadata_partition_of(cluster, any_node)
    meta_leader = cluster.leader(METADATA_TOPIC, p)
    user_leader = cluster.leader(topic, 0)
    victim = next(n for n in (1, 2, 3) if n not in (meta_leader, user_leader))
    other = next(n for n in (1, 2, 3) if n not in (meta_leader, victim))
    cluster.brokers[victim].kill()
    wait_for("the victim out of the metadata ISR",
             lambda: victim not in cluster.partitions(METADATA_TOPIC)[p]["isr"])

    admin = cluster.admin()
    try:
        admin.delete_records({TopicPartition(topic, 0): DELETED}, timeout_ms=int(WAIT_S * 1000))
    finally:
        admin.close()
    deleted = set(range(DELETED))
    wait_for("the remote segments below the log start deleted", lambda: not deleted & {
        tier.start_offset_of(n) for n in tier.log_objects(topic)})
    start = wait_for("the metadata partition compacted",
                     lambda: log_start(cluster, meta_leader, p) or None)
    # The live follower moved its log start too and holds the same records from it.
    wait_for("the follower's records equal the leader's", lambda: batches_from(
        cluster, other, p, start) == batches_from(cluster, meta_leader, p, start))

    cluster.brokers[victim].start()
    wait_for("the victim back in the metadata ISR",
             lambda: victim in cluster.partitions(METADATA_TOPIC)[p]["isr"])
    leader_start = log_start(cluster, meta_leader, p)
    wait_for("the victim's records equal the leader's", lambda: batches_from(
        cluster, victim, p, leader_start) == batches_from(cluster, meta_leader, p, leader_start))
    assert "remote log metadata rebuilt from a restatement" in \
        cluster.brokers[victim].log_tail(0, 1 << 26)

    # Alone, the victim serves every live record from the tier...
    wait_metadata_in_sync(cluster, victim)
    wait_for("the victim in sync on the topic",
             lambda: victim in cluster.partitions(topic)[0]["isr"])
    for n in (1, 2, 3):
        if n != victim:
            cluster.brokers[n].kill()
    wait_for("the victim leads", lambda: cluster.partitions(topic, victim)[0]["leader"] == victim)
    got = read_from(cluster.brokers[victim].bootstrap, topic, RECORDS - DELETED, DELETED)
    assert got[:RECORDS - DELETED] == list(enumerate(values))[DELETED:]
    # ...and deleted segments stay deleted: it writes nothing more about them
    # (an orphan it believed live it would expire again, below the log start).
    # Their deletion may still be in the topic, after the restatement, if the
    # compaction came between their copies' and their deletion's records.
    broker = cluster.brokers[victim]
    with RawClient(broker.host, broker.port, WAIT_S) as client:
        metadata = read_metadata(client, topic)  # KeyError on an update of a dropped segment
    live = {s.start_offset for s in metadata.segments.values()
            if s.states[-1] == COPY_SEGMENT_FINISHED}
    assert live == set(range(DELETED, RECORDS - 1))
    for s in metadata.segments.values():
        if s.start_offset < DELETED:
            assert s.states[-1] == DELETE_SEGMENT_FINISHED, s
            assert s.states.count(DELETE_SEGMENT_STARTED) == 1, s
