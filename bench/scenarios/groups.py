"""Consumer-group consume (3 members) and an idempotent-producer run (issue 3).

- ``idempotent-1KiB-lz4``: the throughput produce phase with
  enable.idempotence=true (acks=all, as idempotence requires), then a verified
  assign()-only read.
- ``group3-1KiB-lz4``: produce to a 6-partition topic, then three consumers in
  one group subscribe() at once (each in its own thread; librdkafka releases the
  GIL) and read until every value is verified exactly once between them. The
  time includes the join/sync rebalance, as a real group start does.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer

from bench.kafka_util import consumer_config, ensure_topic
from bench.payload import PayloadSet, Verifier, payload_set
from bench.procstat import own_cpu_seconds
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec
from bench.scenarios.throughput import (
    CONSUME_BATCH,
    PhaseOutcome,
    ThroughputCase,
    _rate_metrics,
    consume_phase,
    produce_phase,
)

NAME = "groups"
SIZE = 1024
MEMBERS = 3
GROUP_PARTITIONS = 6

METRICS = (
    MetricSpec("produce_msgs_s", "produce msgs/s", "msg/s", True, "{:,.0f}"),
    MetricSpec("produce_cpu_us_msg", "broker CPU/msg produce", "us", False, "{:,.2f}"),
    MetricSpec("consume_msgs_s", "consume msgs/s", "msg/s", True, "{:,.0f}"),
    MetricSpec("consume_mb_s", "consume MB/s", "MB/s", True, "{:,.2f}"),
    MetricSpec("consume_cpu_us_msg", "broker CPU/msg consume", "us", False, "{:,.2f}"),
)


def _group_consume(ctx: ScenarioContext, topic: str, payloads: PayloadSet) -> tuple[PhaseOutcome,
                                                                                    Verifier]:
    verifier = Verifier(payloads.crcs)
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []
    group = f"bench-group-{topic}"

    def member() -> None:
        consumer = Consumer(consumer_config(ctx.bootstrap, group, **{"fetch.wait.max.ms": 10}))
        try:
            consumer.subscribe([topic])
            while not stop.is_set():
                for msg in consumer.consume(num_messages=CONSUME_BATCH, timeout=0.2):
                    if msg.error() is not None:
                        errors.append(str(msg.error()))
                        continue
                    with lock:
                        verifier.feed(msg.value())
                        if verifier.complete():
                            stop.set()
        finally:
            consumer.close()

    deadline = time.monotonic() + ctx.config.phase_timeout(payloads.count)
    cpu0, own0, t0 = ctx.broker.cpu_seconds(), own_cpu_seconds(), time.perf_counter()
    threads = [threading.Thread(target=member, daemon=True) for _ in range(MEMBERS)]
    for t in threads:
        t.start()
    while not stop.wait(0.1):
        if time.monotonic() > deadline:
            stop.set()
    elapsed, cpu1, own1 = time.perf_counter() - t0, ctx.broker.cpu_seconds(), own_cpu_seconds()
    for t in threads:
        t.join(timeout=30)
    notes = [f"{len(errors)} consume error(s), first: {errors[0]}"] if errors else []
    return PhaseOutcome(elapsed, cpu1 - cpu0, own1 - own0, payloads.count, len(errors),
                        notes=notes), verifier


def _case(ctx: ScenarioContext, name: str, partitions: int, idempotent: bool) -> CaseResult:
    result = ctx.new_result(NAME, name)
    payloads = payload_set(ctx.config.count_for(SIZE), SIZE)
    topic = ctx.topic_name(NAME, name)
    result.notes.extend(ensure_topic(ctx.bootstrap, topic, partitions))
    case = ThroughputCase("all" if idempotent else "1", SIZE, "lz4")
    extra = {"enable.idempotence": True} if idempotent else {}
    produced = produce_phase(ctx, topic, case, payloads, **extra)
    if idempotent:
        consumed, verifier = consume_phase(ctx, topic, payloads)
    else:
        consumed, verifier = _group_consume(ctx, topic, payloads)
    result.metrics.update(_rate_metrics("produce", produced, SIZE))
    result.metrics.update(_rate_metrics("consume", consumed, SIZE))
    result.verified = verifier.ok() and produced.errors == 0 and consumed.errors == 0
    result.notes.extend(produced.notes + consumed.notes)
    if not verifier.ok():
        result.notes.append(f"verification failed: {verifier.summary()}")
    ctx.log(f"{NAME} {name}: produce {result.metrics['produce_msgs_s']:,.0f} msg/s, consume "
            f"{result.metrics['consume_msgs_s']:,.0f} msg/s, "
            f"{'verified' if result.verified else 'NOT VERIFIED'}")
    return result


def run(ctx: ScenarioContext) -> list[CaseResult]:
    results: list[CaseResult] = []
    for name, partitions, idempotent in (("idempotent-1KiB-lz4", ctx.config.partitions, True),
                                         ("group3-1KiB-lz4", GROUP_PARTITIONS, False)):
        if not ctx.case_selected(name):
            continue
        try:
            results.append(_case(ctx, name, partitions, idempotent))
        except Exception as exc:  # noqa: BLE001 - record and continue
            failed = ctx.new_result(NAME, name)
            failed.error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"{NAME} {name}: ERROR {failed.error}")
            results.append(failed)
    return results


SCENARIO = register(Scenario(
    name=NAME,
    description="idempotent producer, and a 3-member consumer group over 6 partitions",
    run=run, metrics=METRICS, order=30))
