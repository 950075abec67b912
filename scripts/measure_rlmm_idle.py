"""Measure what the remote log metadata manager costs at idle, and how fast a
follower's manager learns of a tiered segment (issue 26).

Starts a real 3-broker cluster (real ZooKeeper, the system tests' launcher),
twice: with tiering on (a tiered topic, 6 partitions, replication factor 3)
and with tiering off (the same topic untiered). In each, after a settling
pause, it counts the Fetch requests every broker receives while the cluster
is idle (``tierd_requests_total{api="Fetch"}`` on the metrics endpoint). With
tiering off the count is the replica fetchers' alone; the difference is the
metadata manager's Fetch requests.

Then, with tiering on, it produces one batch per segment to partition 0 and
asks the leader and one follower for DescribeTiering in tight loops: the
latency is from the leader's count of finished remote segments growing (its
metadata manager wrote and folded COPY_SEGMENT_FINISHED) to the follower's
growing (its metadata manager folded the record). Both counts are read from
the managers when the request is answered.

Run from the repository root::

    .venv/bin/python scripts/measure_rlmm_idle.py [--idle-s 20] [--segments 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kafka import KafkaProducer  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from protocol.tierd_apis import DescribeTieringRequest, DescribeTieringResponse  # noqa: E402
from system_tests._proc import RawClient  # noqa: E402
from system_tests.cluster.cluster import Cluster, wait_for  # noqa: E402
from system_tests.harness import free_port  # noqa: E402
from system_tests.tiered_helpers import TIERED_BROKER_OVERRIDES, FsTier  # noqa: E402
from system_tests.zkserver import ZooKeeperServer  # noqa: E402

TOPIC = "idle"
PARTITIONS = 6
# Let start-up traffic (topic creation, first catch-ups, leader moves) settle.
SETTLE_S = 8.0


class _Registry:
    def __init__(self) -> None:
        self.brokers: list[Any] = []

    def add(self, broker: Any) -> None:
        self.brokers.append(broker)


def fetch_requests(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    total = 0.0
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "tierd_requests_total" and sample.labels.get("api") == "Fetch":
                total += sample.value
    return total


def idle_rates(cluster: Cluster, ports: dict[int, int], idle_s: float) -> dict[int, float]:
    time.sleep(SETTLE_S)
    before = {n: fetch_requests(p) for n, p in ports.items()}
    time.sleep(idle_s)
    return {n: (fetch_requests(p) - before[n]) / idle_s for n, p in ports.items()}


def start(workdir: Path, zk: ZooKeeperServer, tiered: bool) -> tuple[Cluster, dict[int, int]]:
    chroot = zk.make_chroot(f"/measure-{'on' if tiered else 'off'}-{time.time_ns()}")
    cluster = Cluster(chroot, workdir, _Registry())
    ports = {n: free_port() for n in cluster.brokers}
    for n, broker in cluster.brokers.items():
        broker.config["tierd.metrics.port"] = str(ports[n])
    tier = FsTier(workdir / "remote")
    config = ({**TIERED_BROKER_OVERRIDES, **tier.broker_overrides(),
               "rlmm.config.remote.log.metadata.topic.replication.factor": "3"}
              if tiered else {})
    cluster.start(config)
    topic_config = ({"remote.storage.enable": "true", "segment.bytes": "14",
                     "local.retention.bytes": "-2"} if tiered else {})
    cluster.create_topic(TOPIC, PARTITIONS, 3, topic_config)
    return cluster, ports


def finished_segments(client: RawClient) -> int:
    body = DescribeTieringRequest[1](topics=[DescribeTieringRequest[1].TopicRequest(
        name=TOPIC, partition_indexes=[0])])
    response = client.request(body, 1, DescribeTieringResponse[1])
    for topic in response.topics:
        for p in topic.partitions:
            if p.partition_index == 0:
                return int(p.remote_segments)
    return -1


def watch(host: str, port: int, seen: dict[int, float], stop: threading.Event) -> None:
    """Record when each count of finished segments is first seen on this broker."""
    with RawClient(host, port) as client:
        while not stop.is_set():
            count = finished_segments(client)
            now = time.monotonic()
            for n in range(max(seen, default=0) + 1, count + 1):
                seen.setdefault(n, now)


def latencies(cluster: Cluster, segments: int) -> list[float]:
    leader = cluster.leader(TOPIC, 0)
    follower = next(n for n in cluster.brokers if n != leader)
    seen: dict[int, dict[int, float]] = {leader: {}, follower: {}}
    stop = threading.Event()
    threads = [threading.Thread(target=watch, args=(cluster.brokers[n].host,
                                                    cluster.brokers[n].port, seen[n], stop))
               for n in (leader, follower)]
    for t in threads:
        t.start()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", linger_ms=0)
    try:
        for i in range(segments + 1):  # the last segment stays active, untiered
            producer.send(TOPIC, f"v{i}".encode(), partition=0).get(timeout=30)
            time.sleep(0.3)  # one copy at a time: each latency is its own
        wait_for("the follower sees every tiered segment",
                 lambda: len(seen[follower]) >= segments, timeout_s=60)
    finally:
        producer.close()
        stop.set()
        for t in threads:
            t.join()
    return [seen[follower][o] - seen[leader][o] for o in sorted(seen[follower])
            if o in seen[leader]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--segments", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlmm-measure-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk")
        zk.start()
        try:
            rates = {}
            for tiered in (False, True):
                cluster, ports = start(Path(tmp) / ("on" if tiered else "off"), zk, tiered)
                try:
                    rates[tiered] = idle_rates(cluster, ports, args.idle_s)
                    if tiered:
                        lat = latencies(cluster, args.segments)
                finally:
                    cluster.close()
        finally:
            zk.stop()
    for n in sorted(rates[True]):
        print(f"broker {n}: Fetch/s tiering off {rates[False][n]:.2f}, on {rates[True][n]:.2f}, "
              f"metadata manager's {rates[True][n] - rates[False][n]:.2f}")
    ms = sorted(x * 1000 for x in lat)
    print(f"follower sees COPY_SEGMENT_FINISHED after (ms, {len(ms)} segments): "
          f"median {statistics.median(ms):.1f}, p90 {ms[int(len(ms) * 0.9) - 1]:.1f}, "
          f"max {ms[-1]:.1f}")


if __name__ == "__main__":
    main()
