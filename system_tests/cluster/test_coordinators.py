"""Group and transaction coordinators across brokers: each lives on the leader of
its internal-topic partition and moves with it when that broker is killed.

Real processes on a real ZooKeeper, real clients (librdkafka for the group,
the Java client for transactions), SIGKILL for the failures.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from replication.internal_topics import OFFSETS_TOPIC, TRANSACTION_TOPIC, partition_for
from system_tests import txn_java
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for

# Few internal partitions keep three brokers cheap; RF 3 so each survives a kill.
INTERNAL = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
            "transaction.state.log.num.partitions": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2", "group.initial.rebalance.delay.ms": "200"}
RECORDS = 400


def coordinator_of(cluster: Cluster, topic: str, key: str) -> int:
    """The broker leading ``key``'s partition of an internal topic (as metadata says)."""
    parts = wait_for(f"{topic} led", lambda: (p := cluster.partitions(topic))
                     and all(info["leader"] > 0 for info in p.values()) and p)
    return int(parts[partition_for(key, len(parts))]["leader"])


def committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": ",".join(cluster.bootstrap()), "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=30)
    finally:
        consumer.close()
    # librdkafka reports "nothing committed" as a negative sentinel.
    return {tp.partition: max(tp.offset, 0) for tp in got}


def commit_until_done(consumer: Consumer) -> None:
    """A synchronous commit, retried while the coordinator moves."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"commit kept failing: {exc}") from None
            time.sleep(0.2)


def test_group_continues_on_the_new_coordinator_with_offsets_intact(cluster: Cluster,
                                                                     topic: str) -> None:
    cluster.start(INTERNAL)
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": ",".join(cluster.bootstrap()), "acks": "all"})
    values = [f"v{i}".encode() for i in range(RECORDS)]
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % 2)
    assert producer.flush(WAIT_S) == 0

    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": ",".join(cluster.bootstrap()), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(seen) < RECORDS // 2 and time.monotonic() < deadline:
            batch = consumer.consume(50, timeout=1.0)
            seen += [m.value() for m in batch if m.error() is None]
            if batch:
                commit_until_done(consumer)
        assert len(seen) >= RECORDS // 2
        before = committed(cluster, group, topic, 2)
        assert sum(before.values()) == len(seen)

        victim = coordinator_of(cluster, OFFSETS_TOPIC, group)
        cluster.brokers[victim].kill()
        new = wait_for("a new group coordinator", lambda: (
            c := coordinator_of(cluster, OFFSETS_TOPIC, group)) != victim and c)
        assert new != victim
        # The new coordinator loaded the offsets committed through the old one.
        assert wait_for("offsets from the new coordinator",
                        lambda: committed(cluster, group, topic, 2) == before and before)

        deadline = time.monotonic() + WAIT_S
        while len(seen) < RECORDS and time.monotonic() < deadline:
            batch = consumer.consume(50, timeout=1.0)
            seen += [m.value() for m in batch if m.error() is None]
            if batch:
                commit_until_done(consumer)
    finally:
        consumer.close()
    # Every record once: nothing processed twice between synchronous commits.
    assert sorted(seen) == sorted(values)
    assert committed(cluster, group, topic, 2) == {0: RECORDS // 2, 1: RECORDS // 2}


def java_read_committed(cluster: Cluster, topic: str, expect: int) -> list[str]:
    out = txn_java.run(["consume", "--bootstrap", ",".join(cluster.bootstrap()), "--topic",
                        topic, "--isolation", "read_committed", "--expect", str(expect),
                        "--settle-ms", "1000"])
    return sorted(str(r[2]) for r in out["records"])


def test_transaction_survives_its_coordinator_being_killed(cluster: Cluster, topic: str,
                                                           tmp_path: Path) -> None:
    """A Java producer holds a transaction open, its coordinator is SIGKILLed, then it
    commits: the transaction is completed or aborted as a whole, never half-applied."""
    cluster.start(INTERNAL)
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    bootstrap = ",".join(cluster.bootstrap())
    group = f"g-{topic}"
    first = txn_java.run(["txns", "--bootstrap", bootstrap, "--topic", topic,
                          "--txn-id", f"warm-{topic}", "--transactions", "4", "--records", "2",
                          "--partitions", "2", "--offsets-group", group])
    committed_before = sorted(first["committed"])
    assert len(committed_before) == 4  # transactions 0 and 2 committed, 1 and 3 aborted
    # sendOffsetsToTransaction: transaction i sent offset i + 1, through the group's
    # coordinator, completed by the marker its transaction coordinator sent there.
    assert committed(cluster, group, topic, 1) == {0: 3}

    txn_id = f"open-{topic}"
    txn = txn_java.OpenTransaction(["--bootstrap", bootstrap, "--topic", topic,
                                    "--txn-id", txn_id, "--records", "10", "--partitions", "2"],
                                   tmp_path / "open.stderr")
    try:
        victim = coordinator_of(cluster, TRANSACTION_TOPIC, txn_id)
        cluster.brokers[victim].kill()
        answer = txn.send("commit")
    finally:
        txn.close()
    opened = sorted(f"open-{j}" for j in range(10))
    if "error" in answer:
        # Aborted (the producer gave up): none of its records may be visible.
        expected = committed_before
    else:
        assert answer == {"result": "commit"}
        expected = sorted(committed_before + opened)
    assert java_read_committed(cluster, topic, len(expected)) == expected

    # The restarted broker rejoins and the id keeps working on whoever coordinates it.
    cluster.brokers[victim].start()
    again = txn_java.run(["txns", "--bootstrap", ",".join(cluster.bootstrap()), "--topic", topic,
                          "--txn-id", txn_id, "--transactions", "1", "--records", "2",
                          "--partitions", "2"])
    assert len(again["committed"]) == 2
    assert java_read_committed(cluster, topic, len(expected) + 2) == \
        sorted(expected + again["committed"])
