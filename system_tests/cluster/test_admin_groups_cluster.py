"""``tierd admin groups`` on a three-broker cluster: the tool, bootstrapped from
a broker that is not the group's coordinator, still describes the group with
the right lag and resets its offsets (the coordinator answers OffsetFetch and
OffsetCommit, each partition's leader ListOffsets)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from replication.internal_topics import OFFSETS_TOPIC, partition_for
from system_tests.admin.tool import ok
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for

# Few internal partitions keep three brokers cheap; RF 3 like a real cluster.
INTERNAL = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3"}
RECORDS = {0: 12, 1: 7, 2: 4}
COMMITTED = {0: 9, 1: 2, 2: 4}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets as librdkafka fetches them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in RECORDS], timeout=WAIT_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got}


def coordinator_of(cluster: Cluster, group: str) -> int:
    """The broker leading ``group``'s partition of the offsets topic."""
    def led() -> dict[int, dict[str, Any]] | None:
        parts = cluster.partitions(OFFSETS_TOPIC)
        return parts if parts and all(i["leader"] > 0 for i in parts.values()) else None

    parts = wait_for(f"{OFFSETS_TOPIC} led", led)
    return int(parts[partition_for(group, len(parts))]["leader"])


def test_describe_and_reset_through_a_broker_that_is_not_the_coordinator(
        cluster: Cluster, topic: str) -> None:
    cluster.start(INTERNAL)
    cluster.create_topic(topic, len(RECORDS), 3)
    everyone = ",".join(cluster.bootstrap())
    producer = Producer({"bootstrap.servers": everyone, "acks": "all"})
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(topic, b"v%d" % i, partition=partition)
    assert producer.flush(WAIT_S) == 0

    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": everyone, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()],
                        asynchronous=False)
    finally:
        consumer.close()

    coordinator = coordinator_of(cluster, group)
    [other] = cluster.bootstrap([next(n for n in cluster.brokers if n != coordinator)])

    assert group in [g["group"] for g in ok(other, "--json", "groups", "list").json()]
    [described] = ok(other, "--json", "groups", "describe", group).json()
    assert described["state"] == "Empty"
    assert {r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"])
            for r in described["partitions"]} == {
        p: (COMMITTED[p], RECORDS[p], RECORDS[p] - COMMITTED[p]) for p in RECORDS}

    ok(other, "groups", "reset-offsets", group, "--topic", topic, "--shift-by", "-3",
       "--execute")
    want = {p: max(o - 3, 0) for p, o in COMMITTED.items()}
    assert committed(everyone, group, topic) == want
