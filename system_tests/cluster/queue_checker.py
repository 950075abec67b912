"""The pieces of a Jepsen-style queue check, shared by the plain and tiered runs.

``Sender`` produces unique values (idempotent, acks=all) and records how each
send ended: ok (with its offset), failed, or unknown (sent, never answered:
``sent`` counts every value handed to the client). ``Reader`` consumes the
partition continuously from its beginning. ``check_history`` compares both
with the partition's final log as read back by a consumer.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from system_tests.cluster.cluster import WAIT_S

# The pause between two sends by default: as fast as the client batches
# (about 700 values a second on a 2-core machine).
SEND_PAUSE_S = 0.001


def value_of(seq: int) -> bytes:
    """The payload of the ``seq``-th send: its sequence number, so order can be checked too."""
    return f"v{seq:07d}".encode()


class Sender(threading.Thread):
    """Produces ``value_of(0)``, ``value_of(1)``, ... to partition 0 until ``stop``.

    Args:
        pause_s: sleep between two sends; larger means fewer, smaller batches.
    """

    def __init__(self, bootstrap: list[str], topic: str, pause_s: float = SEND_PAUSE_S) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": ",".join(bootstrap), "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 2,
                                  "message.timeout.ms": 120_000,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.topic = topic
        self.pause_s = pause_s
        self.stop = threading.Event()
        self.ok: dict[bytes, int] = {}
        self.failed: set[bytes] = set()
        self.sent = 0

    def run(self) -> None:
        while not self.stop.is_set():
            value = value_of(self.sent)
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
            time.sleep(self.pause_s)
        self.producer.flush(WAIT_S * 2)


class Reader(threading.Thread):
    """Consumes partition 0 from its beginning until ``stop``; ``seen`` is (offset, value)."""

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


def check_history(log: list[tuple[int, bytes]], sender: Sender, reader: Reader) -> None:
    """The queue's guarantees, given the partition's whole log read from offset 0.

    Raises:
        AssertionError: the log has gaps, holds a value twice or one nobody
            sent, lost or moved an acknowledged value, or the reader saw
            something else than a prefix of the log.
    """
    offsets = [o for o, _ in log]
    assert offsets == list(range(len(log))), "the log has gaps"
    values = [v for _, v in log]
    assert len(set(values)) == len(values), "a value is in the log twice"
    at = {v: o for o, v in log}
    lost = [v for v, o in sender.ok.items() if at.get(v) != o]
    assert not lost, f"{len(lost)} acknowledged values lost or moved, e.g. {lost[:5]}"
    assert not (set(at) - set(sender.ok) - sender.failed
                - {value_of(i) for i in range(sender.sent)}), "a value nobody sent"
    assert reader.seen == log[:len(reader.seen)], "the consumer saw something else or skipped"
