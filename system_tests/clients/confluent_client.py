"""Driver for confluent-kafka (the wheel's bundled librdkafka)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from system_tests.clients.base import (
    CONSUME_TIMEOUT_S,
    LINGER_MS,
    PRODUCE_TIMEOUT_S,
    ClientSecurity,
    ConsumeTimeout,
    ProduceFailed,
    acked_offset,
    check_acks,
    check_codec,
    librdkafka_options,
)
from system_tests.messages import Delivery, MessageProfile, OutMessage, Record

# librdkafka insists on a group.id even for assign()-only consumers; nothing
# is committed under it (enable.auto.commit is off and we never commit).
UNUSED_GROUP_ID = "system-tests-assign-only"

# consume() batch size and wait.
CONSUME_BATCH = 500
POLL_TIMEOUT_S = 0.2

# Metadata/watermark query bound.
QUERY_TIMEOUT_S = 15.0


class ConfluentDriver:
    """confluent-kafka; supports everything in `MessageProfile`."""

    name = "confluent"
    profile = MessageProfile()
    reports_offsets = True

    def produce(
        self,
        bootstrap: str,
        topic: str,
        messages: Sequence[OutMessage],
        *,
        compression: str = "none",
        acks: str = "all",
        security: ClientSecurity | None = None,
    ) -> list[Delivery]:
        """produce() every message, flush(), and map delivery reports back in order."""
        check_codec(compression)
        check_acks(acks)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "compression.type": compression,
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": LINGER_MS,
                "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
                **librdkafka_options(security),
            }
        )
        reports: dict[int, Message] = {}
        for index, m in enumerate(messages):
            producer.produce(
                topic,
                value=m.value,
                key=m.key,
                partition=m.partition,
                headers=list(m.headers),
                timestamp=m.timestamp_ms or 0,
                on_delivery=_recorder(reports, index),
            )
            producer.poll(0)
        remaining = producer.flush(PRODUCE_TIMEOUT_S)
        if remaining:
            raise ProduceFailed(f"confluent: {remaining} messages still undelivered after flush")
        return [_delivery(index, reports.get(index), acks) for index in range(len(messages))]

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """assign() at the start offsets and consume() up to the high watermarks."""
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": UNUSED_GROUP_ID,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                **librdkafka_options(security),
            }
        )
        try:
            partitions = [TopicPartition(topic, p, offset) for p, offset in starts.items()]
            ends = {
                tp.partition: consumer.get_watermark_offsets(tp, timeout=QUERY_TIMEOUT_S)[1]
                for tp in partitions
            }
            consumer.assign(partitions)
            return _consume_until(consumer, topic, dict(starts), ends, timeout_s)
        finally:
            consumer.close()


def _recorder(reports: dict[int, Message], index: int):  # type: ignore[no-untyped-def]
    """A delivery callback that files the report under the message's index."""

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        reports[index] = message

    return on_delivery


def _delivery(index: int, message: Message | None, acks: str) -> Delivery:
    if message is None:
        raise ProduceFailed(f"confluent: message {index} got no delivery report")
    if message.error() is not None:
        raise ProduceFailed(f"confluent: message {index} failed: {message.error()}")
    offset = message.offset()  # None when librdkafka has no offset (acks=0)
    if offset is None and acks != "0":
        raise ProduceFailed(f"confluent: message {index} acknowledged without an offset")
    partition = _known(message.partition())
    return Delivery(partition, None if offset is None else acked_offset(offset, acks))


def _consume_until(
    consumer: Consumer,
    topic: str,
    starts: dict[int, int],
    ends: Mapping[int, int],
    timeout_s: float,
) -> list[Record]:
    """consume() until each partition's next offset reaches its end offset."""
    records: list[Record] = []
    positions = dict(starts)
    deadline = time.monotonic() + timeout_s
    while any(positions[p] < end for p, end in ends.items()):
        if time.monotonic() > deadline:
            raise ConsumeTimeout(f"confluent: end offsets {dict(ends)} not reached", records)
        for message in consumer.consume(CONSUME_BATCH, timeout=POLL_TIMEOUT_S):
            if message.error() is not None:
                raise AssertionError(f"confluent: consume error {message.error()}")
            records.append(_record(message))
        for tp in consumer.position([TopicPartition(topic, p) for p in positions]):
            if tp.offset >= 0:
                positions[tp.partition] = tp.offset
    return records


def _record(message: Message) -> Record:
    _, timestamp = message.timestamp()
    headers = cast(list[tuple[str, bytes | None]], message.headers() or [])
    return Record(
        _known(message.partition()),
        _known(message.offset()),
        message.key(),
        message.value(),
        tuple(headers),
        timestamp,
    )


def _known(value: int | None) -> int:
    """A partition/offset librdkafka types as optional but always sets on these messages."""
    assert value is not None
    return value
