"""S3 down for a while under a live broker (every request through the proxy
answered 500): produce and local reads carry on at their normal speed,
untiered data stays on local disk, remote reads get an error code for their
partition, and after recovery the backlog tiers and nothing is lost.

The latency check is a behaviour test of "remote storage never stalls
produce": the median (and mean) acks=all round trip of a real producer
during the outage must stay within 20 % of the one before it, plus an
absolute allowance for scheduling noise on a loaded 2-core machine, and no
send may take a second. A broker that waited for S3 on the produce path (a
copy on the event loop, a roll waiting for the copier) stalls for hundreds
of milliseconds per attempt - botocore's retry backoff - far past these.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from system_tests.s3_fixtures import Fault, FaultProxy
from system_tests.tiered_helpers import (
    EARLIEST,
    EARLIEST_LOCAL,
    KAFKA_STORAGE_ERROR,
    LATEST,
    LATEST_TIERED,
    S3Tier,
    create_tiered_topic,
    eventually,
    fetch,
    local_segment_bases,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    start_tiered,
    wait_tiered,
)

# Sends per latency sample: enough for a stable median, cheap (~1 ms each).
SENDS = 150
# Allowed: 20 % over the normal median, plus this much for noise.
LATENCY_RATIO = 1.2
LATENCY_SLACK_S = 0.004
# The mean may also absorb a rare scheduling hiccup (100 ms over 150 sends).
MEAN_SLACK_S = 0.010
# A send that takes this long stalled on something (one botocore retry backs
# off up to 1 s); no healthy broker takes it, even on a loaded machine.
STALL_S = 1.0
VALUE_SIZE = 200
# ~10 sends per segment, so the outage sees many rolls and copy attempts.
SEGMENT_BYTES = 3000
# Remote reads must answer within remote.fetch.max.wait.ms plus this slack.
REMOTE_FETCH_MAX_WAIT_MS = 3000
FETCH_SLACK_S = 2.0


def timed_sends(producer: Producer, topic: str, tag: str, count: int = SENDS) -> list[float]:
    """Round trip of each of `count` acks=all sends, one at a time."""
    latencies = []
    for i in range(count):
        delivered: list[object] = []
        started = time.perf_counter()
        producer.produce(topic, value=f"{tag}-{i}-".encode().ljust(VALUE_SIZE, b"x"),
                         partition=0,
                         on_delivery=lambda err, msg, out=delivered: out.append(err))
        producer.flush(10)
        latencies.append(time.perf_counter() - started)
        assert delivered == [None], f"{tag} send {i}: {delivered}"
    return latencies


def test_produce_and_local_reads_unaffected_while_s3_is_down(
        request: pytest.FixtureRequest, tmp_path: Path, s3_tier_behind_proxy: S3Tier,
        fault_proxy: FaultProxy, topic: str) -> None:
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier,
                          {"remote.fetch.max.wait.ms": str(REMOTE_FETCH_MAX_WAIT_MS)})
    create_tiered_topic(broker, topic, segment_bytes=str(SEGMENT_BYTES))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False})
    with raw(broker) as client:
        # Some tiered data to read back later.
        produce_batches(client, topic, 0, numbered_batches(20, 5, size=VALUE_SIZE))
        wait_tiered(broker, tier, topic, 1)
        timed_sends(producer, topic, "warmup", 30)
        normal = timed_sends(producer, topic, "normal")
        wait_tiered(broker, tier, topic, 1)
        tiered_before = offset_for(client, topic, LATEST_TIERED)
        assert tiered_before > 0

        fault_proxy.inject(Fault.ERROR_500)
        errors = metric(broker, "RemoteCopyErrorsPerSec_total", topic=topic)
        timed_sends(producer, topic, "rolling", 30)  # closes segments the copier must try
        eventually(lambda: metric(broker, "RemoteCopyErrorsPerSec_total", topic=topic) > errors,
                   lambda: "no failed copy seen after the outage began")
        during = timed_sends(producer, topic, "outage")

        base_median, outage_median = statistics.median(normal), statistics.median(during)
        allowed = base_median * LATENCY_RATIO + LATENCY_SLACK_S
        assert outage_median <= allowed, (
            f"produce median {outage_median * 1000:.2f} ms during the S3 outage, "
            f"{base_median * 1000:.2f} ms before (allowed {allowed * 1000:.2f} ms)")
        # A broker that blocks on S3 now and then (each failing copy attempt) leaves
        # the median alone but not the mean or the worst send.
        base_mean, outage_mean = statistics.fmean(normal), statistics.fmean(during)
        assert outage_mean <= base_mean * LATENCY_RATIO + MEAN_SLACK_S, (
            f"produce mean {outage_mean * 1000:.2f} ms during the S3 outage, "
            f"{base_mean * 1000:.2f} ms before")
        assert max(during) < STALL_S, f"a send took {max(during):.3f} s during the outage"

        # Nothing untiered left local disk; nothing new counts as tiered.
        end = offset_for(client, topic, LATEST)
        assert offset_for(client, topic, LATEST_TIERED) == tiered_before
        assert offset_for(client, topic, EARLIEST_LOCAL) <= tiered_before + 1
        assert local_segment_bases(broker, topic)[0] <= tiered_before + 1
        assert len(local_segment_bases(broker, topic)) > 10
        # The operator sees the backlog.
        eventually(lambda: metric(broker, "RemoteCopyLagSegments", topic=topic) >= 10,
                   lambda: f"lag {metric(broker, 'RemoteCopyLagSegments', topic=topic)}")
        # Local reads work: everything from the local start, in order.
        local_start = offset_for(client, topic, EARLIEST_LOCAL)
        local = read_all(client, topic, start=local_start)
        assert [o for o, _ in local] == list(range(local_start, end))
        # A remote read gets an error code for its partition, in bounded time.
        started = time.monotonic()
        got = fetch(client, {(topic, 0): 0}, max_wait_ms=100)[(topic, 0)]
        took = time.monotonic() - started
        assert (got.error_code, got.records) == (KAFKA_STORAGE_ERROR, b""), got
        assert took < REMOTE_FETCH_MAX_WAIT_MS / 1000 + FETCH_SLACK_S, took

        fault_proxy.clear()
        segments = len(local_segment_bases(broker, topic))
        wait_tiered(broker, tier, topic, segments - 1)
        assert offset_for(client, topic, LATEST_TIERED) >= end - 1 - SEGMENT_BYTES // VALUE_SIZE
        eventually(lambda: metric(broker, "RemoteCopyLagSegments", topic=topic) == 0,
                   lambda: f"lag {metric(broker, 'RemoteCopyLagSegments', topic=topic)}")
        everything = read_all(client, topic)
        assert [o for o, _ in everything] == list(range(end))
        assert offset_for(client, topic, EARLIEST) == 0
        values = [r.value for _, r in everything]
        for tag, count in (("normal", SENDS), ("rolling", 30), ("outage", SENDS)):
            sent = [f"{tag}-{i}-".encode().ljust(VALUE_SIZE, b"x") for i in range(count)]
            assert [v for v in values if v.startswith(f"{tag}-".encode())] == sent, tag
