"""Per-group configs (KIP-848, ConfigResource.Type.GROUP) and ConsumerGroupDescribe
v1 on one real tierd:

* the Java 4.3 Admin describes a group's consumer.session.timeout.ms and
  consumer.heartbeat.interval.ms (the broker's values, DEFAULT_CONFIG, until
  overridden: DYNAMIC_GROUP_CONFIG), alters them with incrementalAlterConfigs, and gets
  Kafka's InvalidConfigurationException for unknown keys, values outside the
  broker's group.consumer.min/max bounds and a session timeout not above the
  heartbeat interval; validate-only changes nothing;
* a change reaches the group's members live: the next heartbeat answers the
  new interval, and a member that stops heartbeating is fenced after the
  group's own session timeout;
* the Java Admin's describeConsumerGroups (ConsumerGroupDescribe v1) reports
  the member as a consumer-protocol member (MemberType, KIP-1099);
* overrides outlive a restart; on a raw socket an empty group name and the
  legacy AlterConfigs of a group are INVALID_REQUEST.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)

from protocol.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.errors import ErrorCode
from system_tests import javatool
from system_tests._proc import RawClient, TierdProc, start_tierd
from system_tests.admin import create_topic

GROUP = 32
SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"
# Bound for the fenced member to disappear: its 1.5 s session plus a loaded machine.
FENCE_WAIT_S = 30.0
INVALID_CONFIG = "InvalidConfigurationException"


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    # Lower bounds that let a group use a short session (the broker's own values stay).
    return start_tierd(request, tmp_path_factory.mktemp("group-configs"), {
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "100"}, name="tierd-group-configs")


def java_admin(broker: TierdProc, *args: str) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", broker.bootstrap, *args])


def configs(broker: TierdProc, group: str) -> dict[str, tuple[str, str]]:
    described = java_admin(broker, "group-configs-describe", "--group", group)["configs"]
    return {k: (v["value"], v["source"]) for k, v in described.items()}


def alter(broker: TierdProc, group: str, *args: str) -> str:
    return str(java_admin(broker, "group-configs-alter", "--group", group, *args)["result"])


def test_java_admin_describes_and_alters_group_configs(tierd: TierdProc) -> None:
    group = "gc-java"
    admin = ["admin", "--bootstrap", tierd.bootstrap]
    describe = [*admin, "group-configs-describe", "--group", group]
    alter_op = [*admin, "group-configs-alter", "--group", group]
    bad = (["--set", "consumer.assignors=range"], ["--set", f"{SESSION}=60001"],
           ["--set", f"{SESSION}=999"], ["--set", f"{INTERVAL}=15001"],
           ["--set", f"{INTERVAL}=abc"],
           ["--set", f"{SESSION}=2000", "--set", f"{INTERVAL}=2000"])
    # One JVM for the lot: each command's result in order.
    runs = javatool.run_batch([
        describe, *([*alter_op, *args] for args in bad),
        [*alter_op, "--set", f"{INTERVAL}=1000", "--validate-only"], describe,
        [*alter_op, "--set", f"{INTERVAL}=1000", "--set", f"{SESSION}=50000"], describe,
        [*alter_op, "--delete", SESSION], describe,
        [*admin, "group-configs-describe", "--group", "gc-other"]])
    assert all(r["exit"] == 0 for r in runs), runs
    results = [r["result"] for r in runs]

    def shown(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {k: (v["value"], v["source"]) for k, v in result["configs"].items()}

    assert shown(results[0]) == {SESSION: ("45000", "DEFAULT_CONFIG"),
                                 INTERVAL: ("5000", "DEFAULT_CONFIG")}
    for args, result in zip(bad, results[1:7], strict=True):
        assert result["result"].startswith(INVALID_CONFIG), (args, result)
    assert results[7]["result"] == "NONE"  # validate-only: nothing stored
    assert shown(results[8])[INTERVAL] == ("5000", "DEFAULT_CONFIG")
    assert results[9]["result"] == "NONE"
    assert shown(results[10]) == {SESSION: ("50000", "DYNAMIC_GROUP_CONFIG"),
                                  INTERVAL: ("1000", "DYNAMIC_GROUP_CONFIG")}
    assert results[11]["result"] == "NONE"
    assert shown(results[12]) == {SESSION: ("45000", "DEFAULT_CONFIG"),
                                  INTERVAL: ("1000", "DYNAMIC_GROUP_CONFIG")}
    assert shown(results[13])[INTERVAL] == ("5000", "DEFAULT_CONFIG")

    tierd.restart()
    assert configs(tierd, group)[INTERVAL] == ("1000", "DYNAMIC_GROUP_CONFIG")


def heartbeat(client: RawClient, group: str, member: str, epoch: int, topic: str) -> Any:
    joining = epoch == 0
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if joining else -1,
        subscribed_topic_names=[topic] if joining else None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[] if joining else None)
    resp = client.request(req, 1, ConsumerGroupHeartbeatResponse[1])
    assert resp.error_code == 0, resp
    return resp


def members(client: RawClient, group: str) -> list[str]:
    resp = client.request(ConsumerGroupDescribeRequest[1](
        group_ids=[group], include_authorized_operations=False), 1,
        ConsumerGroupDescribeResponse[1])
    [described] = resp.groups
    assert described.error_code == 0, described
    assert all(m.member_type == 1 for m in described.members)
    return [m.member_id for m in described.members]


def test_changes_reach_members_live(tierd: TierdProc) -> None:
    group, topic = "gc-live", "gc-live-topic"
    create_topic(tierd.bootstrap, topic, 2)
    with RawClient(tierd.host, tierd.port) as client:
        joined = heartbeat(client, group, "m1", 0, topic)
        assert joined.heartbeat_interval_ms == 5000
        kinds = java_admin(tierd, "describe-member-types", "--group", group)
        assert kinds == {"type": "Consumer", "members": {"m1": "true"}, "_exit": 0}

        assert alter(tierd, group, "--set", f"{INTERVAL}=700") == "NONE"
        assert heartbeat(client, group, "m1", joined.member_epoch, topic
                         ).heartbeat_interval_ms == 700
        # The next heartbeat arms the group's own 1.5 s session; then silence.
        assert alter(tierd, group, "--set", f"{SESSION}=1500") == "NONE"
        heartbeat(client, group, "m1", joined.member_epoch, topic)
        deadline = time.monotonic() + FENCE_WAIT_S
        while members(client, group) == ["m1"]:
            assert time.monotonic() < deadline, "member not fenced after the group's session"
            time.sleep(0.1)
        assert members(client, group) == []


def test_bad_group_resources_on_the_wire(tierd: TierdProc) -> None:
    with RawClient(tierd.host, tierd.port) as client:
        described = client.request(DescribeConfigsRequest[4](
            resources=[(GROUP, "", None)], include_synonyms=False,
            include_documentation=False), 4, DescribeConfigsResponse[4])
        assert described.results[0].error_code == ErrorCode.INVALID_REQUEST
        legacy = client.request(AlterConfigsRequest[2](
            resources=[(GROUP, "g", [(INTERVAL, "1000")])], validate_only=False),
            2, AlterConfigsResponse[2])
        assert legacy.responses[0].error_code == ErrorCode.INVALID_REQUEST
