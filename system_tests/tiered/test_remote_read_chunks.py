"""Remote reads through the chunk cache, against S3 (moto over HTTP, through a
proxy that records every request).

Two consumers with small fetches (64 KiB per partition) read a topic of
1 MiB segments back from the tier at the same time. Before chunking each fetch was its own ranged
GET of the fetch size plus 64 KiB of slack (twice the bytes delivered, one
GET per fetch); now each 256 KiB chunk of each segment is fetched once,
prefetched ahead of the consumer, and every other read is served from
memory: the .log GETs equal the chunk count, and the broker's chunk
metrics add up to them. The segments are copied by a worker process
(tierd.remote.copy.processes=1).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from system_tests.s3_fixtures import FaultProxy
from system_tests.tiered_helpers import (
    Rec,
    S3Tier,
    create_tiered_topic,
    eventually,
    produce_batches,
    raw,
    scrape,
    start_tiered,
    wait_tiered,
)

CHUNK = 256 * 1024
SEGMENT_BYTES = 1024 * 1024
VALUE = 1000
BATCH = 50  # records per produced batch: ~50 KB
BATCHES = 90  # ~4.5 MB: four closed segments tier
FETCH = 64 * 1024


def _consume(bootstrap: str, topic: str, expected: int, group: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "max.partition.fetch.bytes": FETCH})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_a_remote_read_fetches_each_chunk_once(request: pytest.FixtureRequest, tmp_path: Path,
                                               s3_tier_behind_proxy: S3Tier,
                                               fault_proxy: FaultProxy, topic: str) -> None:
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier,
                          {"rsm.config.fetch.chunk.size": str(CHUNK),
                           "rsm.config.fetch.prefetch.chunks": "2",
                           # Copies in a worker process (storage.remote.copy_process).
                           "tierd.remote.copy.processes": "1"})
    create_tiered_topic(broker, topic, segment_bytes=str(SEGMENT_BYTES))
    now = int(time.time() * 1000)
    batches = [[Rec(None, f"{b}-{i}-".encode().ljust(VALUE, b"x"), now) for i in range(BATCH)]
               for b in range(BATCHES)]
    with raw(broker) as client:
        produce_batches(client, topic, 0, batches)
    logs = wait_tiered(broker, tier, topic, 4)
    sizes = [len(tier.read(name)) for name in logs]
    chunks = sum(-(-size // CHUNK) for size in sizes)
    fault_proxy.requests.clear()

    values = [r.value for b in batches for r in b]
    # Two consumers at once: they share chunks (and fetches in flight).
    results: dict[int, list[bytes]] = {}
    readers = [threading.Thread(target=lambda n=n: results.__setitem__(
        n, _consume(broker.bootstrap, topic, len(values), f"g{n}-{topic}"))) for n in (1, 2)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    assert results == {1: values, 2: values}

    log_gets = [t for m, t in list(fault_proxy.requests) if m == "GET" and ".log?" in t]
    tiered_bytes = sum(sizes)
    # Each chunk of each tiered segment once (reads past the tier are local).
    assert len(log_gets) == chunks, (len(log_gets), chunks, tiered_bytes)
    # The chunk cache's counts are exported from the gauge snapshot (taken
    # every second on the event loop): the last reads show up within it.

    def counts() -> tuple[float, float, float, float]:
        # One scrape: the four figures of one snapshot (four scrapes could
        # straddle a refresh and mix two).
        got = scrape(broker.metrics_url)
        return (got.total("RemoteChunkCacheMisses_total"),
                got.total("RemoteChunkPrefetches_total"),
                got.total("RemoteChunkFetchBytes_total"),
                got.total("RemoteChunkCacheHits_total"))

    misses, prefetches, fetched, hits = eventually(
        lambda: (c := counts())[2] == tiered_bytes and c,
        lambda: f"chunk counts {counts()}, want {tiered_bytes} bytes fetched")
    assert misses + prefetches == chunks, (misses, prefetches, chunks)
    # Dozens of 64 KiB fetches were served from cached chunks.
    assert hits >= 10
    assert prefetches >= 1
