"""A Jepsen-style queue check: acks=all idempotent produce through repeated leader SIGKILLs.

Every value is unique; each send ends ok (with its offset), failed, or unknown
(the client gave up without knowing). While leaders are killed and restarted,
a consumer reads the partition continuously. Afterwards:
- every acknowledged value is in the log, at the offset it was acknowledged at;
- no value is in the log twice (idempotence across leader changes);
- the consumer never skipped: what it saw is a gap-free prefix of the final log;
- every replica's segment files hold the same batches (base, last offset, CRC).
"""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.test_cluster import consume_all, replicas_identical

KILLS = 20
# Each value's payload: its sequence number, so order can be checked too.
SEED = 405


class Sender(threading.Thread):
    def __init__(self, bootstrap: list[str], topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": ",".join(bootstrap), "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 2,
                                  "message.timeout.ms": 120_000,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.topic = topic
        self.stop = threading.Event()
        self.ok: dict[bytes, int] = {}
        self.failed: set[bytes] = set()
        self.sent = 0

    def run(self) -> None:
        while not self.stop.is_set():
            value = f"v{self.sent:07d}".encode()
            self.sent += 1

            def done(err, msg, value=value):  # type: ignore[no-untyped-def]
                if err is None:
                    self.ok[value] = msg.offset()
                else:
                    self.failed.add(value)

            try:
                self.producer.produce(self.topic, value, partition=0, on_delivery=done)
            except BufferError:
                self.sent -= 1
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
            time.sleep(0.001)
        self.producer.flush(WAIT_S * 2)


class Reader(threading.Thread):
    def __init__(self, bootstrap: list[str], topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      request_timeout_ms=10_000, retry_backoff_ms=100)
        self.consumer.assign([TopicPartition(topic, 0)])
        self.consumer.seek_to_beginning()
        self.stop = threading.Event()
        self.seen: list[tuple[int, bytes]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for records in self.consumer.poll(timeout_ms=500).values():
                    self.seen += [(r.offset, r.value) for r in records]
            except Exception:  # a broker going away mid-poll: the client recovers
                time.sleep(0.1)
        self.consumer.close()


def test_no_acknowledged_value_lost_through_leader_kills(cluster: Cluster, topic: str):
    rng = random.Random(SEED)
    cluster.start({"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "3000"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    sender = Sender(cluster.bootstrap(), topic)
    reader = Reader(cluster.bootstrap(), topic)
    sender.start()
    reader.start()
    try:
        for kill in range(KILLS):
            wait_for("every replica in sync",
                     lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
            before = len(sender.ok)
            wait_for("progress before the kill", lambda b=before: len(sender.ok) > b + 20)
            leader = cluster.leader(topic, 0)
            victim = leader if rng.random() < 0.8 else rng.choice([1, 2, 3])
            cluster.brokers[victim].kill()
            survivors = [n for n in (1, 2, 3) if n != victim]
            wait_for(f"kill {kill}: a live leader",
                     lambda s=survivors: cluster.partitions(topic, s[0])[0]["leader"] in s)
            acked = len(sender.ok)
            wait_for(f"kill {kill}: produce goes on", lambda a=acked: len(sender.ok) > a + 20)
            cluster.brokers[victim].start()
    finally:
        sender.stop.set()
        sender.join(WAIT_S * 3)
    wait_for("every replica in sync at the end",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    log = consume_all(cluster, topic, 0)
    reader.stop.set()
    reader.join(WAIT_S)

    offsets = [o for o, _ in log]
    assert offsets == list(range(len(log))), "the log has gaps"
    values = [v for _, v in log]
    assert len(set(values)) == len(values), "a value is in the log twice"
    at = {v: o for o, v in log}
    lost = [v for v, o in sender.ok.items() if at.get(v) != o]
    assert not lost, f"{len(lost)} acknowledged values lost or moved, e.g. {lost[:5]}"
    assert not (set(at) - set(sender.ok) - sender.failed
                - {f"v{i:07d}".encode() for i in range(sender.sent)}), "a value nobody sent"
    assert reader.seen == log[:len(reader.seen)], "the consumer saw something else or skipped"
    assert len(sender.ok) > KILLS * 20
    batches = wait_for("identical replicas", lambda: replicas_identical(cluster, topic, 0,
                                                                         [1, 2, 3]))
    assert batches[-1][1] == len(log) - 1
    print(f"jepsen queue: {KILLS} kills, {sender.sent} sent, {len(sender.ok)} ok, "
          f"{len(sender.failed)} failed, log {len(log)}, reader saw {len(reader.seen)}")
