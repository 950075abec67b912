"""Produce then consume-with-verification throughput over the acks x size x codec matrix.

For each case: create a fresh topic, produce N pre-built values with the
confluent-kafka producer (linger.ms=5, non-idempotent), then read everything back
with an assign()-only consumer seeking to the beginning, checking count, uniqueness
and the CRC of every value. The broker's CPU time (utime+stime from /proc) is
sampled around each phase and divided by the message count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    Producer,
    TopicPartition,
)

from bench.kafka_util import (
    DeliveryTracker,
    consumer_config,
    ensure_topic,
    producer_config,
    topic_partitions,
)
from bench.payload import PayloadSet, Verifier, payload_set
from bench.procstat import own_cpu_seconds
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.stats import percentile

NAME = "throughput"
ACKS = ("1", "all")
SIZES = (100, 1024)
CODECS = ("none", "lz4")
LINGER_MS = 5
CONSUME_BATCH = 10_000
# librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000) whenever its local
# queue exceeds queued.min.messages (100k); with 100 B values that happens after two
# fetches and the pause, not the broker, would dominate the measurement.
FETCH_QUEUE_BACKOFF_MS = 5
# After assign() librdkafka may send the first Fetch for a single, possibly empty,
# partition; the broker then rightly long-polls for fetch.wait.max.ms (default 500)
# while the partitions holding data wait behind it. Data is already there in this
# scenario, so a short wait only removes that start-up stall (e2e keeps the default).
FETCH_WAIT_MAX_MS = 10
POLL_EVERY = 1024

METRICS = (
    MetricSpec("produce_msgs_s", "produce msgs/s", "msg/s", True, "{:,.0f}"),
    MetricSpec("produce_mb_s", "produce MB/s", "MB/s", True, "{:,.2f}"),
    MetricSpec("produce_p50_ms", "produce latency p50", "ms", False, "{:,.2f}"),
    MetricSpec("produce_p99_ms", "produce latency p99", "ms", False, "{:,.2f}"),
    MetricSpec("produce_cpu_us_msg", "broker CPU/msg produce", "us", False, "{:,.2f}"),
    MetricSpec("produce_client_cpu_us_msg", "client CPU/msg produce", "us", False, "{:,.2f}"),
    MetricSpec("consume_msgs_s", "consume msgs/s", "msg/s", True, "{:,.0f}"),
    MetricSpec("consume_mb_s", "consume MB/s", "MB/s", True, "{:,.2f}"),
    MetricSpec("consume_cpu_us_msg", "broker CPU/msg consume", "us", False, "{:,.2f}"),
    MetricSpec("consume_client_cpu_us_msg", "client CPU/msg consume", "us", False, "{:,.2f}"),
)

TARGETS = (
    Target("produce_msgs_s", TargetKind.RATIO_AT_LEAST, 1.0, cases="*-1KiB-lz4"),
    Target("produce_mb_s", TargetKind.RATIO_AT_LEAST, 1.0, cases="*-1KiB-lz4"),
    Target("consume_msgs_s", TargetKind.RATIO_AT_LEAST, 1.0, cases="*-1KiB-lz4"),
    Target("consume_mb_s", TargetKind.RATIO_AT_LEAST, 1.0, cases="*-1KiB-lz4"),
    Target("produce_cpu_us_msg", TargetKind.RATIO_AT_MOST, 1.5, cases="*-1KiB-lz4"),
    Target("consume_cpu_us_msg", TargetKind.RATIO_AT_MOST, 1.5, cases="*-1KiB-lz4"),
    Target("produce_msgs_s", TargetKind.RATIO_AT_LEAST, 0.8, cases="*-100B-*"),
    Target("produce_mb_s", TargetKind.RATIO_AT_LEAST, 0.8, cases="*-100B-*"),
    Target("consume_msgs_s", TargetKind.RATIO_AT_LEAST, 0.8, cases="*-100B-*"),
    Target("consume_mb_s", TargetKind.RATIO_AT_LEAST, 0.8, cases="*-100B-*"),
)


@dataclass(frozen=True)
class ThroughputCase:
    """One cell of the matrix."""

    acks: str
    size: int
    codec: str

    @property
    def name(self) -> str:
        """Return e.g. 'acks1-100B-none' or 'acksall-1KiB-lz4'."""
        size = f"{self.size // 1024}KiB" if self.size % 1024 == 0 else f"{self.size}B"
        return f"acks{self.acks}-{size}-{self.codec}"


def matrix() -> list[ThroughputCase]:
    """Return the 8 cases in a stable order (size, codec, acks)."""
    return [ThroughputCase(a, s, c) for s in SIZES for c in CODECS for a in ACKS]


@dataclass
class PhaseOutcome:
    """Timing and broker CPU for one produce or consume phase."""

    elapsed: float
    broker_cpu: float
    client_cpu: float
    messages: int
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _produce_one(producer: Producer, topic: str, value: bytes, deadline: float) -> None:
    """Enqueue one message, serving callbacks while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise TimeoutError("producer queue stayed full past the phase deadline") from None
            producer.poll(0.005)


def _flush(producer: Producer, deadline: float) -> int:
    """Flush until nothing is outstanding or the deadline passes; return what is left."""
    remaining = len(producer)
    while remaining and time.monotonic() < deadline:
        remaining = producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    return remaining


def produce_phase(
    ctx: ScenarioContext, topic: str, case: ThroughputCase, payloads: PayloadSet, **extra: object
) -> PhaseOutcome:
    """Produce every value once to the round's broker and wait for all delivery reports.

    ``extra`` overrides producer settings (e.g. ``enable.idempotence``).
    """
    return timed_produce(ctx.bootstrap, ctx.broker.cpu_seconds, topic, case, payloads,
                         ctx.config.phase_timeout(payloads.count), **extra)


def timed_produce(
    bootstrap: str,
    broker_cpu: Callable[[], float],
    topic: str,
    case: ThroughputCase,
    payloads: PayloadSet,
    timeout: float,
    **extra: object,
) -> PhaseOutcome:
    """Produce every value once to ``bootstrap`` and wait for all delivery reports.

    Args:
        broker_cpu: CPU seconds of the broker(s) so far, sampled around the phase
            (a cluster passes the sum over its brokers).
        timeout: seconds for the whole phase; what is undelivered then counts as errors.
        extra: producer settings that override the defaults.
    """
    tracker = DeliveryTracker()
    producer = Producer(
        producer_config(bootstrap, case.acks, case.codec, LINGER_MS, on_delivery=tracker,
                        **extra)
    )
    topic_partitions(producer, topic)  # connect + metadata outside the timed section
    deadline = time.monotonic() + timeout
    cpu0, own0, t0 = broker_cpu(), own_cpu_seconds(), time.perf_counter()
    for i, value in enumerate(payloads.values):
        _produce_one(producer, topic, value, deadline)
        if i % POLL_EVERY == 0:
            producer.poll(0)
    left = _flush(producer, deadline)
    elapsed, cpu1, own1 = time.perf_counter() - t0, broker_cpu(), own_cpu_seconds()
    notes = [f"{left} message(s) still undelivered at the phase deadline"] if left else []
    if tracker.errors:
        notes.append(f"{tracker.errors} delivery error(s), first: {tracker.first_error}")
    return PhaseOutcome(
        elapsed=elapsed,
        broker_cpu=cpu1 - cpu0,
        client_cpu=own1 - own0,
        messages=payloads.count,
        errors=tracker.errors + left,
        latencies=tracker.latencies,
        notes=notes,
    )


def consume_phase(
    ctx: ScenarioContext, topic: str, payloads: PayloadSet
) -> tuple[PhaseOutcome, Verifier]:
    """Read the topic from the beginning until every produced value was verified."""
    return timed_consume(ctx.bootstrap, ctx.broker.cpu_seconds, topic, payloads,
                         ctx.config.phase_timeout(payloads.count), ctx.config.idle_timeout)


def timed_consume(
    bootstrap: str,
    broker_cpu: Callable[[], float],
    topic: str,
    payloads: PayloadSet,
    timeout: float,
    idle_timeout: float,
    **extra: object,
) -> tuple[PhaseOutcome, Verifier]:
    """Read ``topic`` on ``bootstrap`` from the beginning until every produced value
    was verified (or ``timeout`` passes, or nothing arrives for ``idle_timeout``).

    ``extra``: consumer settings that override the defaults (e.g. ``security.protocol``).
    """
    verifier = Verifier(payloads.crcs)
    consumer = Consumer(
        consumer_config(
            bootstrap,
            f"bench-{topic}",
            **{
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
                **extra,
            },
        )
    )
    errors, first_error = 0, ""
    try:
        parts = topic_partitions(consumer, topic)
        deadline = time.monotonic() + timeout
        cpu0, own0, t0 = broker_cpu(), own_cpu_seconds(), time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        last_progress = time.monotonic()
        while not verifier.complete():
            now = time.monotonic()
            if now > deadline or now - last_progress > idle_timeout:
                break
            # consume() blocks until the batch is full or the timeout expires, so never
            # ask for more than is still missing (else the tail waits out the timeout).
            want = min(CONSUME_BATCH, max(1, verifier.expected - verifier.unique))
            for msg in consumer.consume(num_messages=want, timeout=0.5):
                if msg.error() is not None:
                    errors += 1
                    first_error = first_error or str(msg.error())
                    continue
                verifier.feed(msg.value())
                last_progress = now
        elapsed, cpu1, own1 = time.perf_counter() - t0, broker_cpu(), own_cpu_seconds()
    finally:
        consumer.close()
    notes = [f"{errors} consumer error(s), first: {first_error}"] if errors else []
    outcome = PhaseOutcome(
        elapsed=elapsed,
        broker_cpu=cpu1 - cpu0,
        client_cpu=own1 - own0,
        messages=verifier.unique,
        errors=errors,
        notes=notes,
    )
    return outcome, verifier


def _rate_metrics(prefix: str, phase: PhaseOutcome, size: int) -> dict[str, float]:
    """Return msgs/s, MB/s and broker CPU us/msg for a phase."""
    secs = max(phase.elapsed, 1e-9)
    msgs = max(phase.messages, 1)
    return {
        f"{prefix}_msgs_s": phase.messages / secs,
        f"{prefix}_mb_s": phase.messages * size / secs / 1e6,
        f"{prefix}_cpu_us_msg": phase.broker_cpu * 1e6 / msgs,
        f"{prefix}_client_cpu_us_msg": phase.client_cpu * 1e6 / msgs,
    }


def run_case(ctx: ScenarioContext, case: ThroughputCase) -> CaseResult:
    """Run produce then consume for one case and return its metrics."""
    result = ctx.new_result(NAME, case.name)
    payloads = payload_set(ctx.config.count_for(case.size), case.size)
    topic = ctx.topic_name(NAME, case.name)
    result.notes.extend(ensure_topic(ctx.bootstrap, topic, ctx.config.partitions))
    produced = produce_phase(ctx, topic, case, payloads)
    consumed, verifier = consume_phase(ctx, topic, payloads)
    result.metrics.update(_rate_metrics("produce", produced, case.size))
    result.metrics["produce_p50_ms"] = percentile(produced.latencies, 50) * 1e3
    result.metrics["produce_p99_ms"] = percentile(produced.latencies, 99) * 1e3
    result.metrics.update(_rate_metrics("consume", consumed, case.size))
    result.metrics["messages"] = float(payloads.count)
    result.verified = verifier.ok() and produced.errors == 0
    result.notes.extend(produced.notes + consumed.notes)
    if not verifier.ok():
        result.notes.append(f"verification failed: {verifier.summary()}")
    ctx.log(
        f"{NAME} {case.name}: produce {result.metrics['produce_msgs_s']:,.0f} msg/s, "
        f"consume {result.metrics['consume_msgs_s']:,.0f} msg/s, "
        f"{'verified' if result.verified else 'NOT VERIFIED'} ({payloads.count} msgs)"
    )
    return result


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """Run every selected case of the matrix on the current broker."""
    results: list[CaseResult] = []
    for case in matrix():
        if not ctx.case_selected(case.name):
            continue
        try:
            results.append(run_case(ctx, case))
        except Exception as exc:  # noqa: BLE001 - record and continue with the next case
            failed = ctx.new_result(NAME, case.name)
            failed.error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"{NAME} {case.name}: ERROR {failed.error}")
            results.append(failed)
            if not ctx.broker.alive():
                ctx.log("broker died; skipping the remaining cases this round")
                break
    return results


SCENARIO = register(
    Scenario(
        name=NAME,
        description="produce + verified consume, acks {1,all} x {100 B, 1 KiB} x {none, lz4}",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=10,
    )
)
