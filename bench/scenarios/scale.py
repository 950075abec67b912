"""Thousands of partitions (issue 22): three brokers with RF 3, min.insync.replicas 2
and ``zookeeper.session.timeout.ms`` 6000, at 1,000 / 2,000 / 4,000 partitions
(20 topics each). tierd only - Tansu has no cluster here.

In each case, on a fresh ZooKeeper and three fresh nodes:

1. Create the 20 topics and time until every partition is led with a full ISR
   on every node's Metadata.
2. Idle: broker CPU per node over ``IDLE_S`` with no client at all.
3. One-partition acks=all produce (librdkafka, one record at a time, each
   waited for) while the cluster is otherwise idle: p50 / p99.
4. Full Metadata (every topic) from one client: median and max latency.
5. The burst: one acks=all record to each partition (idempotent, linger 5 ms,
   sent at once); delivery latency p50 / p99 / max and records still not
   delivered after ``BURST_TIMEOUT_S``.
6. RSS per node, and per partition replica.
7. Failover: SIGKILL the node (not the controller) leading most partitions;
   time until every partition is led by a live node (Metadata of the
   survivors). Then restart it and time until it is back in every ISR
   (rejoin), and wait until leadership is balanced again (the preferred
   leader election runs every ``REBALANCE_S``).
8. Controlled shutdown: SIGTERM the node (not the controller) leading most
   partitions; time until it has exited (it moves its leadership away
   first), then check every partition is led by a survivor. Restarted and
   balanced again.
9. Controller failover: SIGKILL the controller; time until a survivor is
   controller and every partition is led by a survivor.

The longest event-loop stall is read from the nodes' logs ("event loop
stalled by one task step", the loop monitor's warning) from step 2 on.

Targets at 2,000 partitions (issue 22): burst delivered within 2 s; idle <=
0.03 core per node; no stall over 20 ms; one-partition p99 <= 20 ms; full
Metadata <= 100 ms; failover <= session timeout + 5 s; controlled shutdown
<= 10 s; controller failover <= session timeout + 10 s; rejoin <= 30 s.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster import QUIET_LOG_LEVEL, Cluster, running_cluster, wait_for
from bench.kafka_util import base_config
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.stats import percentile

NAME = "scale"
SIZES = (1000, 2000, 4000)
TOPICS = 20
SESSION_TIMEOUT_MS = 6000
# The loop monitor logs steps from 10 ms (its default is 25), so the longest
# stall is seen against the 20 ms target.
# Leadership goes back to the preferred replicas soon after a rejoin, so the
# next step stops a node that leads its share.
REBALANCE_S = 5
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
             "replica.lag.time.max.ms": "10000", "tierd.event.loop.stall.ms": "10",
             "auto.leader.rebalance.enable": "true",
             "leader.imbalance.check.interval.seconds": str(REBALANCE_S)}
IDLE_S = 10.0
SINGLE_RECORDS = 300
METADATA_REQUESTS = 10
BURST_TIMEOUT_S = 60.0
# Creating, electing and syncing thousands of partitions on a loaded 2-core machine.
CREATE_TIMEOUT_S = 300.0
VALUE = b"x" * 100
_STALL = re.compile(r"event loop stalled by one task step .*?ms=([0-9.]+)")

CASES = "partitions-*"
METRICS = (
    MetricSpec("create_s", "created, led and in sync", "s", False, "{:,.1f}", CASES),
    MetricSpec("idle_core", "idle CPU per broker", "core", False, "{:,.3f}", CASES),
    MetricSpec("max_stall_ms", "longest event-loop stall", "ms", False, "{:,.0f}", CASES),
    MetricSpec("single_p50_ms", "one-partition acks=all p50", "ms", False, "{:,.1f}", CASES),
    MetricSpec("single_p99_ms", "one-partition acks=all p99", "ms", False, "{:,.1f}", CASES),
    MetricSpec("metadata_ms", "full Metadata median", "ms", False, "{:,.0f}", CASES),
    MetricSpec("metadata_max_ms", "full Metadata max", "ms", False, "{:,.0f}", CASES),
    MetricSpec("burst_p50_s", "burst delivery p50", "s", False, "{:,.2f}", CASES),
    MetricSpec("burst_p99_s", "burst delivery p99", "s", False, "{:,.2f}", CASES),
    MetricSpec("burst_max_s", "burst delivered (max)", "s", False, "{:,.2f}", CASES),
    MetricSpec("burst_undelivered", "burst records undelivered", "n", False, "{:,.0f}", CASES),
    MetricSpec("rss_mb", "RSS per broker", "MB", False, "{:,.0f}", CASES),
    MetricSpec("rss_kb_replica", "RSS per partition replica", "KB", False, "{:,.1f}", CASES),
    MetricSpec("failover_s", "all led elsewhere after SIGKILL", "s", False, "{:,.1f}", CASES),
    MetricSpec("rejoin_s", "restarted broker back in every ISR", "s", False, "{:,.1f}", CASES),
    MetricSpec("shutdown_s", "controlled shutdown (SIGTERM to exit)", "s", False, "{:,.1f}",
               CASES),
    MetricSpec("controller_failover_s", "all led after the controller's SIGKILL", "s", False,
               "{:,.1f}", CASES),
)
AT_2000 = "partitions-2000"
TARGETS = (
    Target("burst_max_s", TargetKind.ABSOLUTE_AT_MOST, 2.0, cases=AT_2000, unit="s"),
    Target("idle_core", TargetKind.ABSOLUTE_AT_MOST, 0.03, cases=AT_2000, unit="core"),
    Target("max_stall_ms", TargetKind.ABSOLUTE_AT_MOST, 20.0, cases=AT_2000, unit="ms"),
    Target("single_p99_ms", TargetKind.ABSOLUTE_AT_MOST, 20.0, cases=AT_2000, unit="ms"),
    Target("metadata_max_ms", TargetKind.ABSOLUTE_AT_MOST, 100.0, cases=AT_2000, unit="ms"),
    Target("failover_s", TargetKind.ABSOLUTE_AT_MOST, SESSION_TIMEOUT_MS / 1000 + 5,
           cases=CASES, unit="s"),
    Target("rejoin_s", TargetKind.ABSOLUTE_AT_MOST, 30.0, cases=CASES, unit="s"),
    Target("shutdown_s", TargetKind.ABSOLUTE_AT_MOST, 10.0, cases=CASES, unit="s"),
    Target("controller_failover_s", TargetKind.ABSOLUTE_AT_MOST, SESSION_TIMEOUT_MS / 1000 + 10,
           cases=CASES, unit="s"),
)


def topic_names(partitions: int) -> dict[str, int]:
    per, extra = divmod(partitions, TOPICS)
    return {f"scale-{i}": per + (1 if i < extra else 0) for i in range(TOPICS)}


def fully_led(admin: AdminClient, topics: dict[str, int], live: set[int],
              full_isr: bool) -> bool:
    meta = admin.list_topics(timeout=10)
    for name, count in topics.items():
        info = meta.topics.get(name)
        if info is None or info.error is not None or len(info.partitions) != count:
            return False
        for p in info.partitions.values():
            if p.leader not in live or (full_isr and sorted(p.isrs) != sorted(live)):
                return False
    return True


def create(cluster: Cluster, topics: dict[str, int]) -> float:
    started = time.monotonic()
    futures = cluster.admin.create_topics(
        [NewTopic(name, count, 3, config={"min.insync.replicas": "2"})
         for name, count in topics.items()],
        operation_timeout=CREATE_TIMEOUT_S, request_timeout=CREATE_TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=CREATE_TIMEOUT_S)
    wait_for("every partition led with a full ISR",
             lambda: fully_led(cluster.admin, topics, set(cluster.nodes), True),
             CREATE_TIMEOUT_S)
    return time.monotonic() - started


def idle_core(cluster: Cluster) -> float:
    before = cluster.cpu_seconds()
    time.sleep(IDLE_S)
    return (cluster.cpu_seconds() - before) / IDLE_S / len(cluster.nodes)


def single_partition(bootstrap: str) -> list[float]:
    producer = Producer({**base_config(bootstrap), "acks": "all", "linger.ms": 0,
                         "log_level": QUIET_LOG_LEVEL})
    latencies = []
    for _ in range(SINGLE_RECORDS):
        started = time.monotonic()
        producer.produce("scale-0", VALUE, partition=0)
        if producer.flush(30) != 0:
            raise TimeoutError("a one-partition record was not delivered in 30 s")
        latencies.append(time.monotonic() - started)
    return latencies


def metadata_latencies(bootstrap: str) -> list[float]:
    admin = AdminClient({**base_config(bootstrap), "log_level": QUIET_LOG_LEVEL})
    out = []
    for _ in range(METADATA_REQUESTS):
        started = time.monotonic()
        admin.list_topics(timeout=30)
        out.append(time.monotonic() - started)
    return out


def burst(bootstrap: str, topics: dict[str, int]) -> tuple[list[float], int]:
    """One acks=all record to every partition; (delivery latencies, undelivered)."""
    producer = Producer({**base_config(bootstrap), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "log_level": QUIET_LOG_LEVEL})
    producer.list_topics(timeout=30)
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(sent: float) -> Callable[[object, object], None]:
        def callback(err: object, _msg: object) -> None:
            if err is None:
                latencies.append(time.monotonic() - sent)
            else:
                errors.append(str(err))
        return callback

    total = sum(topics.values())
    for name, count in topics.items():
        for partition in range(count):
            producer.produce(name, VALUE, partition=partition,
                             on_delivery=delivered(time.monotonic()))
    deadline = time.monotonic() + BURST_TIMEOUT_S
    while len(latencies) + len(errors) < total and time.monotonic() < deadline:
        producer.poll(0.01)
    if errors:
        raise RuntimeError(f"burst: {len(errors)} failed deliveries, first: {errors[0]}")
    return latencies, total - len(latencies)


def leader_counts(admin: AdminClient) -> dict[int, int]:
    counts: dict[int, int] = {}
    for info in admin.list_topics(timeout=10).topics.values():
        for p in info.partitions.values():
            counts[p.leader] = counts.get(p.leader, 0) + 1
    return counts


def controller_id(admin: AdminClient) -> int:
    return int(admin.list_topics(timeout=10).controller_id)


def busiest(cluster: Cluster) -> int:
    """The node, other than the controller, that leads most partitions."""
    counts = leader_counts(cluster.admin)
    controller = controller_id(cluster.admin)
    return max((n for n in cluster.nodes if n != controller), key=lambda n: counts.get(n, 0))


def survivors_admin(cluster: Cluster, victim: int) -> AdminClient:
    return AdminClient({**base_config(",".join(
        cluster.nodes[n].bootstrap for n in cluster.nodes if n != victim)),
        "log_level": QUIET_LOG_LEVEL})


def rejoin(cluster: Cluster, victim: int, topics: dict[str, int]) -> float:
    """Restart ``victim``; seconds until it is back in every ISR. Then waits
    until every node leads a fair share again (preferred leader election)."""
    cluster.nodes[victim].wait_exit(30)
    restarted = time.monotonic()
    cluster.nodes[victim].start()
    wait_for("the restarted node back in every ISR",
             lambda: fully_led(cluster.admin, topics, set(cluster.nodes), True), CREATE_TIMEOUT_S)
    took = time.monotonic() - restarted
    share = sum(topics.values()) / len(cluster.nodes)
    wait_for("leadership balanced again",
             lambda: min(leader_counts(cluster.admin).get(n, 0) for n in cluster.nodes)
             >= 0.8 * share, CREATE_TIMEOUT_S)
    return took


def failover_and_rejoin(cluster: Cluster, topics: dict[str, int]) -> tuple[float, float]:
    victim = busiest(cluster)
    survivors = set(cluster.nodes) - {victim}
    admin = survivors_admin(cluster, victim)
    killed = time.monotonic()
    cluster.nodes[victim].send_signal(signal.SIGKILL)
    wait_for("every partition led by a survivor",
             lambda: fully_led(admin, topics, survivors, False), CREATE_TIMEOUT_S)
    failover = time.monotonic() - killed
    return failover, rejoin(cluster, victim, topics)


def controlled_shutdown(cluster: Cluster, topics: dict[str, int]) -> float:
    """SIGTERM the busiest node: seconds until it exited; every partition must
    then be led by a survivor."""
    victim = busiest(cluster)
    survivors = set(cluster.nodes) - {victim}
    admin = survivors_admin(cluster, victim)
    started = time.monotonic()
    cluster.nodes[victim].send_signal(signal.SIGTERM)
    code = cluster.nodes[victim].wait_exit(CREATE_TIMEOUT_S)
    took = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"node {victim} exited with {code} after SIGTERM")
    wait_for("every partition led by a survivor after the controlled shutdown",
             lambda: fully_led(admin, topics, survivors, False), 30)
    rejoin(cluster, victim, topics)
    return took


def controller_failover(cluster: Cluster, topics: dict[str, int]) -> float:
    """SIGKILL the controller: seconds until a survivor is controller and
    every partition is led by a survivor."""
    victim = controller_id(cluster.admin)
    survivors = set(cluster.nodes) - {victim}
    admin = survivors_admin(cluster, victim)
    killed = time.monotonic()
    cluster.nodes[victim].send_signal(signal.SIGKILL)
    wait_for("a survivor controls and leads every partition",
             lambda: controller_id(admin) in survivors
             and fully_led(admin, topics, survivors, False), CREATE_TIMEOUT_S)
    took = time.monotonic() - killed
    rejoin(cluster, victim, topics)
    return took


def longest_stall(logs: list[Path], offsets: list[int]) -> float:
    worst = 0.0
    for path, start in zip(logs, offsets, strict=True):
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        worst = max([worst, *(float(m.group(1)) for m in _STALL.finditer(text))])
    return worst


def measure(ctx: ScenarioContext, partitions: int, result: CaseResult) -> None:
    topics = topic_names(partitions)
    log_dir = ctx.config.log_dir / f"scale-{partitions}-r{ctx.round}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with running_cluster(ctx.config, log_dir, OVERRIDES) as cluster:
        m = result.metrics
        ctx.log(f"{NAME}: creating {partitions} partitions (RF 3)")
        m["create_s"] = create(cluster, topics)
        logs = [b.log_path for b in cluster.nodes.values()]
        offsets = [p.stat().st_size for p in logs]
        m["idle_core"] = idle_core(cluster)
        single = single_partition(cluster.bootstrap)
        m["single_p50_ms"] = percentile(single, 50) * 1e3
        m["single_p99_ms"] = percentile(single, 99) * 1e3
        meta = metadata_latencies(cluster.bootstrap)
        m["metadata_ms"] = percentile(meta, 50) * 1e3
        m["metadata_max_ms"] = max(meta) * 1e3
        latencies, undelivered = burst(cluster.bootstrap, topics)
        m["burst_p50_s"] = percentile(latencies, 50)
        m["burst_p99_s"] = percentile(latencies, 99)
        m["burst_max_s"] = max(latencies) if not undelivered else BURST_TIMEOUT_S
        m["burst_undelivered"] = float(undelivered)
        m["max_stall_ms"] = longest_stall(logs, offsets)
        rss = [psutil.Process(b.pid).memory_info().rss for b in cluster.nodes.values()]
        m["rss_mb"] = sum(rss) / len(rss) / 1e6
        m["rss_kb_replica"] = sum(rss) / (partitions * 3) / 1e3
        ctx.log(f"{NAME}: failover at {partitions} partitions")
        m["failover_s"], m["rejoin_s"] = failover_and_rejoin(cluster, topics)
        ctx.log(f"{NAME}: controlled shutdown at {partitions} partitions")
        m["shutdown_s"] = controlled_shutdown(cluster, topics)
        ctx.log(f"{NAME}: controller failover at {partitions} partitions")
        m["controller_failover_s"] = controller_failover(cluster, topics)
        if undelivered:
            result.verified = False
            result.notes.append(f"{undelivered} burst records undelivered after "
                                f"{BURST_TIMEOUT_S:.0f} s")


def run(ctx: ScenarioContext) -> list[CaseResult]:
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no cluster mode here)")
        return []
    out = []
    for partitions in SIZES:
        case = f"partitions-{partitions}"
        if not ctx.case_selected(case):
            continue
        result = ctx.new_result(NAME, case)
        try:
            measure(ctx, partitions, result)
        except (TimeoutError, RuntimeError) as exc:
            result.error = str(exc)
        out.append(result)
    return out


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: 3 brokers, RF 3, 1,000-4,000 partitions: creation, idle CPU, "
        "stalls, acks=all latency, full Metadata, a one-record-per-partition burst, "
        "failover, rejoin, controlled shutdown and controller failover",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=45,
    )
)
