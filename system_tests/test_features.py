"""Finalized features (KIP-584) on one real tierd, changed by the Java 4.3 Admin
(describeFeatures, updateFeatures) and by ``tierd admin features``:

* the seeded levels (transaction.version 2, group.version 1), Kafka's rules
  for upgrades, safe and unsafe downgrades and validate-only, errors as the
  Java client's exceptions;
* after a downgrade to transaction.version 0 a new Java producer falls back
  to transactions v1 (AddPartitionsToTxn, EndTxn v4);
* group.version 0 turns ConsumerGroupHeartbeat off (UNSUPPORTED_VERSION);
* the levels are kept in the log directory and outlive a restart.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.consumer_group_apis import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.errors import ErrorCode
from system_tests import javatool
from system_tests._proc import RawClient, TierdProc, start_tierd
from system_tests.admin.tool import ok, run_admin
from system_tests.test_transactions_v2 import (
    counters,
    grown,
    java_committed_values,
    new_topic,
    run_java_transactions,
)


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(request, tmp_path_factory.mktemp("features"), {}, name="tierd-features")


def java_admin(broker: TierdProc, *args: str) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", broker.bootstrap, *args])


def update(broker: TierdProc, *args: str) -> dict[str, str]:
    return java_admin(broker, "update-features", *args)["results"]


def heartbeat_code(broker: TierdProc) -> int:
    req = ConsumerGroupHeartbeatRequest[0](
        group_id="features-g", member_id="", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=["t"], server_assignor=None,
        topic_partitions=[])
    with RawClient(broker.host, broker.port) as client:
        return int(client.request(req, 0, ConsumerGroupHeartbeatResponse[0]).error_code)


def test_java_admin_changes_levels_and_the_producer_follows(tierd: TierdProc) -> None:
    admin = ["admin", "--bootstrap", tierd.bootstrap]
    describe = [*admin, "describe-features"]
    update_op = [*admin, "update-features"]
    refused = (["--feature", "transaction.version=1"], ["--feature", "transaction.version=3"],
               ["--feature", "no.such=1"],
               ["--feature", "group.version=2", "--upgrade-type", "safe"])
    # One JVM for the lot: each command's result in order.
    runs = javatool.run_batch([
        describe, *([*update_op, *args] for args in refused),
        [*update_op, "--feature", "group.version=1", "--feature", "transaction.version=2"],
        [*update_op, "--feature", "transaction.version=0", "--upgrade-type", "safe",
         "--validate-only"], describe,
        [*update_op, "--feature", "transaction.version=0", "--upgrade-type", "safe"], describe])
    assert all(r["exit"] == 0 for r in runs), runs
    results = [r["result"] for r in runs]
    assert results[0] == {"finalized": {"group.version": 1, "transaction.version": 2},
                          "supported": {"group.version": [0, 1], "transaction.version": [0, 2]},
                          "epoch": 0}
    # Refused, each as Kafka's controller refuses it; nothing changes.
    for args, result in zip(refused, results[1:5], strict=True):
        assert all(r.startswith("InvalidUpdateVersionException")
                   for r in result["results"].values()), (args, result)
    # The current levels again: accepted, nothing written; validate-only neither.
    assert results[5]["results"] == {"group.version": "NONE", "transaction.version": "NONE"}
    assert results[6]["results"] == {"transaction.version": "NONE"}
    assert results[7]["epoch"] == 0
    assert results[8]["results"] == {"transaction.version": "NONE"}
    assert (results[9]["finalized"], results[9]["epoch"]) == ({"group.version": 1}, 1)

    topic = new_topic(tierd)
    before = counters(tierd)
    result = run_java_transactions(tierd, topic)
    used = grown(before, counters(tierd))
    assert used["EndTxn"] == {4: 10}
    assert used["AddPartitionsToTxn"] and max(used["AddPartitionsToTxn"]) <= 3
    committed = result["committed"]
    assert sorted(java_committed_values(tierd, topic, len(committed))) == sorted(committed)

    assert update(tierd, "--feature", "transaction.version=2") == {"transaction.version": "NONE"}


def test_admin_tool_and_group_version(tierd: TierdProc) -> None:
    rows = {r["feature"]: r for r in ok(tierd.bootstrap, "--json", "features", "describe").json()}
    assert (rows["group.version"]["supported_max"], rows["group.version"]["finalized"]) == (1, 1)
    epoch = rows["group.version"]["epoch"]
    assert heartbeat_code(tierd) != ErrorCode.UNSUPPORTED_VERSION

    res = run_admin(tierd.bootstrap, "features", "upgrade", "--feature", "group.version=0")
    assert res.returncode == 1 and "INVALID_UPDATE_VERSION" in res.stderr, res.stderr
    assert run_admin(tierd.bootstrap, "features", "upgrade", "--feature", "x").returncode == 2
    dry = ok(tierd.bootstrap, "--json", "features", "downgrade", "--feature",
             "group.version=0", "--dry-run").json()
    assert dry == [{"feature": "group.version", "level": 0, "result": "valid"}]
    assert heartbeat_code(tierd) != ErrorCode.UNSUPPORTED_VERSION

    ok(tierd.bootstrap, "features", "downgrade", "--feature", "group.version=0")
    assert heartbeat_code(tierd) == ErrorCode.UNSUPPORTED_VERSION
    rows = {r["feature"]: r for r in ok(tierd.bootstrap, "--json", "features", "describe").json()}
    assert rows["group.version"]["finalized"] == 0
    assert rows["transaction.version"]["epoch"] == epoch + 1
    stored = json.loads((tierd.data_dir / "feature.json").read_text())
    assert "group.version" not in stored["features"]

    tierd.restart()
    assert heartbeat_code(tierd) == ErrorCode.UNSUPPORTED_VERSION
    ok(tierd.bootstrap, "features", "upgrade", "--feature", "group.version=1")
    assert heartbeat_code(tierd) != ErrorCode.UNSUPPORTED_VERSION
