"""A tierd cluster for system tests: brokers as real processes, ZooKeeper, and
what the tests ask of it (metadata through the wire protocol, waits with
deadlines, the segment files of every replica)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaConnectionError
from kafka.protocol.metadata import MetadataResponse

from protocol import records
from system_tests._proc import RawClient, metadata_request
from system_tests.harness import BrokerProcess, make_broker

T = TypeVar("T")

# Short ZooKeeper sessions so a killed broker is noticed quickly (the server's
# tick is 200 ms, so 3 s is well inside its limits).
SESSION_TIMEOUT_MS = 3000
# Every wait in these tests: long enough for a loaded 2-core machine.
WAIT_S = 60.0
# Admin calls that meet a broker which just went away are tried again this
# many times, this far apart.
ADMIN_ATTEMPTS = 10
ADMIN_RETRY_S = 0.3
METADATA_VERSION = 9


def wait_for(what: str, fn: Callable[[], T | None], timeout_s: float = WAIT_S,
             interval_s: float = 0.1) -> T:
    """Poll ``fn`` until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:  # a broker restarting refuses connections
            last_error = exc
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


class Cluster:
    def __init__(self, zk_connect: str, workdir: Path, registry: Any, size: int = 3) -> None:
        self.zk_connect = zk_connect
        self.brokers: dict[int, BrokerProcess] = {}
        for node in range(1, size + 1):
            broker = make_broker("tierd", workdir / f"broker-{node}", name=f"broker-{node}",
                                 config=self.broker_config(node))
            registry.add(broker)
            self.brokers[node] = broker

    def broker_config(self, node: int, **extra: str) -> dict[str, str]:
        return {"broker.id": str(node), "zookeeper.connect": self.zk_connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "tierd.metrics.port": "-1", "replica.lag.time.max.ms": "4000",
                "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "500",
                **extra}

    def start(self, config: Mapping[str, str] | None = None) -> None:
        for broker in self.brokers.values():
            broker.config.update(config or {})
            broker.start()
        wait_for("every broker registered", lambda: len(self.describe_cluster()["brokers"])
                 == len(self.brokers))

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()

    @property
    def live(self) -> list[int]:
        return [n for n, b in self.brokers.items() if b.is_running()]

    def bootstrap(self, nodes: list[int] | None = None) -> list[str]:
        return [self.brokers[n].bootstrap for n in (nodes or self.live)]

    def admin(self, node: int | None = None) -> KafkaAdminClient:
        target = self.bootstrap([node] if node is not None else None)
        return KafkaAdminClient(bootstrap_servers=target, request_timeout_ms=10_000)

    def _admin_call(self, node: int | None, call: Callable[[KafkaAdminClient], T]) -> T:
        """``call`` on a fresh admin client, again (a few times, with a short pause)
        when it hits a broker that just went away: metadata may still name it."""
        for attempt in range(ADMIN_ATTEMPTS):
            admin = self.admin(node)
            try:
                return call(admin)
            except KafkaConnectionError:
                if attempt == ADMIN_ATTEMPTS - 1:
                    raise
            finally:
                admin.close()
            time.sleep(ADMIN_RETRY_S)
        raise AssertionError("unreachable")

    def describe_cluster(self, node: int | None = None) -> dict[str, Any]:
        return self._admin_call(node, lambda admin: admin.describe_cluster())

    def partitions(self, topic: str, node: int | None = None) -> dict[int, dict[str, Any]]:
        """partition -> {leader, replicas, isr, offline} as one broker's Metadata
        says: ``node``'s (asked directly, on a connection of its own: an admin
        client would pick any broker it knows, perhaps one a test has stopped),
        else any live broker's."""
        if node is None:
            [described] = self._admin_call(node, lambda admin: admin.describe_topics([topic]))
            parts = [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"],
                      p["offline_replicas"]) for p in described["partitions"]]
        else:
            parts = self._metadata_of(node, topic)
        return {index: {"leader": leader, "replicas": replicas, "isr": sorted(isr),
                        "offline": sorted(offline)}
                for index, leader, replicas, isr, offline in parts}

    def _metadata_of(self, node: int, topic: str) -> list[tuple[int, int, list[int], list[int],
                                                                  list[int]]]:
        broker = self.brokers[node]
        for attempt in range(ADMIN_ATTEMPTS):
            try:
                with RawClient(broker.host, broker.port) as client:
                    response = client.request(metadata_request([topic]), METADATA_VERSION,
                                              MetadataResponse[METADATA_VERSION])
                break
            except OSError:  # it is (re)starting: try again shortly
                if attempt == ADMIN_ATTEMPTS - 1:
                    raise
                time.sleep(ADMIN_RETRY_S)
        return [(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                 list(p.offline_replicas))
                for t in response.topics if t.name == topic for p in t.partitions]

    def create_topic(self, topic: str, partitions: int, rf: int = 3,
                     configs: Mapping[str, str] | None = None) -> None:
        from kafka.admin import NewTopic

        admin = self.admin()
        try:
            admin.create_topics([NewTopic(topic, partitions, rf,
                                          topic_configs=dict(configs or {}))])
        finally:
            admin.close()
        wait_for(f"{topic} led everywhere", lambda: all(
            len(parts := self.partitions(topic, n)) == partitions
            and all(p["leader"] > 0 for p in parts.values()) for n in self.live))

    def leader(self, topic: str, partition: int) -> int:
        return int(self.partitions(topic)[partition]["leader"])

    def segment_batches(self, node: int, topic: str, partition: int
                        ) -> list[tuple[int, int, int]]:
        """(base offset, last offset, CRC) of every batch in a replica's segment files."""
        directory = self.brokers[node].workdir / "data" / f"{topic}-{partition}"
        out = []
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            for header in records.iter_headers(data):
                out.append((header.base_offset, header.last_offset, header.crc))
        return out
