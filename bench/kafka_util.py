"""confluent-kafka helpers shared by scenarios: client configs, topic setup, metadata."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

CLIENT_ID = "tierd-bench"
METADATA_TIMEOUT = 10.0


class DeliveryTracker:
    """Delivery-report callback: collects per-message latency and counts errors."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error: str | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            self.first_error = self.first_error or str(err)
            return
        latency = msg.latency()
        if latency is not None:
            self.latencies.append(latency)


class TopicSetupError(RuntimeError):
    """Neither CreateTopics nor auto-creation produced a usable topic."""


def base_config(bootstrap: str) -> dict[str, Any]:
    """Return settings common to every client (IPv4 loopback, quiet logging)."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "broker.address.family": "v4",
        "log_level": 3,
    }


def producer_config(
    bootstrap: str, acks: str, codec: str, linger_ms: int = 5, **extra: Any
) -> dict[str, Any]:
    """Return a non-idempotent producer config with the given acks/compression/linger."""
    return {
        **base_config(bootstrap),
        "acks": acks,
        "compression.type": codec,
        "linger.ms": linger_ms,
        "enable.idempotence": False,
        **extra,
    }


def consumer_config(bootstrap: str, group_id: str, **extra: Any) -> dict[str, Any]:
    """Return an assign()-only consumer config: no commits, no offset store, earliest reset."""
    return {
        **base_config(bootstrap),
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **extra,
    }


def topic_partitions(client: Producer | Consumer | AdminClient, topic: str) -> list[int]:
    """Return the partition ids of ``topic`` that currently have a leader ([] if unknown)."""
    meta = client.list_topics(topic=topic, timeout=METADATA_TIMEOUT)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return []
    return sorted(pid for pid, part in info.partitions.items() if part.leader >= 0)


def _create_with_admin(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Create ``topic`` via CreateTopics; 'already exists' counts as success."""
    admin = AdminClient(base_config(bootstrap))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        futures[topic].result(timeout=timeout + 5)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise


def _wait_for_partitions(
    client: Producer | AdminClient, topic: str, want: int, timeout: float
) -> list[int]:
    """Poll metadata until ``topic`` has ``want`` led partitions (or any, if want<=0)."""
    deadline = time.monotonic() + timeout
    parts: list[int] = []
    while time.monotonic() < deadline:
        try:
            parts = topic_partitions(client, topic)
        except KafkaException:
            parts = []
        if parts and (want <= 0 or len(parts) >= want):
            return parts
        time.sleep(0.2)
    return parts


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[str]:
    """Create ``topic`` and wait until all partitions have leaders; return notes.

    Uses the AdminClient first. If that fails, falls back to broker auto-creation by a
    metadata request for the topic (the partition count is then the broker default),
    and says so in the returned notes.
    """
    notes: list[str] = []
    admin_error: str | None = None
    try:
        _create_with_admin(bootstrap, topic, partitions, timeout)
    except Exception as exc:  # noqa: BLE001 - any failure triggers the documented fallback
        admin_error = f"{type(exc).__name__}: {exc}"
    if admin_error is None:
        admin = AdminClient(base_config(bootstrap))
        if _wait_for_partitions(admin, topic, partitions, timeout):
            return notes
        admin_error = "CreateTopics succeeded but partitions never got a leader"
    notes.append(f"CreateTopics failed ({admin_error}); fell back to auto-create via metadata")
    return notes + auto_create_topic(bootstrap, topic, partitions, timeout)


def auto_create_topic(bootstrap: str, topic: str, partitions: int, timeout: float) -> list[str]:
    """Create ``topic`` through broker auto-creation (a Metadata request naming it).

    Returns notes; raises :class:`TopicSetupError` if no led partition shows up in time.
    """
    producer = Producer({**base_config(bootstrap), "allow.auto.create.topics": True})
    parts = _wait_for_partitions(producer, topic, 0, timeout)
    producer.flush(1)
    if not parts:
        raise TopicSetupError(f"topic {topic!r} was not auto-created within {timeout:.0f}s")
    if len(parts) != partitions:
        return [f"auto-created topic has {len(parts)} partition(s), wanted {partitions}"]
    return []


def wait_metadata_ready(bootstrap: str, timeout: float) -> None:
    """Block until the broker answers a Metadata request listing at least one broker."""
    admin = AdminClient(base_config(bootstrap))
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            meta = admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            if meta.brokers:
                return
        except KafkaException as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"broker at {bootstrap} never answered Metadata: {last}")
