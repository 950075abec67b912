"""How long a 10-member group takes to settle when an 11th member joins:
classic protocol (librdkafka's default eager range assignor, and
cooperative-sticky) against the KIP-848 consumer protocol.

Usage (from the repository root)::

    .venv/bin/python scripts/rebalance_time.py [--rounds N] [--heartbeat-ms MS]

Starts one tierd broker in a temporary directory, creates a 22-partition
topic, and for each protocol and round: starts 10 librdkafka consumers (one
thread each), waits until they own the partitions between them, starts an
11th, and times from its subscribe() to the moment every partition is owned
by exactly one of the 11 and each owns two (as the members' own rebalance
callbacks report). --heartbeat-ms sets both the classic clients'
heartbeat.interval.ms and the broker's group.consumer.heartbeat.interval.ms
(defaults: Kafka's, 3000 and 5000).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from system_tests.harness import free_port  # noqa: E402

PARTITIONS = 22
MEMBERS = 10
# Bound for one group to settle; far above what either protocol needs.
SETTLE_S = 120.0

PROTOCOLS: dict[str, dict[str, Any]] = {
    "classic-eager-range": {"group.protocol": "classic"},
    "classic-cooperative-sticky": {"group.protocol": "classic",
                                   "partition.assignment.strategy": "cooperative-sticky"},
    "consumer (KIP-848)": {"group.protocol": "consumer"},
}


class Member(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, group: str, conf: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, **conf})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)

    def _assigned(self, consumer: Any, parts: list[Any]) -> None:
        with self.lock:
            self.owned |= {p.partition for p in parts}

    def _revoked(self, consumer: Any, parts: list[Any]) -> None:
        with self.lock:
            self.owned -= {p.partition for p in parts}

    def snapshot(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()


def settled(members: list[Member]) -> bool:
    owned = [m.snapshot() for m in members]
    share = PARTITIONS // len(members)
    return all(len(o) in (share, share + 1) for o in owned) and \
        sum(len(o) for o in owned) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))


def wait(members: list[Member]) -> float:
    start = time.monotonic()
    while not settled(members):
        if time.monotonic() - start > SETTLE_S:
            raise SystemExit(f"group did not settle in {SETTLE_S}s")
        time.sleep(0.01)
    return time.monotonic() - start


def one_round(bootstrap: str, topic: str, conf: dict[str, Any]) -> float:
    group = f"rebalance-{uuid.uuid4().hex[:8]}"
    members = [Member(bootstrap, topic, group, conf) for _ in range(MEMBERS)]
    for m in members:
        m.start()
    try:
        wait(members)
        time.sleep(1.0)  # let the last heartbeats of the settled group pass
        started = time.monotonic()
        newcomer = Member(bootstrap, topic, group, conf)
        newcomer.start()
        members.append(newcomer)
        wait(members)
        return time.monotonic() - started
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, default=None)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="rebalance-") as tmp:
        overrides = [f"listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={tmp}/data",
                     "offsets.topic.num.partitions=1", "tierd.metrics.port=0"]
        if args.heartbeat_ms is not None:
            overrides.append(f"group.consumer.heartbeat.interval.ms={args.heartbeat_ms}")
        cmd = [sys.executable, "-m", "broker"]
        for o in overrides:
            cmd += ["--override", o]
        log = open(Path(tmp) / "broker.log", "wb")
        broker = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            bootstrap = f"127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            topic = "rebalance-time"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            admin.close()
            for name, conf in PROTOCOLS.items():
                if args.heartbeat_ms is not None and conf["group.protocol"] == "classic":
                    conf = {**conf, "heartbeat.interval.ms": args.heartbeat_ms}
                times = [one_round(bootstrap, topic, conf) for _ in range(args.rounds)]
                print(f"{name:28s} 11th member settled in: median {statistics.median(times):.2f}s"
                      f"  (rounds: {', '.join(f'{t:.2f}' for t in times)})", flush=True)
        finally:
            broker.terminate()
            broker.wait(timeout=30)
            log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
