"""Driver for kafka-python (3.x): KafkaProducer and an assign()ed KafkaConsumer."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

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
    kafka_python_options,
)
from system_tests.messages import Delivery, MessageProfile, OutMessage, Record

# Poll granularity: short, so the end-offset check runs often.
POLL_TIMEOUT_MS = 200


class KafkaPythonDriver:
    """kafka-python; supports everything in `MessageProfile`."""

    name = "kafka-python"
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
        """Send all messages, flush, and collect each future's metadata."""
        check_codec(compression)
        check_acks(acks)
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all" if acks == "all" else int(acks),
            compression_type=None if compression == "none" else compression,
            # kafka-python 3 defaults to idempotence; tierd adds it later.
            enable_idempotence=False,
            max_in_flight_requests_per_connection=1,
            linger_ms=LINGER_MS,
            request_timeout_ms=15_000,
            **kafka_python_options(security),
        )
        try:
            futures = [
                producer.send(
                    topic,
                    value=m.value,
                    key=m.key,
                    headers=list(m.headers),
                    partition=m.partition,
                    timestamp_ms=m.timestamp_ms,
                )
                for m in messages
            ]
            producer.flush(timeout=PRODUCE_TIMEOUT_S)
            return [self._delivery(i, f, acks) for i, f in enumerate(futures)]
        finally:
            producer.close(timeout=10)

    @staticmethod
    def _delivery(index: int, future: object, acks: str) -> Delivery:
        try:
            meta = future.get(timeout=PRODUCE_TIMEOUT_S)  # type: ignore[attr-defined]
        except Exception as exc:
            raise ProduceFailed(f"kafka-python: message {index} failed: {exc!r}") from exc
        return Delivery(meta.partition, acked_offset(meta.offset, acks))

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """assign(), seek() each partition, poll until every position reaches its end offset."""
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **kafka_python_options(security),
        )
        try:
            partitions = [TopicPartition(topic, p) for p in starts]
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek(tp, starts[tp.partition])
            ends = consumer.end_offsets(partitions)
            return _poll_until(consumer, ends, timeout_s)
        finally:
            consumer.close()


def _poll_until(
    consumer: KafkaConsumer, ends: Mapping[TopicPartition, int], timeout_s: float
) -> list[Record]:
    """Poll until each partition's position is at or past its end offset."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(tp) < end for tp, end in ends.items()):
        if time.monotonic() > deadline:
            raise ConsumeTimeout(f"kafka-python: end offsets {dict(ends)} not reached", records)
        for batch in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values():
            records.extend(
                Record(
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    tuple((k, v) for k, v in r.headers),
                    r.timestamp,
                )
                for r in batch
            )
    return records
