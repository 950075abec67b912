"""``tierd admin tiering status`` on three brokers sharing one remote tier:
the leader's view per partition, every follower's state, and a follower
whose rebuild from the remote tier keeps failing shown as such (failed
attempts, last error) until it is fixed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from system_tests.admin.tool import ok
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import local_bases, produce, tiered_config
from system_tests.tiered_helpers import ONE_BATCH_PER_SEGMENT, FsTier

RECORDS = 30
REBUILDING = ("BuildingRemoteLogAuxState", "Delayed")


def replicas(cluster: Cluster, topic: str) -> dict[int, dict[str, Any]]:
    rows = ok(",".join(cluster.bootstrap()), "--json", "tiering", "status", topic,
              "--replicas").json()
    return {row["broker"]: row for row in rows}


def test_status_shows_followers_and_a_failing_rebuild(cluster: Cluster, topic: str,
                                                      tmp_path: Path) -> None:
    tier = FsTier(tmp_path / "remote")
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    produce(cluster, topic, [f"v{i}".encode() for i in range(RECORDS)])
    wait_for("local disks freed on every replica", lambda: all(
        (bases := local_bases(cluster, n, topic)) and bases[0] >= RECORDS - 3
        for n in (1, 2, 3)))
    leader = cluster.leader(topic, 0)

    # Every replica agrees on the end, and followers know where the tier ends.
    def settled() -> dict[int, dict[str, Any]] | None:
        rows = replicas(cluster, topic)
        tiered = rows.get(leader, {}).get("highest_tiered_offset", -1)
        good = len(rows) == 3 and tiered >= RECORDS - 3 and all(
            r["log_end_offset"] == RECORDS and r["highest_tiered_offset"] == tiered
            for r in rows.values())
        return rows if good else None

    rows = wait_for("every replica at the end and the tier boundary", settled)
    assert rows[leader]["role"] == "leader" and rows[leader]["state"] == "Leading"
    assert {rows[n]["state"] for n in rows if n != leader} == {"Fetching"}
    [row] = ok(cluster.bootstrap()[0], "--json", "tiering", "status", topic).json()
    assert row["leader"] == leader and row["log_start_offset"] == 0
    assert row["remote_segments"] == len(tier.log_objects(topic, 0))
    assert sorted(row["followers"]) == sorted(f"{n}:Fetching" for n in (1, 2, 3)
                                              if n != leader)

    # A wiped follower restarted on the wrong remote directory cannot rebuild:
    # the status says so, with its failed attempts and the store's error.
    victim = next(n for n in (1, 2, 3) if n != leader)
    broker = cluster.brokers[victim]
    broker.kill()
    wait_for("the victim out of the ISR",
             lambda: victim not in cluster.partitions(topic)[0]["isr"])
    shutil.rmtree(broker.workdir / "data")
    broker.config["rsm.config.dir"] = str(tmp_path / "wrong-remote")
    broker.start()

    def failing() -> dict[str, Any] | None:
        mine = replicas(cluster, topic).get(victim)
        return mine if mine and mine["state"] in REBUILDING \
            and mine["aux_state_failures"] >= 1 and mine["aux_state_error"] else None

    stuck = wait_for("the failing rebuild visible", failing)
    assert stuck["role"] == "follower" and stuck["log_end_offset"] < RECORDS
    table = ok(cluster.bootstrap()[0], "tiering", "status", topic).stdout
    assert f"{victim}:" in table and "failed" in table

    # Fixed: it rebuilds, rejoins, and the failures are cleared.
    broker.kill()
    broker.config["rsm.config.dir"] = tier.broker_overrides()["rsm.config.dir"]
    broker.start()
    wait_for("the victim back in the ISR",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    healed = wait_for("the victim fetching", lambda: (
        r := replicas(cluster, topic).get(victim)) and r["state"] == "Fetching" and r)
    assert healed["aux_state_failures"] == 0 and healed["aux_state_error"] is None
    assert healed["local_log_start_offset"] > 0 and healed["log_end_offset"] == RECORDS
