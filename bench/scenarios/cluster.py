"""Cluster mode (issue 7): three brokers with RF 3 and acks=all against one broker
with RF 1, and leader failover after a crash (SIGKILL) and after a controlled
shutdown (SIGTERM). tierd only - Tansu has no cluster here, so its rounds report
nothing and the figures to read are tierd's RF 3 / RF 1 ratio and failover times.

In each round:

1. RF 1: the round's own (standalone) tierd, before the cluster exists so that
   nothing else competes for the two cores: produce the workload (acks=all,
   linger 5 ms, as many values as the throughput case of that size) and take
   msgs/s, broker CPU per message and the delivery latency p50/p99.
2. A fresh ZooKeeper and three nodes (:mod:`bench.cluster`).
3. RF 3: the same workload to a topic with replication factor 3 and
   min.insync.replicas 2; broker CPU is the sum over the three brokers.
4. Failover, on a one-partition RF 3 topic, once per signal: with every replica in
   the ISR, deliver one record (the producer is connected to the leader), send the
   leader SIGKILL or SIGTERM, then produce one record at a time (acks=all, each
   waited for) until a record produced after the old leader's process was gone is
   delivered. The failover time runs from the signal to the first delivery of a
   record written by the new leader: after the round's last failover the topic is
   read back, and a record counts as the new leader's when its batch carries a
   higher leader epoch than the record before the signal. (A controlled shutdown hands leadership over
   while the old leader still answers, so the first delivery after a SIGTERM is
   often the old leader's.) The read-back also checks that every acknowledged
   record survived. The node is restarted on the same port and data; the next
   failover starts once it is back in the ISR.

Targets: RF 3 msgs/s >= 0.5x RF 1 (three brokers share two cores with the client);
failover p99 <= zookeeper.session.timeout.ms + 1 s after a kill, <= 1 s after a
controlled shutdown. Everything started here is stopped before ``run`` returns.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from bench.cluster import QUIET_LOG_LEVEL, SESSION_TIMEOUT_MS, Cluster, running_cluster, wait_for
from bench.kafka_util import consumer_config, ensure_topic, producer_config
from bench.payload import make_value, parse_header, payload_set
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.throughput import PhaseOutcome, ThroughputCase, timed_produce
from bench.stats import percentile, ratio

NAME = "cluster"
KILL_TARGET_MS = SESSION_TIMEOUT_MS + 1000
SHUTDOWN_TARGET_MS = 1000
# Failovers per signal per round, before --scale (which can only lower it, to 2).
FAILOVERS = 10
# (value size, codec) of the produce workloads; as many values as a throughput
# case of that size (--large-count / --small-count, --scale).
WORKLOADS = ((1024, "lz4"), (100, "none"))
FAILOVER_VALUE_SIZE = 100
# A failover that takes longer than this is an error, not a measurement.
FAILOVER_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.01
READ_BACK_BATCH = 1000
# The failover producer: librdkafka's own backoffs (retries grow to 1 s, reconnects
# to 10 s) are capped at 100 ms, and while a leader is down it looks the partition
# up again only on a 1 s timer unless metadata is refreshed anyway: every 100 ms
# here. The figure is then the cluster's failover plus at most ~0.1 s of client.
FAILOVER_PRODUCER = {
    "log_level": QUIET_LOG_LEVEL,
    "message.timeout.ms": int(FAILOVER_TIMEOUT_S * 1000),
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 100,
}

PRODUCE, FAILOVER = "produce-*", "failover-*"
METRICS = (
    MetricSpec("rf1_msgs_s", "RF 1 produce msgs/s", "msg/s", True, "{:,.0f}", PRODUCE),
    MetricSpec("rf3_msgs_s", "RF 3 produce msgs/s", "msg/s", True, "{:,.0f}", PRODUCE),
    MetricSpec("rf3_rf1_ratio", "RF 3 / RF 1 msgs/s", "x", True, "{:,.3f}", PRODUCE),
    MetricSpec("rf1_cpu_us_msg", "RF 1 broker CPU/msg", "us", False, "{:,.2f}", PRODUCE),
    MetricSpec("rf3_cpu_us_msg", "RF 3 broker CPU/msg (sum of 3)", "us", False, "{:,.2f}",
               PRODUCE),
    MetricSpec("rf1_p50_ms", "RF 1 produce p50", "ms", False, "{:,.2f}", PRODUCE),
    MetricSpec("rf1_p99_ms", "RF 1 produce p99", "ms", False, "{:,.2f}", PRODUCE),
    MetricSpec("rf3_p50_ms", "RF 3 produce p50", "ms", False, "{:,.2f}", PRODUCE),
    MetricSpec("rf3_p99_ms", "RF 3 produce p99", "ms", False, "{:,.2f}", PRODUCE),
    MetricSpec("failover_p50_ms", "failover p50", "ms", False, "{:,.0f}", FAILOVER),
    MetricSpec("failover_p99_ms", "failover p99", "ms", False, "{:,.0f}", FAILOVER),
    MetricSpec("failover_max_ms", "failover max", "ms", False, "{:,.0f}", FAILOVER),
    MetricSpec("failovers", "failovers measured", "n", True, "{:,.0f}", FAILOVER),
    MetricSpec("controller_failovers", "of which the controller's", "n", False, "{:,.0f}",
               FAILOVER),
    MetricSpec("rejoin_p50_s", "restart to back in ISR p50", "s", False, "{:,.2f}", FAILOVER),
)

TARGETS = (
    Target("rf3_rf1_ratio", TargetKind.ABSOLUTE_AT_LEAST, 0.5, cases=PRODUCE, unit="x"),
    Target("failover_p99_ms", TargetKind.ABSOLUTE_AT_MOST, KILL_TARGET_MS,
           cases="failover-sigkill", unit="ms"),
    Target("failover_p99_ms", TargetKind.ABSOLUTE_AT_MOST, SHUTDOWN_TARGET_MS,
           cases="failover-sigterm", unit="ms"),
)

FAILOVER_SIGNALS = {"failover-sigkill": signal.SIGKILL, "failover-sigterm": signal.SIGTERM}


# -- produce: RF 1 vs RF 3 ---------------------------------------------------------


def workload_case(size: int, codec: str) -> str:
    """Return e.g. 'produce-1KiB-lz4' or 'produce-100B-none'."""
    label = f"{size // 1024}KiB" if size % 1024 == 0 else f"{size}B"
    return f"produce-{label}-{codec}"


def record_produce(result: CaseResult, prefix: str, phase: PhaseOutcome) -> None:
    """Store msgs/s, broker CPU/msg and latency percentiles of one produce phase."""
    if phase.errors:
        result.verified = False
        result.notes.extend(f"{prefix}: {note}" for note in phase.notes)
    msgs = max(phase.messages, 1)
    result.metrics[f"{prefix}_msgs_s"] = phase.messages / max(phase.elapsed, 1e-9)
    result.metrics[f"{prefix}_cpu_us_msg"] = phase.broker_cpu * 1e6 / msgs
    result.metrics[f"{prefix}_p50_ms"] = percentile(phase.latencies, 50) * 1e3
    result.metrics[f"{prefix}_p99_ms"] = percentile(phase.latencies, 99) * 1e3
    result.metrics["messages"] = float(phase.messages)


def produce_rf1(ctx: ScenarioContext, size: int, codec: str, count: int,
                result: CaseResult) -> None:
    """The workload on the round's own broker, to a topic with one replica."""
    payloads = payload_set(count, size)
    topic = ctx.topic_name(NAME, f"{result.case}-rf1")
    result.notes.extend(ensure_topic(ctx.bootstrap, topic, ctx.config.partitions))
    phase = timed_produce(ctx.bootstrap, ctx.broker.cpu_seconds, topic,
                          ThroughputCase("all", size, codec), payloads,
                          ctx.config.phase_timeout(count))
    record_produce(result, "rf1", phase)


def produce_rf3(ctx: ScenarioContext, cluster: Cluster, size: int, codec: str, count: int,
                result: CaseResult) -> None:
    """The same workload on the cluster, to a topic with three replicas."""
    payloads = payload_set(count, size)
    topic = ctx.topic_name(NAME, f"{result.case}-rf3")
    cluster.create_topic(topic, ctx.config.partitions)
    phase = timed_produce(cluster.bootstrap, cluster.cpu_seconds, topic,
                          ThroughputCase("all", size, codec), payloads,
                          ctx.config.phase_timeout(count))
    record_produce(result, "rf3", phase)
    m = result.metrics  # RF 1 ran first on the round's broker (see run)
    m["rf3_rf1_ratio"] = ratio(m["rf3_msgs_s"], m["rf1_msgs_s"])
    ctx.log(f"{NAME} {result.case}: RF 3 {m['rf3_msgs_s']:,.0f} msg/s vs RF 1 "
            f"{m['rf1_msgs_s']:,.0f} ({m['rf3_rf1_ratio']:.2f}x), broker CPU/msg "
            f"{m['rf3_cpu_us_msg']:.1f} vs {m['rf1_cpu_us_msg']:.1f} us")


# -- failover ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """One acknowledged record: when (monotonic), where, and which value."""

    at: float
    offset: int
    seq: int


@dataclass(slots=True)
class Failover:
    """One signal: when it was sent, the last delivery before it, those after it."""

    signalled: float
    before: Delivery
    after: list[Delivery] = field(default_factory=list)


class Sender:
    """One acks=all record at a time, each waited for; deliveries timestamped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(producer_config(bootstrap, "all", "none", 0,
                                                 **FAILOVER_PRODUCER))
        self.sent = 0
        self.failed = 0
        self.first_error = ""

    def send(self, deadline: float) -> Delivery | None:
        """Produce one record and wait for its report: the delivery, or None if it
        failed. TimeoutError if neither happened by ``deadline``."""
        outcome: list[tuple[KafkaError | None, float, int]] = []

        def report(err: KafkaError | None, msg: Message) -> None:
            offset = msg.offset()
            outcome.append((err, time.monotonic(), -1 if offset is None else offset))

        seq = self.sent
        self.producer.produce(self.topic, make_value(seq, FAILOVER_VALUE_SIZE),
                              on_delivery=report)
        self.sent += 1
        while not outcome:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no delivery report for a record to {self.topic}")
            self.producer.poll(POLL_INTERVAL_S)
        err, at, offset = outcome[0]
        if err is None:
            return Delivery(at, offset, seq)
        self.failed += 1
        self.first_error = self.first_error or str(err)
        return None

    def deliver(self, deadline: float) -> Delivery:
        """Send records until one is delivered; return that delivery."""
        while (delivery := self.send(deadline)) is None:
            pass
        return delivery


def signal_leader(cluster: Cluster, sender: Sender, leader: int,
                  signum: signal.Signals) -> Failover:
    """Signal ``leader`` and keep delivering until a record produced after its
    process was gone is acknowledged (that one cannot be the old leader's)."""
    before = sender.deliver(time.monotonic() + FAILOVER_TIMEOUT_S)
    failover = Failover(time.monotonic(), before)
    node = cluster.nodes[leader]
    node.send_signal(signum)
    deadline = failover.signalled + FAILOVER_TIMEOUT_S
    while True:
        gone = not node.alive()
        failover.after.append(sender.deliver(deadline))
        if gone:
            return failover


def leader_epochs(bootstrap: str, topic: str, last_offset: int) -> dict[int, tuple[int, int]]:
    """Read partition 0 up to ``last_offset``: offset -> (batch leader epoch, seq)."""
    consumer = Consumer(consumer_config(bootstrap, f"bench-{topic}",
                                        **{"fetch.wait.max.ms": 10}))
    found: dict[int, tuple[int, int]] = {}
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while last_offset not in found and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=READ_BACK_BATCH, timeout=0.5):
                offset, value, epoch = msg.offset(), msg.value(), msg.leader_epoch()
                if msg.error() is None and offset is not None and value is not None:
                    found[offset] = (-1 if epoch is None else epoch, parse_header(value)[0])
    finally:
        consumer.close()
    return found


def failover_times(failovers: list[Failover], epochs: dict[int, tuple[int, int]],
                   result: CaseResult) -> list[float]:
    """Seconds from each signal to the first delivery stamped with a newer leader
    epoch; acknowledged records missing or changed in ``epochs`` fail verification."""
    times = []
    for f in failovers:
        for d in [f.before, *f.after]:
            read = epochs.get(d.offset)
            if read is None or read[1] != d.seq:
                result.verified = False
                result.notes.append(f"acknowledged record {d.seq} at offset {d.offset} "
                                    f"not read back")
        old_epoch = epochs.get(f.before.offset, (-1, 0))[0]
        first = next((d for d in f.after if epochs.get(d.offset, (-1, 0))[0] > old_epoch),
                     None)
        if first is None:
            raise RuntimeError(f"no delivery after a signal carries a leader epoch above "
                               f"{old_epoch} (epochs unknown to the client?)")
        times.append(first.at - f.signalled)
    return times


def measure_failovers(ctx: ScenarioContext, cluster: Cluster, signum: signal.Signals,
                      count: int, result: CaseResult, samples: list[Failover]) -> None:
    """``count`` times: signal the leader of a one-partition RF 3 topic and keep
    producing until the new one acknowledges (into ``samples``); restart the node and
    wait for a full ISR. The failover times come later, from :func:`score_failovers`."""
    topic = ctx.topic_name(NAME, result.case)
    cluster.create_topic(topic, 1)
    sender = Sender(cluster.bootstrap, topic)
    rejoins: list[float] = []
    controller_hits = 0
    for _ in range(count):
        wait_for(f"{topic} fully in sync", lambda: cluster.in_sync(topic))
        leader, _, controller = cluster.partition(topic)
        samples.append(signal_leader(cluster, sender, leader, signum))
        controller_hits += leader == controller
        rejoins.append(cluster.restart(leader, topic))
    sender.producer.flush(FAILOVER_TIMEOUT_S)
    result.metrics["controller_failovers"] = float(controller_hits)
    result.metrics["rejoin_p50_s"] = percentile(rejoins, 50)
    if sender.failed:
        result.notes.append(f"{sender.failed} of {sender.sent} records failed during "
                            f"failovers (retried with new records), first: {sender.first_error}")


def score_failovers(ctx: ScenarioContext, cluster: Cluster, samples: list[Failover],
                    result: CaseResult) -> None:
    """Read the case's topic back and turn ``samples`` into failover times.

    Runs after every failover case of the round: the read-back consumer needs a
    group.id, and librdkafka's FindCoordinator for it makes the cluster create
    __consumer_offsets (50 partitions), which a controlled shutdown would then have
    to move too. Measured first, every failover sees only the bench's own topics.
    """
    topic = ctx.topic_name(NAME, result.case)
    epochs = leader_epochs(cluster.bootstrap, topic, samples[-1].after[-1].offset)
    times = failover_times(samples, epochs, result)
    m = result.metrics
    m["failover_p50_ms"] = percentile(times, 50) * 1e3
    m["failover_p99_ms"] = percentile(times, 99) * 1e3
    m["failover_max_ms"] = max(times) * 1e3
    m["failovers"] = float(len(times))
    result.notes.append("failover times (ms): " + ", ".join(f"{t * 1e3:.0f}" for t in times))
    ctx.log(f"{NAME} {result.case}: {len(times)} failovers, p50 {m['failover_p50_ms']:.0f} ms, "
            f"p99 {m['failover_p99_ms']:.0f} ms, max {m['failover_max_ms']:.0f} ms "
            f"({m['controller_failovers']:.0f} of the controller)")


# -- the round ---------------------------------------------------------------------


def guarded(ctx: ScenarioContext, result: CaseResult, fn: Callable[..., None],
            *args: object) -> bool:
    """Run one measurement, ``fn(*args)``; an exception becomes the case's error.
    Returns True if it completed."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - record and go on with the next case
        result.error = f"{type(exc).__name__}: {exc}"
        ctx.log(f"{NAME} {result.case}: ERROR {result.error}")
        return False
    return True


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """RF 1 on the round's broker, then RF 3 and failovers on a fresh cluster; nothing
    on Tansu (it has no cluster here)."""
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no cluster mode here)")
        return []
    config = ctx.config
    workloads = {workload_case(size, codec): (size, codec, config.count_for(size))
                 for size, codec in WORKLOADS}
    results = {case: ctx.new_result(NAME, case)
               for case in [*workloads, *FAILOVER_SIGNALS] if ctx.case_selected(case)}
    if not results:
        return []
    # RF 1 first, while the cluster does not exist yet to compete for the cores.
    pending = {case for case, result in results.items()
               if case not in workloads or guarded(ctx, result, produce_rf1, ctx,
                                                   *workloads[case], result)}
    failovers = max(2, round(FAILOVERS * min(1.0, config.scale)))
    samples: dict[str, list[Failover]] = {case: [] for case in FAILOVER_SIGNALS}
    log_dir = config.log_dir / f"cluster-round{ctx.round + 1}"
    try:
        with running_cluster(config, log_dir) as cluster:
            measured = []
            for case in [c for c in results if c in pending]:
                result = results[case]
                if case in workloads:
                    guarded(ctx, result, produce_rf3, ctx, cluster, *workloads[case], result)
                elif guarded(ctx, result, measure_failovers, ctx, cluster,
                             FAILOVER_SIGNALS[case], failovers, result, samples[case]):
                    measured.append(case)
                    continue
                pending.discard(case)
            for case in measured:  # read-backs last: see score_failovers
                guarded(ctx, results[case], score_failovers, ctx, cluster, samples[case],
                        results[case])
                pending.discard(case)
    except Exception as exc:  # noqa: BLE001 - the cluster failed to start or broke down
        error = f"cluster: {type(exc).__name__}: {exc}"
        ctx.log(f"{NAME}: ERROR {error}")
        for case in pending:
            results[case].error = error
    return list(results.values())


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: 3 brokers RF 3 acks=all vs 1 broker RF 1 (1 KiB lz4, 100 B); "
        "leader failover after SIGKILL and SIGTERM",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=40,
    )
)
