"""A three-node tierd cluster on ZooKeeper for the ``cluster`` scenario.

ZooKeeper is the system tests' launcher (Debian's jar via java, a 200 ms tick, a
fresh chroot per cluster); the nodes are :class:`BrokerProcess` es running the
round's tierd command plus :data:`CLUSTER_OVERRIDES`, ``broker.id`` 1-3 and the
chroot. A node can be signalled (crash or controlled shutdown) and restarted on
the same port and data. Every wait has a deadline; on exit the nodes are killed
(their data is thrown away, so no controlled shutdown is needed) and ZooKeeper
is stopped.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.brokers import BrokerProcess, tierd_spec
from bench.config import BenchConfig
from bench.kafka_util import base_config

T = TypeVar("T")

NODES = (1, 2, 3)
REPLICATION_FACTOR = len(NODES)
# acks=all then needs two live replicas: one node may be down, as in a failover.
MIN_INSYNC_REPLICAS = 2
# Short ZooKeeper sessions (the server's tick is 200 ms) so a crashed node is
# noticed within seconds instead of the default 18 s.
SESSION_TIMEOUT_MS = 3000
# Every wait (registration, ISR, topic leaders, a signalled node's exit) on a
# loaded 2-core machine.
WAIT_S = 60.0
POLL_INTERVAL_S = 0.05
METADATA_TIMEOUT_S = 5.0
# librdkafka's syslog level 2 (critical): quiet about refused connections to a
# node that is down on purpose.
QUIET_LOG_LEVEL = 2

# Broker settings of the nodes, added to the round's tierd command.
CLUSTER_OVERRIDES = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    # A replica not caught up for 4 s leaves the ISR (default 30 s).
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "500",
    # No preferred-leader election in the middle of a failover measurement.
    "auto.leader.rebalance.enable": "false",
    "offsets.topic.replication.factor": str(REPLICATION_FACTOR),
    "transaction.state.log.replication.factor": str(REPLICATION_FACTOR),
}


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll ``fn`` until it returns something truthy; TimeoutError after ``timeout`` s.

    A KafkaException from ``fn`` (a node restarting refuses connections) counts as
    not yet.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except KafkaException as exc:
            last_error = exc
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"{what} not reached after {timeout:.0f}s"
                       + (f" (last error: {last_error})" if last_error else ""))


@dataclass
class Cluster:
    """Three running nodes (by broker id) and an admin client bootstrapped on all."""

    nodes: dict[int, BrokerProcess]
    admin: AdminClient

    @property
    def bootstrap(self) -> str:
        """Return every node's address, comma-separated."""
        return ",".join(b.bootstrap for b in self.nodes.values())

    def cpu_seconds(self) -> float:
        """Return the CPU seconds used so far by the three brokers together."""
        return sum(b.cpu_seconds() for b in self.nodes.values())

    def partition(self, topic: str) -> tuple[int, list[int], int]:
        """Return (leader, sorted ISR, controller) of partition 0 as Metadata says
        (leader -1 while unknown)."""
        meta = self.admin.list_topics(topic=topic, timeout=METADATA_TIMEOUT_S)
        info = meta.topics.get(topic)
        if info is None or info.error is not None or 0 not in info.partitions:
            return -1, [], meta.controller_id
        part = info.partitions[0]
        return part.leader, sorted(part.isrs), meta.controller_id

    def in_sync(self, topic: str) -> bool:
        """Return True if partition 0 has a leader and every node in its ISR."""
        leader, isr, _ = self.partition(topic)
        return leader in self.nodes and isr == sorted(self.nodes)

    def restart(self, node: int, topic: str) -> float:
        """Restart ``node`` once it has exited (after a signal), wait until it is back
        in the ISR of ``topic``; return the seconds from the restart to that.

        Raises:
            TimeoutError: the node did not exit (it is then killed) or did not rejoin.
        """
        broker = self.nodes[node]
        if broker.wait_exit(WAIT_S) is None:
            broker.send_signal(signal.SIGKILL)
            broker.wait_exit(WAIT_S)
            raise TimeoutError(f"node {node} still running {WAIT_S:.0f}s after the signal; "
                               f"log tail:\n{broker.log_tail()}")
        started = time.monotonic()
        broker.start()
        wait_for(f"node {node} back in the ISR of {topic}", lambda: self.in_sync(topic))
        return time.monotonic() - started

    def create_topic(self, topic: str, partitions: int,
                     config: Mapping[str, str] | None = None) -> None:
        """Create ``topic`` with RF 3, min.insync.replicas 2 and ``config``; wait until
        every partition is led and fully in sync."""
        futures = self.admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=REPLICATION_FACTOR,
                      config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS),
                              **(config or {})})],
            operation_timeout=WAIT_S, request_timeout=WAIT_S)
        futures[topic].result(timeout=WAIT_S)

        def all_in_sync() -> bool:
            meta = self.admin.list_topics(topic=topic, timeout=METADATA_TIMEOUT_S)
            info = meta.topics.get(topic)
            return (info is not None and info.error is None
                    and len(info.partitions) == partitions
                    and all(p.leader in self.nodes and len(p.isrs) == REPLICATION_FACTOR
                            for p in info.partitions.values()))

        wait_for(f"{topic} led and fully in sync", all_in_sync)


@contextmanager
def running_cluster(config: BenchConfig, log_dir: Path,
                    overrides: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """Start ZooKeeper and three nodes (logs in ``log_dir``; ``overrides`` are extra
    broker settings of every node, e.g. tiering); stop all on exit."""
    from system_tests.zkserver import ZooKeeperServer  # the system tests' launcher

    zk = ZooKeeperServer(log_dir / "zookeeper")
    zk.start()
    try:
        chroot = zk.make_chroot(f"/bench-{uuid.uuid4().hex[:8]}")
        base = tierd_spec(config)
        with ExitStack() as stack:
            nodes: dict[int, BrokerProcess] = {}
            for node in NODES:
                spec = base.with_overrides(f"{base.label} (node {node})", {
                    **CLUSTER_OVERRIDES, **(overrides or {}), "broker.id": str(node),
                    "zookeeper.connect": chroot})
                nodes[node] = stack.enter_context(BrokerProcess(
                    spec, log_dir / f"broker-{node}.log", config.startup_timeout))
            try:
                bootstrap = ",".join(b.bootstrap for b in nodes.values())
                cluster = Cluster(nodes, AdminClient({**base_config(bootstrap),
                                                      "log_level": QUIET_LOG_LEVEL}))
                wait_for("all nodes registered", lambda: len(cluster.admin.list_topics(
                    timeout=METADATA_TIMEOUT_S).brokers) == len(NODES))
                yield cluster
            finally:
                for broker in nodes.values():
                    broker.send_signal(signal.SIGKILL)
    finally:
        zk.stop()
        shutil.rmtree(zk.workdir / "zk-data", ignore_errors=True)
