"""Per-group configs on three tierd brokers and a real ZooKeeper: an
incrementalAlterConfigs of a group through one broker is kept in
/config/groups/<group> (Kafka's config node layout, with a change
notification), and every broker describes it, also one restarted since.
"""

from __future__ import annotations

import json
from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
from kazoo.client import KazooClient

from system_tests import javatool
from system_tests._proc import RawClient
from system_tests.cluster.cluster import Cluster, wait_for

GROUP = 32
INTERVAL = "consumer.heartbeat.interval.ms"
GROUP_CONFIG = 8


def described_by(cluster: Cluster, node: int, group: str) -> tuple[str, int]:
    host, port = cluster.brokers[node].bootstrap.rsplit(":", 1)
    req = DescribeConfigsRequest[4](resources=[(GROUP, group, [INTERVAL])],
                                    include_synonyms=False, include_documentation=False)
    with RawClient(host, int(port)) as client:
        [result] = client.request(req, 4, DescribeConfigsResponse[4]).results
    assert result.error_code == 0, result
    [entry] = result.configs
    return entry.value, entry.config_source


def group_znode(cluster: Cluster, group: str) -> dict[str, Any]:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start()
    try:
        data, _ = zk.get(f"/config/groups/{group}")
    finally:
        zk.stop()
        zk.close()
    return dict(json.loads(data))


def test_a_group_config_reaches_every_broker(cluster: Cluster) -> None:
    cluster.start()
    group = "cluster-gc"
    altered = javatool.run(["admin", "--bootstrap", cluster.brokers[2].bootstrap,
                            "group-configs-alter", "--group", group,
                            "--set", f"{INTERVAL}=7000"])
    assert altered["result"] == "NONE"
    assert group_znode(cluster, group) == {"version": 1, "config": {INTERVAL: "7000"}}
    for node in sorted(cluster.brokers):
        wait_for(f"broker {node} to describe the group's value",
                 lambda node=node: described_by(cluster, node, group)
                 == ("7000", GROUP_CONFIG) or None)
    cluster.brokers[3].restart()
    wait_for("broker 3 back with the group's value read from ZooKeeper",
             lambda: described_by(cluster, 3, group) == ("7000", GROUP_CONFIG) or None)
