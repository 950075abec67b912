"""Tiered storage across replicas: three brokers sharing one remote tier (a
directory, or a bucket on a moto S3 server over HTTP), real processes on a real
ZooKeeper.

Only the leader copies; followers learn the tier boundary from the
replicated ``__remote_log_metadata`` and free their local disk; a broker
whose disk is wiped rebuilds from the tier (BuildingRemoteLogAuxState)
instead of replicating from offset 0, and can then serve the whole log
alone.
"""

from __future__ import annotations

import shutil

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from storage.log import checkpoint
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.tiered_helpers import (
    ONE_BATCH_PER_SEGMENT,
    TIERED_BROKER_OVERRIDES,
    RemoteTier,
)

RECORDS = 40


def tiered_config(tier: RemoteTier) -> dict[str, str]:
    return {**TIERED_BROKER_OVERRIDES, **tier.broker_overrides(),
            "rlmm.config.remote.log.metadata.topic.replication.factor": "3"}


def local_bases(cluster: Cluster, node: int, topic: str) -> list[int]:
    directory = cluster.brokers[node].workdir / "data" / f"{topic}-0"
    return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())


def wait_metadata_in_sync(cluster: Cluster, node: int) -> None:
    """Wait until ``node`` is in the ISR of every ``__remote_log_metadata``
    partition: a test that then kills the other brokers needs it to lead them."""
    wait_for(f"broker {node} in sync on the remote log metadata", lambda: all(
        node in p["isr"] for p in cluster.partitions("__remote_log_metadata").values()))


def produce(cluster: Cluster, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", linger_ms=0,
                             enable_idempotence=True, max_in_flight_requests_per_connection=1,
                             request_timeout_ms=10_000, retries=20)
    try:
        offsets = []
        for v in values:  # one batch each: with tiny segments, one segment each
            offsets.append(producer.send(topic, v, partition=0).get(timeout=WAIT_S).offset)
        return offsets
    finally:
        producer.close()


def start_with_tiered_topic(cluster: Cluster, tier: RemoteTier, topic: str,
                            count: int) -> list[bytes]:
    """Start the cluster over ``tier``; a topic (RF 3, min ISR 2, one batch per
    segment, local retention 1 byte) with ``count`` records, one batch each,
    tiered and freed on every replica down to its last few. Returns the values."""
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    values = [f"v{i}".encode() for i in range(count)]
    assert produce(cluster, topic, values) == list(range(count))
    # Every replica keeps only its tail locally once the leader has tiered the rest.
    wait_for("local disks freed on every replica", lambda: all(
        (bases := local_bases(cluster, n, topic)) and bases[0] >= count - 3
        for n in (1, 2, 3)))
    return values


def read_from(bootstrap: str, topic: str, count: int,
              start: int = 0) -> list[tuple[int, bytes]]:
    """``count`` records of partition 0 from offset ``start`` on, as (offset, value)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=200, request_timeout_ms=20_000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[tuple[int, bytes]] = []

        def more() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.offset, r.value) for r in records)
            return len(out) >= count

        wait_for(f"{count} records from {bootstrap}", more)
        return out
    finally:
        consumer.close()


def test_a_wiped_broker_rebuilds_from_the_tier_and_serves_the_whole_log(
        cluster: Cluster, topic: str, tier: RemoteTier) -> None:
    values = start_with_tiered_topic(cluster, tier, topic, RECORDS)

    leader = cluster.leader(topic, 0)
    victim = next(n for n in (1, 2, 3) if n != leader)
    cluster.brokers[victim].kill()
    # Restart only once the cluster has noticed (its ZooKeeper session ended), so
    # "back in the ISR" below means it caught up, not that it was never dropped.
    wait_for("the victim out of the ISR",
             lambda: victim not in cluster.partitions(topic)[0]["isr"])
    shutil.rmtree(cluster.brokers[victim].workdir / "data")
    cluster.brokers[victim].start()
    wait_for("the wiped broker back in the ISR",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    # It rebuilt from the tier: no local copy of the early offsets, its
    # leader epochs restored from the remote segment's checkpoint.
    bases = local_bases(cluster, victim, topic)
    assert bases and bases[0] > 0, bases
    assert "rebuilt from the remote tier" in cluster.brokers[victim].log_tail(0, 1 << 26)
    epochs = checkpoint.read_epochs(str(cluster.brokers[victim].workdir / "data"
                                        / f"{topic}-0" / "leader-epoch-checkpoint"))
    assert epochs and epochs[0] == (0, 0), epochs

    # The other two die: the rebuilt broker leads and serves every offset,
    # the early ones from the remote tier.
    wait_metadata_in_sync(cluster, victim)
    for n in (1, 2, 3):
        if n != victim:
            cluster.brokers[n].kill()
    wait_for("the rebuilt broker leads", lambda: cluster.partitions(
        topic, victim)[0]["leader"] == victim)
    got = read_from(cluster.brokers[victim].bootstrap, topic, RECORDS)
    assert got[:RECORDS] == list(enumerate(values))


def test_deleting_a_tiered_topic_with_a_broker_down_leaves_no_object(
        cluster: Cluster, topic: str, tier: RemoteTier) -> None:
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    produce(cluster, topic, [f"d{i}".encode() for i in range(10)])
    wait_for("segments in the remote tier", lambda: len(tier.objects(topic)) > 0)
    # Neither the leader nor the controller: the admin client talks to the latter.
    busy = {cluster.leader(topic, 0), cluster.describe_cluster()["controller_id"]}
    down = next(n for n in (1, 2, 3) if n not in busy)
    cluster.brokers[down].kill()
    # Until its session ends, clients still try it (kafka-python's admin fails on that).
    wait_for("the broker gone from the metadata", lambda: down not in [
        b["broker_id"] for b in cluster.describe_cluster()["brokers"]])

    admin = cluster.admin()
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    wait_for("no object of the topic left", lambda: tier.objects(topic) == [])

    cluster.brokers[down].start()
    wait_for("the returning broker dropped its copy", lambda: not (
        cluster.brokers[down].workdir / "data" / f"{topic}-0").exists())
    assert tier.objects(topic) == []


def test_a_new_leader_resumes_copying_where_the_tier_ends(cluster: Cluster, topic: str,
                                                          tier: RemoteTier) -> None:
    """Controlled shutdown moves leadership; the new leader copies only what is
    not tiered yet (no offset copied twice), the old one stops."""
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    first = [f"a{i}".encode() for i in range(15)]
    produce(cluster, topic, first)
    wait_for("the first records tiered", lambda: len(tier.log_objects(topic)) >= 14)
    old = cluster.leader(topic, 0)
    assert cluster.brokers[old].stop() == 0  # SIGTERM: controlled shutdown
    wait_for("a new leader", lambda: cluster.leader(topic, 0) not in (old, -1))
    second = [f"b{i}".encode() for i in range(15)]
    assert produce(cluster, topic, second) == list(range(15, 30))
    new = cluster.leader(topic, 0)
    assert new != old

    def tiered_once() -> bool:
        # A copy the old leader had in flight when it stepped down is never
        # published; the new leader copies that segment itself and removes the
        # stale attempt, so in the end every offset is in the tier exactly once.
        starts = sorted(tier.start_offset_of(n) for n in tier.log_objects(topic))
        return starts[:29] == list(range(29)) and len(starts) == len(set(starts))

    wait_for("the new records tiered by the new leader, each segment once", tiered_once)
    live = ",".join(cluster.bootstrap())
    assert read_from(live, topic, 30)[:30] == list(enumerate(first + second))


def test_reassignment_adds_a_replica_that_builds_from_the_tier(cluster: Cluster, topic: str,
                                                               tier: RemoteTier) -> None:
    """AlterPartitionReassignments raises the replication factor of a tiered topic:
    the new replica builds from the tier, not from offset 0; moving the partition
    off a broker then drops that broker's copy and leaves the tier alone."""
    from kafka.admin import NewTopic

    cluster.start(tiered_config(tier))
    admin = cluster.admin()
    try:
        admin.create_topics([NewTopic(topic, replica_assignments={0: [1, 2]}, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": ONE_BATCH_PER_SEGMENT,
            "local.retention.bytes": "1"})])
    finally:
        admin.close()
    wait_for("the topic led", lambda: cluster.partitions(topic)[0]["leader"] in (1, 2))
    values = [f"r{i}".encode() for i in range(RECORDS)]
    assert produce(cluster, topic, values) == list(range(RECORDS))
    wait_for("the records tiered", lambda: len(tier.log_objects(topic)) >= RECORDS - 1)

    def reassign(replicas: list[int]) -> None:
        admin = cluster.admin()
        try:
            answer = admin.alter_partition_reassignments({TopicPartition(topic, 0): replicas})
            assert all(error is None for error in answer.values()), answer
            wait_for("the reassignment done", lambda: not admin.list_partition_reassignments())
        finally:
            admin.close()

    # Bad input: Kafka's error per partition, nothing changes.
    admin = cluster.admin()
    try:
        answer = admin.alter_partition_reassignments({
            TopicPartition(topic, 0): [1, 1], TopicPartition(topic, 7): [1, 2]})
        assert {tp.partition: err.__name__ for tp, err in answer.items()} == {
            0: "InvalidReplicationAssignmentError", 7: "UnknownTopicOrPartitionError"}
        answer = admin.alter_partition_reassignments({TopicPartition(topic, 0): None})
        assert [err.__name__ for err in answer.values()] == ["NoReassignmentInProgressError"]
    finally:
        admin.close()
    assert sorted(cluster.partitions(topic)[0]["replicas"]) == [1, 2]

    reassign([1, 2, 3])
    wait_for("broker 3 in the ISR", lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    assert sorted(cluster.partitions(topic)[0]["replicas"]) == [1, 2, 3]
    bases = local_bases(cluster, 3, topic)
    assert bases and bases[0] > 0, bases  # built from the tier, not from offset 0
    assert "rebuilt from the remote tier" in cluster.brokers[3].log_tail(0, 1 << 26)

    reassign([2, 3])
    wait_for("broker 1 dropped", lambda: cluster.partitions(topic)[0]["replicas"] == [2, 3]
             and not (cluster.brokers[1].workdir / "data" / f"{topic}-0").exists())
    assert len(tier.log_objects(topic)) >= RECORDS - 1  # the tier is the topic's, untouched
    wait_metadata_in_sync(cluster, 3)
    cluster.brokers[2].kill()
    wait_for("broker 3 leads", lambda: cluster.partitions(topic, 3)[0]["leader"] == 3)
    got = read_from(cluster.brokers[3].bootstrap, topic, RECORDS)
    assert got[:RECORDS] == list(enumerate(values))


def test_read_committed_over_tiered_data_after_a_failover(cluster: Cluster, topic: str,
                                                          tier: RemoteTier) -> None:
    """Java transactions (committed and aborted, interleaved) on a tiered topic;
    after the leader is killed, a read_committed consumer of the new leader
    reads exactly the committed records from offset 0, most of them remote
    (aborted transactions from the remote transaction indexes)."""
    from system_tests import txn_java

    cluster.start({**tiered_config(tier), "transaction.state.log.replication.factor": "3",
                   "transaction.state.log.num.partitions": "3"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": "600",
                                       "local.retention.bytes": "1"})
    result = txn_java.run(["txns", "--bootstrap", ",".join(cluster.bootstrap()), "--topic", topic,
                           "--txn-id", f"tiered-{topic}", "--transactions", "20",
                           "--records", "3", "--partitions", "1"])
    committed = sorted(result["committed"])
    assert len(committed) == 30
    wait_for("most of the log tiered", lambda: len(tier.log_objects(topic)) >= 5)
    victim = cluster.leader(topic, 0)
    cluster.brokers[victim].kill()
    wait_for("a new leader", lambda: cluster.partitions(
        topic, next(n for n in (1, 2, 3) if n != victim))[0]["leader"] not in (victim, -1))
    out = txn_java.run(["consume", "--bootstrap", ",".join(cluster.bootstrap()), "--topic", topic,
                        "--isolation", "read_committed", "--expect", "30", "--settle-ms", "1000"])
    assert sorted(str(r[2]) for r in out["records"]) == committed


def test_a_leader_with_a_corrupted_epoch_checkpoint_keeps_the_tier(cluster: Cluster,
                                                                   topic: str,
                                                                   tier: RemoteTier) -> None:
    """Kafka's FetchFromLeaderWithCorruptedCheckpointTest, tiered: the leader's
    leader-epoch-checkpoint is garbage when it restarts; it rebuilds the epochs
    (local segments, then the tiered part from the remote metadata), leads
    again, deletes no remote segment as an orphan and serves every offset."""
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "1",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    values = [f"c{i}".encode() for i in range(20)]
    produce(cluster, topic, values)
    wait_for("the records tiered", lambda: len(tier.log_objects(topic)) >= 19)
    leader = cluster.leader(topic, 0)
    assert cluster.brokers[leader].stop() == 0
    wait_for("the stopped leader out of the ISR",
             lambda: leader not in cluster.partitions(topic)[0]["isr"])
    checkpoint_file = (cluster.brokers[leader].workdir / "data" / f"{topic}-0"
                       / "leader-epoch-checkpoint")
    checkpoint_file.write_text("garbage\nnot a checkpoint\n")
    cluster.brokers[leader].start()
    wait_for("back in the ISR", lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    wait_metadata_in_sync(cluster, leader)
    for n in (1, 2, 3):  # the others go: it must lead with what it rebuilt
        if n != leader:
            cluster.brokers[n].kill()
    wait_for("it leads", lambda: cluster.partitions(topic, leader)[0]["leader"] == leader)
    got = read_from(cluster.brokers[leader].bootstrap, topic, len(values))
    assert got[:len(values)] == list(enumerate(values))
    # A few expiration runs later, every tiered segment is still there.
    produce_one = KafkaProducer(bootstrap_servers=[cluster.brokers[leader].bootstrap],
                                acks=1)
    try:
        produce_one.send(topic, b"after", partition=0).get(timeout=WAIT_S)
    finally:
        produce_one.close()
    # (by start offset: an unfinished copy's objects may come and go)
    wait_for("the new record tiered", lambda: {
        tier.start_offset_of(n) for n in tier.log_objects(topic)} >= set(range(20)))
    epochs = checkpoint.read_epochs(str(checkpoint_file))
    assert epochs and epochs[0][1] == 0, epochs
