"""``tierd admin topics`` against three tierd brokers on a real ZooKeeper.

The tool is given every broker as bootstrap; what it did is then checked on
each broker separately (its own Metadata and DescribeConfigs answers).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from system_tests.admin.tool import ok
from system_tests.cluster.cluster import Cluster, wait_for

PARTITIONS = 3
REPLICATION = 3


def test_create_describe_alter_and_delete_replicated_topic(cluster: Cluster, topic: str) -> None:
    cluster.start()
    bootstrap = ",".join(cluster.bootstrap())
    every_node = sorted(cluster.brokers)

    ok(bootstrap, "topics", "create", topic, "--partitions", str(PARTITIONS),
       "--replication-factor", str(REPLICATION), "--config", "min.insync.replicas=1")

    def fully_replicated() -> list[dict[str, Any]] | None:
        [described] = ok(bootstrap, "--json", "topics", "describe", topic).json()
        parts = described["partitions"]
        healthy = all(sorted(p["replicas"]) == every_node and sorted(p["isr"]) == every_node
                      and p["leader"] in every_node for p in parts)
        return parts if healthy and len(parts) == PARTITIONS else None

    parts = wait_for("every partition with 3 replicas in the ISR", fully_replicated)
    assert [p["partition"] for p in parts] == list(range(PARTITIONS))
    for node in every_node:
        seen = cluster.partitions(topic, node)
        assert {i: sorted(p["replicas"]) for i, p in seen.items()} == {
            i: every_node for i in range(PARTITIONS)}

    ok(bootstrap, "topics", "alter-configs", topic, "--set", "min.insync.replicas=2",
       "--set", "retention.ms=600000")
    altered = {"min.insync.replicas": ("2", "DYNAMIC_TOPIC_CONFIG"),
               "retention.ms": ("600000", "DYNAMIC_TOPIC_CONFIG")}
    for node in every_node:
        wait_for(f"broker {node} to report the new configs",
                 partial(_reports_configs, cluster, node, topic, altered))

    ok(bootstrap, "topics", "delete", topic)
    for node in every_node:
        wait_for(f"broker {node} to forget the topic", partial(_forgot, cluster, node, topic))


def _reports_configs(cluster: Cluster, node: int, topic: str,
                     want: dict[str, tuple[str, str]]) -> bool:
    """Whether ``node`` alone, asked through the tool, reports exactly ``want`` as overrides."""
    res = ok(cluster.brokers[node].bootstrap, "--json", "topics", "describe-configs", topic)
    return {c["name"]: (c["value"], c["source"]) for c in res.json()} == want


def _forgot(cluster: Cluster, node: int, topic: str) -> bool:
    """Whether ``node`` alone no longer lists ``topic``."""
    return topic not in ok(cluster.brokers[node].bootstrap, "topics", "list").stdout.split()
