"""Cluster state kept in ZooKeeper, on three tierd brokers (one cluster start
for both, to keep the suite short):

* finalized features (KIP-584): the first broker seeds Kafka's /feature
  znode, the Java Admin's updateFeatures through one broker rewrites it, and
  every broker's ApiVersions follows with the same levels and epoch (the
  znode's version), also after a restart;
* group configs (KIP-848): an incrementalAlterConfigs of a group through one
  broker is kept in /config/groups/<group> (Kafka's config node layout, with
  a change notification), and every broker describes it, also one restarted
  since.
"""

from __future__ import annotations

import json
from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
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


def finalized_on(cluster: Cluster, node: int) -> tuple[dict[str, int], int]:
    """(levels, epoch) as broker ``node``'s ApiVersions v4 reports them."""
    host, port = cluster.brokers[node].bootstrap.rsplit(":", 1)
    with RawClient(host, int(port)) as client:
        resp = client.request(ApiVersionsRequest[4](client_software_name="t",
                                                    client_software_version="1"),
                              4, ApiVersionsResponse[4])
    assert resp.error_code == 0, resp
    return ({f.name: f.max_version_level for f in resp.finalized_features},
            resp.finalized_features_epoch)


def feature_znode(cluster: Cluster) -> tuple[dict[str, Any], int]:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start()
    try:
        data, stat = zk.get("/feature")
    finally:
        zk.stop()
        zk.close()
    return json.loads(data), stat.version


def java_admin(cluster: Cluster, node: int, *args: str) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", cluster.brokers[node].bootstrap, *args])


def test_levels_and_group_configs_reach_every_broker(cluster: Cluster) -> None:
    cluster.start({"tierd.transaction.version": "1"})
    nodes = sorted(cluster.brokers)
    seeded = ({"transaction.version": 1, "group.version": 1}, 0)
    for node in nodes:
        assert finalized_on(cluster, node) == seeded
    assert feature_znode(cluster) == ({"version": 2, "status": 1, "features": {
        "group.version": {"max_version_level": 1},
        "transaction.version": {"max_version_level": 1}}}, 0)

    described = java_admin(cluster, 2, "describe-features")
    assert described["finalized"] == {"transaction.version": 1, "group.version": 1}
    assert described["supported"]["transaction.version"] == [0, 2]
    assert described["epoch"] == 0

    upgraded = java_admin(cluster, 2, "update-features", "--feature", "transaction.version=2")
    assert upgraded["results"] == {"transaction.version": "NONE"}
    want = ({"transaction.version": 2, "group.version": 1}, 1)
    for node in nodes:
        wait_for(f"broker {node} to finalize transaction.version 2",
                 lambda node=node: finalized_on(cluster, node) == want or None)
    assert feature_znode(cluster)[1] == 1

    # A refused change (a downgrade sent as an upgrade) changes nothing anywhere.
    refused = java_admin(cluster, 3, "update-features", "--feature", "transaction.version=1")
    assert refused["results"]["transaction.version"].startswith("InvalidUpdateVersionException")
    assert feature_znode(cluster)[1] == 1
    unsafe = java_admin(cluster, 3, "update-features", "--feature", "group.version=0",
                        "--upgrade-type", "unsafe")
    assert unsafe["results"] == {"group.version": "NONE"}
    want = ({"transaction.version": 2}, 2)
    for node in nodes:
        wait_for(f"broker {node} to drop group.version",
                 lambda node=node: finalized_on(cluster, node) == want or None)

    group = "cluster-gc"
    altered = java_admin(cluster, 2, "group-configs-alter", "--group", group,
                         "--set", f"{INTERVAL}=7000")
    assert altered["result"] == "NONE"
    assert group_znode(cluster, group) == {"version": 1, "config": {INTERVAL: "7000"}}
    for node in nodes:
        wait_for(f"broker {node} to describe the group's value",
                 lambda node=node: described_by(cluster, node, group)
                 == ("7000", GROUP_CONFIG) or None)

    # Both outlive a restart, whatever tierd.transaction.version says.
    cluster.brokers[1].restart()
    wait_for("broker 1 back with the stored levels",
             lambda: finalized_on(cluster, 1) == want or None)
    assert described_by(cluster, 1, group) == ("7000", GROUP_CONFIG)
