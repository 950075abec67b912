"""``tierd admin rebuild-metadata`` on three brokers after ``__remote_log_metadata``
is lost everywhere (both stores).

A topic with RF 3 is tiered and freed locally on every replica. Every broker
is stopped, loses the metadata topic's data and its metadata snapshots, and
is started again: the leader's first tiering run moves the log start up to
its local log (the tier looks empty). Then, with the brokers tiering every
200 ms all along and no restart:

* ``rebuild-metadata --execute --below-log-start`` republishes every tiered
  segment under the rebuild hold and returns once every replica has taken
  them up (exit 0), the hold removed;
* every record is read from offset 0, and every replica reports log start 0
  (the followers followed the leader's start back down);
* the leader is SIGKILLed: the new leader serves every record from offset 0
  too, tiers new records, and none of the republished segments' objects is
  deleted by its tiering runs.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, TopicPartition

from system_tests.admin.tool import run_admin
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import (
    produce,
    read_from,
    start_with_tiered_topic,
)
from system_tests.tiered_helpers import (
    RemoteTier,
    lose_remote_metadata,
    store_args,
)

RECORDS = 20
MORE = 5
EXIT_OK = 0


def earliest(cluster: Cluster, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def replica_rows(cluster: Cluster, topic: str) -> list[dict[str, Any]]:
    """Every answering replica's row (a killed broker, still registered until its
    ZooKeeper session expires, makes the command exit 1 and is left out)."""
    res = run_admin(",".join(cluster.bootstrap()), "--json", "tiering",
                    "status", topic, "--replicas")
    assert res.returncode in (0, 1), res.stderr
    return list(res.json())


def test_rebuilt_metadata_serves_the_log_from_every_replica(cluster: Cluster, topic: str,
                                                             tier: RemoteTier) -> None:
    values = start_with_tiered_topic(cluster, tier, topic, RECORDS)
    logs = set(tier.log_objects(topic, 0))

    for broker in cluster.brokers.values():
        assert broker.stop() == 0
    for broker in cluster.brokers.values():
        lose_remote_metadata(broker.data_dir)
    cluster.start()
    wait_for("the log start moved up by the leader that lost the metadata",
             lambda: earliest(cluster, topic) > 0)

    res = run_admin(",".join(cluster.bootstrap()), "--json", "rebuild-metadata",
                    *store_args(tier), "--execute", "--below-log-start")
    assert res.returncode == EXIT_OK, (res.stdout, res.stderr)
    done = res.json()
    assert done["published"] == len(logs) and done["known_segments"] == 0, done

    assert read_from(cluster.bootstrap()[0], topic, RECORDS) == list(enumerate(values))
    rows = replica_rows(cluster, topic)
    assert len(rows) == 3
    assert {(r["log_start_offset"], r["metadata_rebuilding"]) for r in rows} == {(0, False)}, rows

    leader = cluster.leader(topic, 0)
    cluster.brokers[leader].kill()
    wait_for("a new leader", lambda: cluster.leader(topic, 0) not in (-1, leader))
    more = [f"w{i}".encode() for i in range(MORE)]
    assert produce(cluster, topic, more) == list(range(RECORDS, RECORDS + MORE))
    wait_for("the new leader tiering the new records", lambda: any(
        r["role"] == "leader" and r["highest_tiered_offset"] >= RECORDS + MORE - 2
        for r in replica_rows(cluster, topic)))
    assert read_from(cluster.bootstrap()[0], topic, RECORDS + MORE) \
        == list(enumerate(values + more))
    assert earliest(cluster, topic) == 0
    assert logs <= set(tier.log_objects(topic, 0))
