"""Dynamic broker configs the controller and the replica fetchers take live, on
three tierd brokers and a real ZooKeeper (kafka-configs --entity-default as the
Java Admin sends it):

* ``unclean.leader.election.enable`` turned on while a partition waits for its
  last in-sync replica: the controller elects the out-of-sync survivor at once;
* ``num.replica.fetchers``: every broker re-spreads the partitions it follows
  over the new number of fetchers per leader, and replication goes on (every
  replica back in the ISR, acks=all produce served).
"""

from __future__ import annotations

import re
from typing import Any

from replication.fetcher import fetcher_index
from system_tests import javatool
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_cluster import produce_kafka_python
from system_tests.cluster.test_isr_and_elections import _isolate_leader

RESIZED = re.compile(r"replica fetchers resized\s+fetchers=(\d+) moved=\d+ "
                     r"num_replica_fetchers=(\d+)")


def set_default(cluster: Cluster, nodes: list[int], key: str, value: str) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", ",".join(cluster.bootstrap(nodes)),
                         "broker-configs-alter", "--default", "--set", f"{key}={value}"])


def test_turning_unclean_election_on_elects_the_waiting_partition(cluster: Cluster,
                                                                  topic: str) -> None:
    leader, _ = _isolate_leader(cluster, topic, {})
    survivor = next(n for n in cluster.live)
    wait_for("the returning replica told there is no leader",
             lambda: "leader=-1" in cluster.brokers[survivor].log_tail())
    assert cluster.partitions(topic, survivor)[0]["leader"] == -1
    set_default(cluster, [survivor], "unclean.leader.election.enable", "true")
    wait_for("the survivor elected uncleanly",
             lambda: cluster.partitions(topic, survivor)[0]["leader"] == survivor)
    assert produce_kafka_python(cluster, topic, [b"after"] * 3, 0, nodes=[survivor]) == \
        [10, 11, 12]


def expected_fetchers(cluster: Cluster, topic: str, node: int, count: int) -> int:
    """Fetchers ``node`` runs for ``topic``: one per (leader, fetcher index) it follows."""
    parts = cluster.partitions(topic, node)
    return len({(p["leader"], fetcher_index((topic, i), count))
                for i, p in parts.items() if p["leader"] != node})


def resized_to(cluster: Cluster, node: int, count: int) -> int | None:
    """The fetcher total of ``node``'s last resize to ``count`` (None: none yet)."""
    found = [int(m.group(1)) for m in RESIZED.finditer(cluster.brokers[node].log_tail())
             if int(m.group(2)) == count]
    return found[-1] if found else None


def test_num_replica_fetchers_respreads_followed_partitions(cluster: Cluster,
                                                          topic: str) -> None:
    cluster.start()
    cluster.create_topic(topic, 8, 3)
    nodes = sorted(cluster.brokers)
    count = 2
    set_default(cluster, nodes, "num.replica.fetchers", str(count))
    for node in nodes:
        want = expected_fetchers(cluster, topic, node, count)
        wait_for(f"broker {node} running {want} fetchers",
                 lambda node=node, want=want: resized_to(cluster, node, count) == want)
    for p in range(8):
        assert produce_kafka_python(cluster, topic, [b"x"], p) == [0]
    wait_for("every replica in sync", lambda: all(
        part["isr"] == nodes for part in cluster.partitions(topic, 1).values()))
