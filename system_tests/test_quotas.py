"""Client quotas (issue 12; KIP-13, KIP-124, KIP-546) on a real broker.

Quotas are set and read with AlterClientQuotas / DescribeClientQuotas over a
raw socket (kafka-python's schema classes; neither Python admin client has
these calls). A librdkafka producer with a client id under a 100 KB/s
producer_byte_rate quota, sending as fast as it can, is held within 20 % of
the limit over its steady state, with no delivery errors; a producer with
another client id is not slowed; a consumer under a consumer_byte_rate
quota is held likewise. Quotas persist across a restart and can be removed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from protocol.errors import ErrorCode
from system_tests._proc import RawClient, TierdProc, scrape, start_tierd
from system_tests.admin import create_topic

VERSION = 1
PRODUCE_QUOTA = 100_000.0
FETCH_QUOTA = 200_000.0
# The client's first requests pass before the rate over the sampled window
# exceeds the quota (as in Kafka, a new client may burst until the window's
# average is over); the steady state is measured after that. Three 1 s
# windows keep that first burst short.
RUN_S = 11.0
STEADY_FROM_S = 3.0
VALUE = b"q" * 1000


def alter(broker: TierdProc, entity: list[tuple[str, str | None]],
          ops: list[tuple[str, float | None]]) -> Any:
    entry = AlterClientQuotasRequest[VERSION].EntryData
    req = AlterClientQuotasRequest[VERSION](entries=[entry(
        entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[entry.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops])],
        validate_only=False)
    host, port = broker.bootstrap.rsplit(":", 1)
    with RawClient(host, int(port)) as client:
        [result] = client.request(req, VERSION, AlterClientQuotasResponse).entries
    return result


def describe(broker: TierdProc, components: list[tuple[str, int, str | None]]) -> dict:
    comp = DescribeClientQuotasRequest[VERSION].ComponentData
    req = DescribeClientQuotasRequest[VERSION](
        components=[comp(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=False)
    host, port = broker.bootstrap.rsplit(":", 1)
    with RawClient(host, int(port)) as client:
        resp = client.request(req, VERSION, DescribeClientQuotasResponse)
    assert resp.error_code == 0
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in resp.entries}


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> list[float]:
    """Produce 1 KB values as fast as the client allows; delivery times (s)."""
    delivered: list[float] = []
    errors: list[object] = []
    started = time.monotonic()

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(time.monotonic() - started)

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "batch.size": 16384,
                         "queue.buffering.max.kbytes": 512})
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, VALUE, partition=0, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return delivered


def steady_rate(times: list[float], start: float, end: float) -> float:
    return sum(1 for t in times if start <= t < end) * len(VALUE) / (end - start)


def test_produce_and_fetch_quotas(request: pytest.FixtureRequest, tmp_path: Path,
                                  topic: str) -> None:
    broker = start_tierd(request, tmp_path / "broker", {"quota.window.num": "3"})
    create_topic(broker.bootstrap, topic, 1)
    result = alter(broker, [("client-id", "slow-producer")],
                   [("producer_byte_rate", PRODUCE_QUOTA)])
    assert result.error_code == 0
    assert describe(broker, [("client-id", 0, "slow-producer")]) == {
        (("client-id", "slow-producer"),): {"producer_byte_rate": PRODUCE_QUOTA}}

    times = produce_for(broker.bootstrap, topic, "slow-producer", RUN_S)
    rate = steady_rate(times, STEADY_FROM_S, RUN_S)
    assert 0.8 * PRODUCE_QUOTA <= rate <= 1.2 * PRODUCE_QUOTA, rate
    assert scrape(broker.metrics_url).total("tierd_quota_throttled_responses_total",
                                            quota="produce") > 0

    # Another client id has no quota.
    fast = produce_for(broker.bootstrap, topic, "fast-producer", 3)
    assert steady_rate(fast, 0, 3) > 3 * PRODUCE_QUOTA

    # A consumer under a consumer_byte_rate quota (small fetches, as a
    # consumer with default settings on a partition it keeps up with).
    assert alter(broker, [("client-id", "slow-consumer")],
                 [("consumer_byte_rate", FETCH_QUOTA)]).error_code == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-consumer",
                         "group.id": f"{topic}-g", "enable.auto.commit": False,
                         "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                         "max.partition.fetch.bytes": 32768})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[float] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < RUN_S:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(time.monotonic() - started)
    finally:
        consumer.close()
    fetch_rate = steady_rate(got, STEADY_FROM_S, RUN_S)
    assert 0.8 * FETCH_QUOTA <= fetch_rate <= 1.2 * FETCH_QUOTA, fetch_rate


def test_quota_administration(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    broker = start_tierd(request, tmp_path / "broker")
    # Kafka's entity forms: user, user+client, defaults (a null name).
    assert alter(broker, [("user", "alice")], [("producer_byte_rate", 1e6)]).error_code == 0
    assert alter(broker, [("user", "alice"), ("client-id", "app")],
                 [("consumer_byte_rate", 2e6), ("request_percentage", 50.0)]).error_code == 0
    assert alter(broker, [("user", None)], [("producer_byte_rate", 5e5)]).error_code == 0
    everything = describe(broker, [])
    assert everything[(("user", "alice"),)] == {"producer_byte_rate": 1e6}
    assert everything[(("client-id", "app"), ("user", "alice"))] == {
        "consumer_byte_rate": 2e6, "request_percentage": 50.0}
    assert everything[(("user", None),)] == {"producer_byte_rate": 5e5}
    assert set(describe(broker, [("user", 1, None)])) == {(("user", None),)}

    # Refused: unknown key, a non-positive value, an unsupported entity type.
    bad_key = alter(broker, [("user", "bob")], [("bytes_per_fortnight", 1.0)])
    assert bad_key.error_code == ErrorCode.INVALID_REQUEST
    assert "Unknown quota key" in bad_key.error_message
    assert alter(broker, [("user", "bob")],
                 [("producer_byte_rate", -5.0)]).error_code == ErrorCode.INVALID_REQUEST
    assert alter(broker, [("ip", "10.0.0.1")],
                 [("producer_byte_rate", 5.0)]).error_code == ErrorCode.INVALID_REQUEST
    assert (("user", "bob"),) not in describe(broker, [])

    # Kept across a restart; removing the last key removes the entity.
    broker.restart()
    assert describe(broker, [("user", 0, "alice")])[(("user", "alice"),)] == {
        "producer_byte_rate": 1e6}
    assert alter(broker, [("user", "alice")], [("producer_byte_rate", None)]).error_code == 0
    assert (("user", "alice"),) not in describe(broker, [])
