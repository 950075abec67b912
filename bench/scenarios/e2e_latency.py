"""End-to-end latency at a steady produce rate (default 1,000 msgs/s for 10 s).

The producer stamps ``time.monotonic_ns()`` into each value's header and paces itself
against an absolute schedule; a consumer thread (default ``fetch.wait.max.ms``, so a
broker that does not answer a long-poll fetch as soon as data arrives shows up here)
records ``now - sent`` for each message. Warm-up messages are sent and received first
so connection setup is not measured.
"""

from __future__ import annotations

import threading
import time
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.kafka_util import (
    DeliveryTracker,
    consumer_config,
    ensure_topic,
    producer_config,
    topic_partitions,
)
from bench.payload import HEADER, make_value
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.stats import percentile

NAME = "e2e_latency"
SIZE = 1024
ACKS = "all"
CODEC = "lz4"
LINGER_MS = 5
WARMUP_MESSAGES = 20
WARMUP_TIMEOUT = 20.0
DRAIN_TIMEOUT = 10.0
WARMUP_FLAG = 1 << 63

METRICS = (
    MetricSpec("e2e_p50_ms", "end-to-end p50", "ms", False, "{:,.2f}"),
    MetricSpec("e2e_p99_ms", "end-to-end p99", "ms", False, "{:,.2f}"),
    MetricSpec("e2e_max_ms", "end-to-end max", "ms", False, "{:,.2f}"),
    MetricSpec("produce_p50_ms", "produce (ack) p50", "ms", False, "{:,.2f}"),
    MetricSpec("produce_p99_ms", "produce (ack) p99", "ms", False, "{:,.2f}"),
    MetricSpec("send_rate", "achieved send rate", "msg/s", True, "{:,.0f}"),
    MetricSpec("cpu_us_msg", "broker CPU/msg", "us", False, "{:,.2f}"),
)

TARGETS = (Target("e2e_p99_ms", TargetKind.ABSOLUTE_AT_MOST, 50.0, unit="ms"),)


@dataclass
class LatencyCollector:
    """Consumer-thread state: latencies of measured messages and seen sequence numbers."""

    expected: int
    crcs: array
    latencies_ns: list[int] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    warmups: int = 0
    bad: int = 0
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def record(self, value: bytes | None, now_ns: int) -> None:
        """Account for one received value."""
        if value is None or len(value) < HEADER.size:
            self.bad += 1
            return
        seq, sent_ns = HEADER.unpack_from(value, 0)
        if seq & WARMUP_FLAG:
            self.warmups += 1
            return
        if seq >= self.expected or zlib.crc32(value) != self.crcs[seq] or seq in self.seen:
            self.bad += 1
            return
        self.seen.add(seq)
        self.latencies_ns.append(now_ns - sent_ns)


def consume_loop(consumer: Consumer, collector: LatencyCollector, deadline: float) -> None:
    """Thread body: poll until told to stop or the hard deadline passes."""
    while not collector.stop.is_set() and time.monotonic() < deadline:
        # poll() returns as soon as one message is there; consume(n, t) would wait for
        # n messages or t seconds and so add its own latency.
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        now_ns = time.monotonic_ns()
        if msg.error() is not None:
            collector.errors += 1
            continue
        collector.record(msg.value(), now_ns)


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Sleep-poll ``predicate()`` for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def send_warmup(producer: Producer, topic: str) -> None:
    """Produce a few flagged messages so connections and fetch sessions are warm."""
    for i in range(WARMUP_MESSAGES):
        producer.produce(topic, make_value(WARMUP_FLAG | i, SIZE))
    producer.flush(WARMUP_TIMEOUT)


def paced_send(producer: Producer, topic: str, count: int, rate: int, crcs: array) -> float:
    """Send ``count`` stamped values on an absolute 1/rate schedule; return achieved rate."""
    interval_ns = int(1e9 / rate)
    start_ns = time.monotonic_ns()
    for seq in range(count):
        due_ns = start_ns + seq * interval_ns
        delay = (due_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        value = make_value(seq, SIZE, time.monotonic_ns())
        crcs[seq] = zlib.crc32(value)
        producer.produce(topic, value)
        producer.poll(0)
    elapsed = (time.monotonic_ns() - start_ns) / 1e9
    return count / elapsed if elapsed > 0 else float("nan")


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """Measure end-to-end latency on the current broker (one case)."""
    case = f"{ctx.config.e2e_rate}msg_s-{SIZE}B-{CODEC}-acks{ACKS}"
    if not ctx.case_selected(case):
        return []
    result = ctx.new_result(NAME, case)
    try:
        measure(ctx, result)
    except Exception as exc:  # noqa: BLE001 - record and go on
        result.error = f"{type(exc).__name__}: {exc}"
        ctx.log(f"{NAME}: ERROR {result.error}")
    return [result]


def measure(ctx: ScenarioContext, result: CaseResult) -> None:
    """Warm up, send at a steady rate while a consumer thread records latency."""
    count = max(1, int(ctx.config.e2e_rate * ctx.config.e2e_seconds))
    topic = ctx.topic_name(NAME, result.case)
    result.notes.extend(ensure_topic(ctx.bootstrap, topic, ctx.config.partitions))
    crcs = array("L", [0]) * count
    collector = LatencyCollector(expected=count, crcs=crcs)
    acks = DeliveryTracker()
    producer = Producer(producer_config(ctx.bootstrap, ACKS, CODEC, LINGER_MS, on_delivery=acks))
    consumer = Consumer(consumer_config(ctx.bootstrap, f"bench-{topic}"))
    parts = topic_partitions(consumer, topic)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    hard_deadline = time.monotonic() + WARMUP_TIMEOUT + ctx.config.e2e_seconds * 2 + DRAIN_TIMEOUT
    thread = threading.Thread(
        target=consume_loop, args=(consumer, collector, hard_deadline), daemon=True
    )
    thread.start()
    try:
        send_warmup(producer, topic)
        if not _wait_until(lambda: collector.warmups >= WARMUP_MESSAGES, WARMUP_TIMEOUT):
            raise TimeoutError("warm-up messages never reached the consumer")
        acks.latencies.clear()
        cpu0 = ctx.broker.cpu_seconds()
        result.metrics["send_rate"] = paced_send(producer, topic, count, ctx.config.e2e_rate, crcs)
        producer.flush(DRAIN_TIMEOUT)
        _wait_until(lambda: len(collector.seen) >= count, DRAIN_TIMEOUT)
        cpu1 = ctx.broker.cpu_seconds()
    finally:
        collector.stop.set()
        thread.join(timeout=DRAIN_TIMEOUT)
        consumer.close()
    fill_metrics(result, collector, count, cpu1 - cpu0)
    result.metrics["produce_p50_ms"] = percentile(acks.latencies, 50) * 1e3
    result.metrics["produce_p99_ms"] = percentile(acks.latencies, 99) * 1e3
    if acks.errors:
        result.verified = False
        result.notes.append(f"{acks.errors} delivery error(s), first: {acks.first_error}")
    p50, p99 = result.metrics["e2e_p50_ms"], result.metrics["e2e_p99_ms"]
    ctx.log(f"{NAME}: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({len(collector.seen)}/{count} msgs)")


def fill_metrics(result: CaseResult, collector: LatencyCollector, count: int, cpu: float) -> None:
    """Turn the collector's samples into metrics and verification notes."""
    lat_ms = [ns / 1e6 for ns in collector.latencies_ns]
    result.metrics["e2e_p50_ms"] = percentile(lat_ms, 50)
    result.metrics["e2e_p99_ms"] = percentile(lat_ms, 99)
    result.metrics["e2e_max_ms"] = max(lat_ms) if lat_ms else float("nan")
    result.metrics["cpu_us_msg"] = cpu * 1e6 / max(count, 1)
    result.metrics["messages"] = float(count)
    result.verified = len(collector.seen) == count and collector.bad == 0
    if not result.verified:
        result.notes.append(
            f"verification failed: expected={count} unique={len(collector.seen)} "
            f"bad={collector.bad} consumer_errors={collector.errors}"
        )


SCENARIO = register(
    Scenario(
        name=NAME,
        description="end-to-end latency at a steady rate (1 KiB, lz4, acks=all, linger 5 ms)",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=20,
    )
)
