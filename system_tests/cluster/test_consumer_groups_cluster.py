"""A KIP-848 consumer group (group.protocol=consumer) keeps its members,
epochs and assignments when its coordinator is SIGKILLed: the next leader of
its ``__consumer_offsets`` partition replays the group's records, the Java
members carry on at their epochs without being fenced (no partition is
reported lost), and the records produced after the kill are consumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from replication.internal_topics import OFFSETS_TOPIC
from system_tests import javatool
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.test_coordinators import INTERNAL, coordinator_of
from system_tests.test_consumer_groups import Member

PARTITIONS = 4
PER_PARTITION = 20


def produce(bootstrap: list[str], topic: str, start: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.send(topic, f"{p}-{start + i}".encode(), partition=p)
    producer.flush(timeout=WAIT_S)
    producer.close()


def describe(bootstrap: list[str], group: str) -> dict[str, Any]:
    result = javatool.run(["admin", "--bootstrap", ",".join(bootstrap),
                           "describe-consumer-groups", "--group", group])
    return dict(result[group])


def members_view(described: dict[str, Any]) -> list[tuple[str, int, list[int]]]:
    return sorted((m["member_id"], m["epoch"], m["partitions"]) for m in described["members"])


def test_consumer_group_survives_its_coordinator_being_killed(cluster: Cluster, topic: str,
                                                              tmp_path: Path) -> None:
    cluster.start(INTERNAL)
    cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    produce(cluster.bootstrap(), topic, 0)
    group = f"g-{topic}"
    bootstrap = ",".join(cluster.bootstrap())
    members = [Member("java", bootstrap, topic, group, tmp_path) for _ in range(2)]
    try:
        def split() -> bool:
            owned = [m.owned() for m in members]
            return all(len(o) == PARTITIONS // 2 for o in owned) and \
                set().union(*owned) == set(range(PARTITIONS))

        wait_for("two members splitting the partitions", split)
        wait_for("every record consumed", lambda: set().union(*(m.processed() for m in members))
                 >= {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)})
        before = wait_for("a stable group", lambda: (d := describe(cluster.bootstrap(), group))
                          ["state"] == "Stable" and d)

        victim = coordinator_of(cluster, OFFSETS_TOPIC, group)
        cluster.brokers[victim].kill()
        wait_for("a new group coordinator",
                 lambda: coordinator_of(cluster, OFFSETS_TOPIC, group) != victim)
        live = cluster.bootstrap()
        after = wait_for("the group described by its new coordinator",
                         lambda: (d := describe(live, group))["state"] == "Stable" and d)
        # Same members, same epochs, same partitions: nothing was lost in the move.
        assert members_view(after) == members_view(before)
        assert after["group_epoch"] == before["group_epoch"]

        produce(live, topic, PER_PARTITION)
        wait_for("the records produced after the kill consumed",
                 lambda: set().union(*(m.processed() for m in members))
                 >= {(p, o) for p in range(PARTITIONS) for o in range(2 * PER_PARTITION)})
        assert not any(ev["ev"] == "lost" for m in members for ev in m.snapshot()), \
            [m.diagnostics() for m in members]
        assert members_view(describe(live, group)) == members_view(before)
    finally:
        for m in members:
            m.leave()
