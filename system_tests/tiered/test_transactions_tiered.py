"""read_committed over tiered data: aborted transactions come from the remote
tier's transaction indexes, so a consumer never sees aborted records there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from system_tests.s3_fixtures import FaultProxy
from system_tests.tiered_helpers import (
    EARLIEST_LOCAL,
    RemoteTier,
    S3Tier,
    create_tiered_topic,
    eventually,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    start_tiered,
    wait_tiered,
)

TXNS = 6
PER_TXN = 3


def _consume_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{isolation}-{topic}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        got += [m.value() for m in consumer.consume(100, 1.0) if m.error() is None]
    finally:
        consumer.close()
    return got


def test_read_committed_skips_aborted_transactions_in_remote_segments(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}",
                         "linger.ms": 0})
    producer.init_transactions(30)
    committed, everything = [], []
    for t in range(TXNS + 1):
        producer.begin_transaction()
        values = [b"t%d-%d" % (t, i) for i in range(PER_TXN)]
        for v in values:
            producer.produce(topic, v, partition=0)
            producer.flush(10)  # one batch per record: one segment each
        everything += values
        if t % 2 == 0:  # the last one (t == TXNS) commits, so its marker ends the log
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
    with raw(broker) as client:
        # Wait until every aborted transaction (and its marker) left local disk.
        last_abort_marker = (TXNS - 1) * (PER_TXN + 1) + PER_TXN
        eventually(lambda: offset_for(client, topic, EARLIEST_LOCAL) > last_abort_marker,
                   lambda: f"local start {offset_for(client, topic, EARLIEST_LOCAL)}")
    assert _consume_all(broker.bootstrap, topic, "read_committed", len(committed)) == committed
    assert _consume_all(broker.bootstrap, topic, "read_uncommitted", len(everything)) == everything


def test_read_committed_asks_for_no_transaction_index_a_segment_never_had(
        request: pytest.FixtureRequest, tmp_path: Path, s3_tier_behind_proxy: S3Tier,
        fault_proxy: FaultProxy, topic: str) -> None:
    """Segments copied without aborted transactions say so in their manifest
    (custom metadata): a read_committed consumer reading them from the tier
    causes GETs of the .log and its indexes, never of a .txnindex (before,
    one 404 per segment, one after another, before the first record)."""
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(TXNS + 1, PER_TXN)
    with raw(broker) as client:
        produce_batches(client, topic, 0, batches)
    wait_tiered(broker, tier, topic, TXNS)
    fault_proxy.requests.clear()

    values = [r.value for b in batches for r in b]
    assert _consume_all(broker.bootstrap, topic, "read_committed", len(values)) == values
    gets = [target for method, target in list(fault_proxy.requests) if method == "GET"]
    assert any(".log" in target for target in gets), gets  # the reads went through the proxy
    assert not [target for target in gets if ".txnindex" in target], gets
