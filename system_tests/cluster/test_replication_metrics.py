"""Replication metrics (Kafka's names, scraped from each broker's Prometheus
endpoint) and the follower lag DescribeLogDirs reports, through a follower
killed and restarted, and a follower stopped and resumed."""

from __future__ import annotations

import os
import signal

from kafka import KafkaProducer
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from system_tests._proc import RawClient, scrape
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_cluster import produce_kafka_python
from system_tests.harness import TierdBroker, free_port

# DescribeLogDirs v1: the last version without flexible fields.
DESCRIBE_LOG_DIRS_VERSION = 1


def start_with_metrics(cluster: Cluster, config: dict[str, str] | None = None) -> None:
    """Start the brokers, each with its own metrics port (kept across restarts)."""
    for broker in cluster.brokers.values():
        assert isinstance(broker, TierdBroker)
        broker.config["tierd.metrics.port"] = str(free_port())
    cluster.start(config)


def metric(cluster: Cluster, node: int, name: str) -> float:
    """One sample of ``name`` (without labels) from broker ``node``'s endpoint."""
    broker = cluster.brokers[node]
    assert isinstance(broker, TierdBroker)
    url = f"http://{broker.host}:{broker.config['tierd.metrics.port']}/metrics"
    return scrape(url).samples[(f"tierd_{name}", ())]


def offset_lag(cluster: Cluster, node: int, topic: str, partition: int) -> int:
    """The offset lag broker ``node`` reports for its replica, by DescribeLogDirs."""
    broker = cluster.brokers[node]
    req = DescribeLogDirsRequest[DESCRIBE_LOG_DIRS_VERSION](topics=[
        DescribeLogDirsRequest[DESCRIBE_LOG_DIRS_VERSION].DescribableLogDirTopic(
            topic=topic, partitions=[partition])])
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(req, DESCRIBE_LOG_DIRS_VERSION, DescribeLogDirsResponse)
    [result] = resp.results
    [described] = [p for t in result.topics if t.name == topic for p in t.partitions
                   if p.partition_index == partition]
    return int(described.offset_lag)


def test_under_replicated_partitions_and_elections_through_a_killed_follower(
        cluster: Cluster, topic: str):
    start_with_metrics(cluster)
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    controller = cluster.describe_cluster()["controller_id"]
    victim = next(n for n in (1, 2, 3) if n not in (leader, controller))
    others = [n for n in (1, 2, 3) if n != victim]
    produce_kafka_python(cluster, topic, [b"before"] * 10, 0)
    wait_for("gauges of a healthy cluster", lambda: (
        metric(cluster, leader, "UnderReplicatedPartitions") == 0
        and metric(cluster, leader, "LeaderCount") == 1
        and all(metric(cluster, n, "PartitionCount") == 1 for n in (1, 2, 3))
        and [metric(cluster, n, "ActiveControllerCount") for n in (1, 2, 3)]
        == [1 if n == controller else 0 for n in (1, 2, 3)]))
    assert metric(cluster, leader, "ReplicationBytesOutPerSec_total") > 0
    assert metric(cluster, victim, "ReplicationBytesInPerSec_total") > 0
    elections = metric(cluster, controller, "LeaderElectionRateAndTimeMs_count")

    cluster.brokers[victim].kill()
    wait_for("the partition under-replicated on its leader", lambda: (
        metric(cluster, leader, "UnderReplicatedPartitions") == 1))
    wait_for("the controller to handle the lost broker", lambda: (
        metric(cluster, controller, "LeaderElectionRateAndTimeMs_count") > elections))
    # Two in-sync replicas remain: at min.insync.replicas, not below, and led.
    assert metric(cluster, leader, "AtMinIsrPartitionCount") == 1
    assert metric(cluster, leader, "UnderMinIsrPartitionCount") == 0
    assert metric(cluster, controller, "OfflinePartitionsCount") == 0
    assert produce_kafka_python(cluster, topic, [b"while-down"] * 10, 0,
                                nodes=others) == list(range(10, 20))

    expands = metric(cluster, leader, "IsrExpandsPerSec_total")
    elections = metric(cluster, controller, "LeaderElectionRateAndTimeMs_count")
    cluster.brokers[victim].start()
    wait_for("the restarted follower back in the ISR", lambda: (
        metric(cluster, leader, "UnderReplicatedPartitions") == 0))
    # The leader let it back in (an expansion), and the controller handled its return.
    assert metric(cluster, leader, "IsrExpandsPerSec_total") > expands
    assert metric(cluster, controller, "LeaderElectionRateAndTimeMs_count") > elections
    assert metric(cluster, controller, "UncleanLeaderElectionsPerSec_total") == 0
    wait_for("the restarted follower's bytes in", lambda: (
        metric(cluster, victim, "ReplicationBytesInPerSec_total") > 0))


def test_a_stopped_follower_lags_in_describe_log_dirs_and_the_isr_changes_are_counted(
        cluster: Cluster, topic: str):
    # The lag limit (1.5 s) is well below the session timeout (8 s): the shrink
    # is the leader's doing. One batch per follower fetch stretches the resumed
    # follower's catching up over many fetches, so its lag can be seen.
    start_with_metrics(cluster, {"zookeeper.session.timeout.ms": "8000",
                                 "replica.lag.time.max.ms": "1500",
                                 "replica.fetch.max.bytes": "1"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    controller = cluster.describe_cluster()["controller_id"]
    # Not the controller: stopping it would stall the AlterPartition that shrinks the ISR.
    follower = next(n for n in (1, 2, 3) if n not in (leader, controller))
    wait_for("every replica in sync", lambda: cluster.partitions(topic, leader)[0]["isr"]
             == [1, 2, 3])
    assert offset_lag(cluster, follower, topic, 0) == 0
    assert offset_lag(cluster, leader, topic, 0) == 0
    shrinks = metric(cluster, leader, "IsrShrinksPerSec_total")
    expands = metric(cluster, leader, "IsrExpandsPerSec_total")

    pid = cluster.brokers[follower].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the ISR without the stopped follower", lambda: (
            metric(cluster, leader, "IsrShrinksPerSec_total") > shrinks
            and follower not in cluster.partitions(topic, leader)[0]["isr"]))
        count = _produce_batches(cluster, topic, [leader], 300)
    finally:
        os.kill(pid, signal.SIGCONT)
    lag = wait_for("the resumed follower reporting its lag",
                   lambda: offset_lag(cluster, follower, topic, 0), interval_s=0.01)
    assert 0 < lag <= count
    wait_for("the follower caught up", lambda: offset_lag(cluster, follower, topic, 0) == 0
             and follower in cluster.partitions(topic, leader)[0]["isr"])
    assert offset_lag(cluster, leader, topic, 0) == 0
    wait_for("the expansion counted", lambda: (
        metric(cluster, leader, "IsrExpandsPerSec_total") > expands))


def _produce_batches(cluster: Cluster, topic: str, nodes: list[int], count: int) -> int:
    """``count`` records, one batch each (every send waits for its answer)."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(nodes), acks="all",
                             linger_ms=0, request_timeout_ms=10_000)
    try:
        for i in range(count):
            producer.send(topic, b"%06d" % i + b"x" * 200, partition=0).get(timeout=30)
    finally:
        producer.close()
    return count
