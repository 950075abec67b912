"""A live broker tiering to Google Cloud Storage and Azure Blob Storage,
each played by its emulator (gcp-storage-emulator, Azurite) over real HTTP.

* End to end: a real producer (librdkafka) writes, closed segments go to the
  store and leave local disk, and a real consumer reads everything back from
  offset 0: the old part cold, from the store.
* The store goes down (its emulator process stopped; its data stays on disk):
  produce goes on without a stall, local reads work, remote reads get
  KAFKA_STORAGE_ERROR for their partition, copies fail and back off; once the
  store is back (same port), the backlog tiers and nothing is lost.

Each module gets its own emulator processes, so stopping one here cannot
disturb the shared ones of other tests.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from system_tests.cloud_tiers import AzureTier, GcsTier
from system_tests.emulators import AzuriteBlob, GcsEmulator
from system_tests.tiered_helpers import (
    EARLIEST_LOCAL,
    KAFKA_STORAGE_ERROR,
    LATEST,
    LATEST_TIERED,
    create_tiered_topic,
    eventually,
    fetch,
    local_segment_bases,
    metric,
    offset_for,
    raw,
    read_all,
    start_tiered,
    wait_tiered,
)

VALUE_SIZE = 200
# ~10 records per segment: a few dozen records make several segments.
SEGMENT_BYTES = "3000"
RECORDS = 60
# A send that takes this long stalled on the store (each failing call backs
# off up to a second); a healthy broker answers in milliseconds.
STALL_S = 1.0
CONSUME_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    server = GcsEmulator(tmp_path_factory.mktemp("gcs"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def azurite_blob(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteBlob]:
    server = AzuriteBlob(tmp_path_factory.mktemp("azurite"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> tuple[GcsEmulator | AzuriteBlob, GcsTier | AzureTier]:
    """(the emulator, a tier on a fresh bucket or container of it)."""
    if request.param == "gcs":
        gcs: GcsEmulator = request.getfixturevalue("gcs")
        return gcs, GcsTier(gcs, gcs.create_bucket())
    azurite: AzuriteBlob = request.getfixturevalue("azurite_blob")
    return azurite, AzureTier(azurite, azurite.create_container())


def value(tag: str, i: int) -> bytes:
    return f"{tag}-{i}-".encode().ljust(VALUE_SIZE, b"x")


def send(producer: Producer, topic: str, tag: str, count: int) -> list[float]:
    """``count`` acks=all sends, one at a time; the round trip of each."""
    took = []
    for i in range(count):
        delivered: list[object] = []
        started = time.perf_counter()
        producer.produce(topic, value=value(tag, i), partition=0,
                         on_delivery=lambda err, msg, out=delivered: out.append(err))
        producer.flush(10)
        took.append(time.perf_counter() - started)
        assert delivered == [None], f"{tag} send {i}: {delivered}"
    return took


def consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``count`` records, read from the earliest offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_produce_tier_and_consume_cold(request: pytest.FixtureRequest, tmp_path: Path,
                                       cloud: tuple[GcsEmulator | AzuriteBlob,
                                                    GcsTier | AzureTier],
                                       topic: str) -> None:
    _, tier = cloud
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic, segment_bytes=SEGMENT_BYTES)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    send(producer, topic, "cold", RECORDS)
    remote = wait_tiered(broker, tier, topic, 2)
    with raw(broker) as client:
        local_start = offset_for(client, topic, EARLIEST_LOCAL)
        assert local_start > 0 and offset_for(client, topic, LATEST_TIERED) == local_start - 1
    assert local_segment_bases(broker, topic) == [local_start]
    assert sorted(tier.start_offset_of(n) for n in remote)[0] == 0
    # Every object of a segment is in the store, in the shared layout.
    for suffix in ("index", "timeindex", "leader_epoch_checkpoint", "indexes"):
        assert len([n for n in tier.objects(topic) if n.endswith("." + suffix)]) == len(remote)

    fetched_before = metric(broker, "RemoteFetchBytesPerSec_total", topic=topic)
    got = consume_all(broker.bootstrap, topic, RECORDS)
    assert got == [(i, value("cold", i)) for i in range(RECORDS)]
    assert metric(broker, "RemoteFetchBytesPerSec_total", topic=topic) > fetched_before
    assert metric(broker, "RemoteCopyBytesPerSec_total", topic=topic) > 0


def test_store_down_then_back(request: pytest.FixtureRequest, tmp_path: Path,
                              cloud: tuple[GcsEmulator | AzuriteBlob, GcsTier | AzureTier],
                              topic: str) -> None:
    emulator, tier = cloud
    broker = start_tiered(request, tmp_path / "broker", tier,
                          {"remote.fetch.max.wait.ms": "3000"})
    create_tiered_topic(broker, topic, segment_bytes=SEGMENT_BYTES)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    send(producer, topic, "before", 30)
    wait_tiered(broker, tier, topic, 1)
    with raw(broker) as client:
        tiered_before = offset_for(client, topic, LATEST_TIERED)
        errors = metric(broker, "RemoteCopyErrorsPerSec_total", topic=topic)
        emulator.stop()
        try:
            during = send(producer, topic, "during", 40)  # rolls segments the copier must try
            assert max(during) < STALL_S, f"a send took {max(during):.3f} s with the store down"
            eventually(lambda: metric(broker, "RemoteCopyErrorsPerSec_total", topic=topic)
                       > errors, lambda: "no failed copy seen while the store was down")
            # Nothing untiered left local disk; nothing new counts as tiered.
            end = offset_for(client, topic, LATEST)
            assert offset_for(client, topic, LATEST_TIERED) == tiered_before
            assert len(local_segment_bases(broker, topic)) >= 3
            local_start = offset_for(client, topic, EARLIEST_LOCAL)
            assert [o for o, _ in read_all(client, topic, start=local_start)] == \
                list(range(local_start, end))
            # A read of the tiered part gets an error code for its partition.
            got = fetch(client, {(topic, 0): 0}, max_wait_ms=100)[(topic, 0)]
            assert (got.error_code, got.records) == (KAFKA_STORAGE_ERROR, b""), got
        finally:
            emulator.start()
        eventually(lambda: len(local_segment_bases(broker, topic)) == 1,
                   lambda: f"local segments {local_segment_bases(broker, topic)} after recovery")
        assert offset_for(client, topic, LATEST_TIERED) > tiered_before
        everything = read_all(client, topic)
        assert [o for o, _ in everything] == list(range(end))
        assert [r.value for _, r in everything] == \
            [value("before", i) for i in range(30)] + [value("during", i) for i in range(40)]
