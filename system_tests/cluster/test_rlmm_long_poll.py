"""The remote log metadata manager long-polls ``__remote_log_metadata`` (issue 26):
three brokers on a real ZooKeeper, one shared directory tier.

The cluster runs with the manager's fetch.max.wait.ms at 30 s, so that the
two ways the old fixed 100 ms poll would show are both visible: an idle
broker receives only a few Fetch requests a second (the replica fetchers'
own long-polls; a 100 ms poll of each metadata partition led elsewhere was
tens a second), and a new tiered segment still reaches a follower's manager
at once, not when a parked poll's 30 s run out.

And the keys of Kafka's manager that tierd does not apply stop the broker at
start-up, naming the key.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol.tierd_apis import DescribeTieringRequest, DescribeTieringResponse
from system_tests._proc import RawClient
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import produce, tiered_config
from system_tests.conftest import REGISTRY_KEY
from system_tests.harness import BrokerError, free_port, make_broker
from system_tests.tiered_helpers import ONE_BATCH_PER_SEGMENT, TIERED_BROKER_OVERRIDES, FsTier
from system_tests.zkserver import ZooKeeperServer

TOPIC = "long-poll"
PARTITIONS = 3
# The manager's long-poll wait in this cluster: far beyond any wait below.
POLL_WAIT_MS = 30_000
# The idle count: how many Fetch requests every broker must receive, and the
# highest rate allowed meanwhile. Each broker's replica fetchers long-poll
# the two others (replica.fetch.wait.max.ms 500: 2 a second each) and the
# managers' polls wait 30 s; a 100 ms poll per metadata partition led
# elsewhere would alone add 10 a second per partition and broker. (A loaded
# machine only makes the count take longer.)
IDLE_FETCHES = 30
MAX_IDLE_FETCHES_PER_S = 8.0
# A follower's manager must see a new segment long before a parked poll ends.
SEE_WITHIN_S = POLL_WAIT_MS / 1000 / 2


@pytest.fixture(scope="module")
def metrics_ports() -> dict[int, int]:
    return {n: free_port() for n in (1, 2, 3)}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory,
            metrics_ports: dict[int, int]) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("rlmm-long-poll")
    chroot = zookeeper.make_chroot(f"/tierd-{uuid.uuid4().hex[:8]}")
    c = Cluster(chroot, workdir, request.config.stash[REGISTRY_KEY])
    for n, broker in c.brokers.items():
        broker.config["tierd.metrics.port"] = str(metrics_ports[n])
    try:
        c.start({**tiered_config(FsTier(workdir / "remote")),
                 "rlmm.config.remote.log.metadata.consumer.fetch.max.wait.ms": str(POLL_WAIT_MS)})
        c.create_topic(TOPIC, PARTITIONS, 3, {"remote.storage.enable": "true",
                                              "segment.bytes": ONE_BATCH_PER_SEGMENT})
        yield c
    finally:
        c.close()


def fetch_requests(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "tierd_requests_total" and sample.labels.get("api") == "Fetch")


def highest_tiered(cluster: Cluster, node: int, partition: int) -> int:
    broker = cluster.brokers[node]
    req = DescribeTieringRequest[1]
    with RawClient(broker.host, broker.port) as client:
        response = client.request(req(topics=[req.TopicRequest(
            name=TOPIC, partition_indexes=[partition])]), 1, DescribeTieringResponse[1])
    return max([p.highest_tiered_offset for t in response.topics for p in t.partitions
                if p.partition_index == partition], default=-1)


def test_a_new_tiered_segment_reaches_followers_before_a_parked_poll_ends(
        cluster: Cluster) -> None:
    leader = cluster.leader(TOPIC, 0)
    followers = [n for n in cluster.brokers if n != leader]
    produce(cluster, TOPIC, [b"first", b"second"])  # the first segment closes
    wait_for("the leader tiers the first segment",
             lambda: highest_tiered(cluster, leader, 0) >= 0)
    wait_for("the followers' managers see it", lambda: all(
        highest_tiered(cluster, n, 0) >= 0 for n in followers), timeout_s=SEE_WITHIN_S)
    # Again, now that every poll is parked on a caught-up manager.
    produce(cluster, TOPIC, [b"third"])
    wait_for("the leader tiers the second segment",
             lambda: highest_tiered(cluster, leader, 0) >= 1)
    wait_for("the followers' managers see it", lambda: all(
        highest_tiered(cluster, n, 0) >= 1 for n in followers), timeout_s=SEE_WITHIN_S)


def test_an_idle_broker_gets_few_fetch_requests(cluster: Cluster,
                                                metrics_ports: dict[int, int]) -> None:
    wait_for("every replica in sync", lambda: all(
        len(p["isr"]) == 3 for topic in (TOPIC, "__remote_log_metadata")
        for p in cluster.partitions(topic).values()))
    before = {n: fetch_requests(port) for n, port in metrics_ports.items()}
    started = time.monotonic()
    counted = wait_for(f"{IDLE_FETCHES} Fetch requests on every broker", lambda: (
        delta if min((delta := {n: fetch_requests(port) - before[n]
                                for n, port in metrics_ports.items()}).values()) >= IDLE_FETCHES
        else None))
    span = time.monotonic() - started
    rates = {n: count / span for n, count in counted.items()}
    assert all(rate <= MAX_IDLE_FETCHES_PER_S for rate in rates.values()), rates


def test_a_key_of_kafkas_manager_that_tierd_ignores_stops_the_start(tmp_path: Path,
                                                                    request) -> None:
    key = "rlmm.config.remote.log.metadata.common.client.security.protocol"
    broker = make_broker("tierd", tmp_path / "b", name="refused-rlmm-key", config={
        **TIERED_BROKER_OVERRIDES, **FsTier(tmp_path / "remote").broker_overrides(),
        "tierd.metrics.port": "-1", key: "SSL"})
    request.config.stash[REGISTRY_KEY].add(broker)
    try:
        with pytest.raises(BrokerError, match="exited") as failed:
            broker.start()
        assert key in str(failed.value)
    finally:
        broker.close()
