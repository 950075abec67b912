"""Driver for aiokafka, run on a private asyncio loop per call."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import ConsumerRecord

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
)
from system_tests.messages import Delivery, MessageProfile, OutMessage, Record

# getmany() wait: short, so the end-offset check runs often.
POLL_TIMEOUT_MS = 200


class AiokafkaDriver:
    """aiokafka; supports everything in `MessageProfile`."""

    name = "aiokafka"
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
        """Send all messages and await every delivery."""
        check_codec(compression)
        check_acks(acks)
        return asyncio.run(
            asyncio.wait_for(
                _produce(bootstrap, topic, messages, compression, acks, security), PRODUCE_TIMEOUT_S
            )
        )

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """assign(), seek(), getmany() until every position reaches its end offset."""
        return asyncio.run(_consume(bootstrap, topic, starts, timeout_s, security))


def security_options(security: ClientSecurity | None) -> dict[str, Any]:
    """AIOKafkaProducer/AIOKafkaConsumer keyword arguments for `security` (empty for None)."""
    if security is None:
        return {}
    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.tls:
        # create_ssl_context: verifies the chain and the host name (check_hostname).
        options["ssl_context"] = create_ssl_context(
            cafile=security.ca_file, certfile=security.cert_file, keyfile=security.key_file
        )
    if security.sasl:
        options["sasl_mechanism"] = security.mechanism
        options["sasl_plain_username"] = security.username
        options["sasl_plain_password"] = security.password
    return options


async def _produce(
    bootstrap: str,
    topic: str,
    messages: Sequence[OutMessage],
    compression: str,
    acks: str,
    security: ClientSecurity | None,
) -> list[Delivery]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all" if acks == "all" else int(acks),
        compression_type=None if compression == "none" else compression,
        enable_idempotence=False,
        linger_ms=LINGER_MS,
        request_timeout_ms=15_000,
        **security_options(security),
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=m.value,
                key=m.key,
                partition=m.partition,
                timestamp_ms=m.timestamp_ms,
                headers=list(m.headers),
            )
            for m in messages
        ]
        deliveries = []
        for index, (message, future) in enumerate(zip(messages, futures, strict=True)):
            try:
                meta = await future
            except Exception as exc:
                raise ProduceFailed(f"aiokafka: message {index} failed: {exc!r}") from exc
            if meta is None and acks == "0":  # aiokafka resolves acks=0 sends with None
                deliveries.append(Delivery(message.partition, None))
            elif meta is None:
                raise ProduceFailed(f"aiokafka: message {index} got no metadata")
            else:
                deliveries.append(Delivery(meta.partition, acked_offset(meta.offset, acks)))
        return deliveries
    finally:
        await producer.stop()


async def _consume(
    bootstrap: str,
    topic: str,
    starts: Mapping[int, int],
    timeout_s: float,
    security: ClientSecurity | None,
) -> list[Record]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **security_options(security),
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in starts]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, starts[tp.partition])
        ends = await consumer.end_offsets(partitions)
        return await _read_until(consumer, ends, timeout_s)
    finally:
        await consumer.stop()


async def _read_until(
    consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int], timeout_s: float
) -> list[Record]:
    """getmany() until every partition's position reaches its end offset."""
    records: list[Record] = []
    try:
        async with asyncio.timeout(timeout_s):
            while not await _reached(consumer, ends):
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)
                for batch in batches.values():
                    records.extend(_record(r) for r in batch)
    except TimeoutError:
        raise ConsumeTimeout(f"aiokafka: end offsets {dict(ends)} not reached", records) from None
    return records


async def _reached(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


def _record(r: ConsumerRecord[bytes, bytes]) -> Record:
    return Record(
        r.partition,
        r.offset,
        r.key,
        r.value,
        tuple((k, v) for k, v in r.headers),
        r.timestamp,
    )
