"""Topic administration for tests, through confluent-kafka's AdminClient.

librdkafka is used here rather than kafka-python on purpose: tierd's own
protocol layer is built on kafka-python's codecs, so an independent
implementation checks it better.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Bound for CreateTopics and for the metadata to show every partition led.
ADMIN_TIMEOUT_S = 30.0

# Gap between metadata / offset polls.
POLL_INTERVAL_S = 0.1


def admin_client(bootstrap: str) -> AdminClient:
    """An AdminClient for `bootstrap`."""
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
    *,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> None:
    """Create a topic (replication factor 1) and wait until every partition has a leader.

    Raises:
        confluent_kafka.KafkaException: the broker rejected the request.
        TimeoutError: partitions still leaderless after `timeout_s`.
    """
    admin = admin_client(bootstrap)
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(configs or {}))
    futures = admin.create_topics([topic], operation_timeout=timeout_s, request_timeout=timeout_s)
    futures[name].result(timeout=timeout_s)
    wait_for_leaders(admin, name, partitions, timeout_s)


def wait_for_leaders(admin: AdminClient, name: str, partitions: int, timeout_s: float) -> None:
    """Poll metadata until `name` has `partitions` partitions, each with a leader."""
    deadline = time.monotonic() + timeout_s
    last = "no metadata yet"
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        if topic is not None and topic.error is None:
            led = [p for p in topic.partitions.values() if p.leader >= 0 and p.error is None]
            if len(topic.partitions) == partitions and len(led) == partitions:
                return
            last = f"{len(led)}/{len(topic.partitions)} partitions led"
        elif topic is not None:
            last = str(topic.error)
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"topic {name}: {last} after {timeout_s}s (want {partitions})")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """High watermarks of partitions 0..partitions-1 (via ListOffsets latest)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "system-tests-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=ADMIN_TIMEOUT_S)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def wait_for_end_offsets(
    bootstrap: str, topic: str, want: Mapping[int, int], *, timeout_s: float = ADMIN_TIMEOUT_S
) -> None:
    """Poll until each partition's high watermark is at least `want[p]`.

    Used after acks=0 produces, which return before the broker has appended.

    Raises:
        TimeoutError: some watermark stayed short.
    """
    deadline = time.monotonic() + timeout_s
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        seen = end_offsets(bootstrap, topic, max(want) + 1)
        if all(seen[p] >= n for p, n in want.items()):
            return
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"topic {topic}: end offsets {seen}, want at least {dict(want)}")
