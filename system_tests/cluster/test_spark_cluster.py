"""The PySpark backfill (deploy/spark/backfill.py) against a three-broker
tiered cluster while the leader of a partition is SIGKILLed under it.

Real parts: pyspark in local[2] with Spark's Kafka connector, three tierd
processes on a real ZooKeeper sharing one remote tier (a directory), a topic
with replication factor 3 whose closed segments are all remote. The job's
Parquet must equal the aggregates computed in Python from what was produced,
although one partition's leader died while the job ran: the driver and the
executors' consumers have to find the new leader (which serves the old
offsets from the tier) by themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from deploy.spark import backfill
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.spark.helpers import (
    chunks,
    expected_aggregates,
    local_session,
    make_events,
    read_aggregates,
)
from system_tests.tiered_helpers import (
    ONE_BATCH_PER_SEGMENT,
    TIERED_BROKER_OVERRIDES,
    FsTier,
)

PARTITIONS = 3
PER_BATCH = 10
BATCHES = 12  # per partition, one segment each
# One batch per fetch, so each task makes a dozen round trips (remote reads)
# and is still reading when its leader dies.
SMALL_FETCHES = ["--kafka", "max.partition.fetch.bytes=1", "--kafka", "fetch.max.bytes=1"]
# The whole job, failover included, on a loaded 2-core machine.
JOB_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_session("tierd-spark-cluster-tests")
    yield session
    session.stop()


@pytest.fixture
def tier(tmp_path: Path) -> FsTier:
    """One directory shared by the three brokers (the fs store only: the S3
    store's cluster behaviour is covered by test_tiered_replicas.py)."""
    return FsTier(tmp_path / "remote")


def produce(cluster: Cluster, topic: str, events: list) -> None:
    """Round-robin over the partitions, PER_BATCH records per batch (segment)."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", linger_ms=1000,
                             enable_idempotence=True, request_timeout_ms=10_000, retries=20)
    try:
        for p in range(PARTITIONS):
            for batch in chunks(events[p::PARTITIONS], PER_BATCH):
                futures = [producer.send(topic, e.value(), e.key.encode(), partition=p,
                                         timestamp_ms=e.ts) for e in batch]
                producer.flush()
                for f in futures:
                    f.get(timeout=WAIT_S)
    finally:
        producer.close()


# When the leader dies: while the driver plans (so the driver's ListOffsets
# and every executor fetch of that partition need the new leader), or once
# the job's stage runs (executors reading, some consumers mid-partition).
KILL_POINTS = ("planning", "reading")


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_backfill_reads_through_a_killed_leader(spark: SparkSession, cluster: Cluster,
                                                 tier: FsTier, topic: str, tmp_path: Path,
                                                 kill_at: str) -> None:
    cluster.start({**TIERED_BROKER_OVERRIDES, **tier.broker_overrides(),
                   "rlmm.config.remote.log.metadata.topic.replication.factor": "3"})
    cluster.create_topic(topic, PARTITIONS, 3, {
        "min.insync.replicas": "2", "remote.storage.enable": "true",
        "segment.bytes": ONE_BATCH_PER_SEGMENT, "local.retention.bytes": "1",
        "retention.ms": "-1"})  # the events are stamped in 2025
    events = make_events(PARTITIONS * BATCHES * PER_BATCH, seed=11)
    produce(cluster, topic, events)
    wait_for("every partition's closed segments in the tier", lambda: all(
        len(tier.log_objects(topic, p)) >= BATCHES - 1 for p in range(PARTITIONS)))

    victim_partition = PARTITIONS - 1  # its task waits for a free core: read last
    victim = cluster.leader(topic, victim_partition)
    out = tmp_path / "daily"
    args = backfill.parse_args(["--bootstrap", ",".join(cluster.bootstrap()), "--topic", topic,
                                "--out", str(out), *SMALL_FETCHES])
    failure: list[BaseException] = []

    def job() -> None:
        try:
            backfill.run(spark, args)
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    runner = threading.Thread(target=job, name="backfill")
    runner.start()
    if kill_at == "reading":
        tracker = spark.sparkContext.statusTracker()
        wait_for("the job's stage running",
                 lambda: tracker.getActiveStageIds() or not runner.is_alive(), interval_s=0.01)
    job_running_at_kill = runner.is_alive()
    cluster.brokers[victim].kill()
    runner.join(JOB_TIMEOUT_S)

    assert not runner.is_alive(), "the backfill hung after the leader was killed"
    assert not failure, failure
    assert job_running_at_kill, "the job had finished before the kill"
    assert read_aggregates(spark, out) == expected_aggregates(events)
    # The partition moves (the job did not wait for the victim to come back).
    wait_for("a new leader", lambda: cluster.leader(topic, victim_partition) not in (victim, -1))
