"""Dynamic broker configs on three tierd brokers and a real ZooKeeper: an alter
of the cluster default reaches every broker, a per-broker alter only that
broker (also when another broker received it: the change notification carries
it), both kept in Kafka's znodes and still in effect after a restart.
"""

from __future__ import annotations

import json
from typing import Any

from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kazoo.client import KazooClient

from system_tests import javatool
from system_tests._proc import RawClient
from system_tests.cluster.cluster import Cluster, wait_for

BROKER = 4
KEY = "log.retention.bytes"


def _raw(cluster: Cluster, node: int) -> RawClient:
    host, port = cluster.brokers[node].bootstrap.rsplit(":", 1)
    return RawClient(host, int(port))


def seen_by(cluster: Cluster, node: int) -> tuple[str | None, int]:
    """(value, source) of KEY as broker ``node`` describes itself."""
    req = DescribeConfigsRequest[4](resources=[(BROKER, str(node), [KEY])],
                                    include_synonyms=False, include_documentation=False)
    with _raw(cluster, node) as client:
        [result] = client.request(req, 4, DescribeConfigsResponse[4]).results
    assert result.error_code == 0, result
    [entry] = result.configs
    return entry.value, entry.config_source


def java_admin(cluster: Cluster, *args: str) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", ",".join(cluster.bootstrap()), *args])


def znode(cluster: Cluster, entity: str) -> dict[str, Any]:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start()
    try:
        data, _ = zk.get(f"/config/brokers/{entity}")
        changes = zk.get_children("/config/changes")
    finally:
        zk.stop()
        zk.close()
    assert changes, "no change notification was written"
    return dict(json.loads(data))


def test_default_reaches_every_broker_and_per_broker_only_its_own(cluster: Cluster) -> None:
    cluster.start()
    nodes = sorted(cluster.brokers)
    java_admin(cluster, "broker-configs-alter", "--default", "--set", f"{KEY}=2222222")
    for node in nodes:
        wait_for(f"broker {node} to take the new default",
                 lambda node=node: seen_by(cluster, node) == ("2222222", 3) or None)
    assert znode(cluster, "<default>") == {"version": 1, "config": {KEY: "2222222"}}

    java_admin(cluster, "broker-configs-alter", "--broker", "2", "--set", f"{KEY}=3333")
    wait_for("broker 2 to take its own value", lambda: seen_by(cluster, 2) == ("3333", 2) or None)
    # Broker 3's entry, sent to broker 1: stored, and broker 3 is told.
    req = IncrementalAlterConfigsRequest[1](resources=[(BROKER, "3", [(KEY, 0, "4444")])],
                                            validate_only=False)
    with _raw(cluster, 1) as client:
        [result] = client.request(req, 1, IncrementalAlterConfigsResponse[1]).responses
    assert result.error_code == 0, result
    wait_for("broker 3 to take the value broker 1 stored",
             lambda: seen_by(cluster, 3) == ("4444", 2) or None)
    assert seen_by(cluster, 1) == ("2222222", 3)
    assert seen_by(cluster, 2) == ("3333", 2)
    assert znode(cluster, "2") == {"version": 1, "config": {KEY: "3333"}}

    described = java_admin(cluster, "broker-configs-describe", "--broker", "2", "--key", KEY)
    assert described["configs"][KEY]["synonyms"] == [
        [KEY, "3333", "DYNAMIC_BROKER_CONFIG"],
        [KEY, "2222222", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        [KEY, "-1", "DEFAULT_CONFIG"]]

    cluster.brokers[2].restart()
    wait_for("broker 2 back with its entry read from ZooKeeper",
             lambda: seen_by(cluster, 2) == ("3333", 2) or None)
