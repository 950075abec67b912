"""Hot consume with sendfile vs the pread path (issue 9): broker CPU per message.

tierd only (the comparison is tierd with ``tierd.fetch.zero.copy`` on and off;
Tansu's rounds report nothing). Each round starts two fresh tierds one after the
other, the order alternating by round: ``pread`` (zero copy off: local data read
into memory, encoded into the response, sent) and ``sendfile`` (on: the record
bytes go from the page cache to the socket). Each gets the same 1 KiB lz4 values
(5 × ``--large-count`` × ``--scale``, 1M by default, acks=1), then the topic is read
back from offset 0 ``PASSES`` times with the throughput scenario's verified
consumer while the broker's CPU is sampled: more messages than the throughput
cases, because the kernel counts CPU in 10 ms ticks and a consume pass here takes
under two seconds.
"""

from __future__ import annotations

from bench.brokers import BrokerProcess, tierd_spec
from bench.kafka_util import wait_metadata_ready
from bench.payload import payload_set
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.throughput import ThroughputCase, timed_consume, timed_produce
from bench.scenarios.tiered import create_topics

NAME = "zero_copy"
CASE = ThroughputCase("1", 1024, "lz4")
SIDES = ("sendfile", "pread")
# Messages relative to the throughput scenario's 1 KiB count.
COUNT_FACTOR = 5
# Consume passes per broker: CPU ticks of several passes add up to a steadier figure.
PASSES = 2

METRICS = (
    MetricSpec("sendfile_cpu_us_msg", "broker CPU/msg consume, sendfile", "us", False, "{:,.3f}"),
    MetricSpec("pread_cpu_us_msg", "broker CPU/msg consume, pread", "us", False, "{:,.3f}"),
    MetricSpec("cpu_ratio", "broker CPU/msg sendfile/pread", "x", False, "{:,.3f}"),
    MetricSpec("sendfile_msgs_s", "consume msgs/s, sendfile", "msg/s", True, "{:,.0f}"),
    MetricSpec("pread_msgs_s", "consume msgs/s, pread", "msg/s", True, "{:,.0f}"),
)

TARGETS = (Target("cpu_ratio", TargetKind.ABSOLUTE_AT_MOST, 0.6, unit="x"),)


def run_side(ctx: ScenarioContext, side: str, result: CaseResult) -> None:
    """One fresh tierd with zero copy on (``sendfile``) or off (``pread``)."""
    config = ctx.config
    payloads = payload_set(config.count_for(CASE.size) * COUNT_FACTOR, CASE.size)
    log_dir = config.log_dir / f"{NAME}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    base = tierd_spec(config)
    spec = base.with_overrides(f"{base.label} ({side})",
                               {"tierd.fetch.zero.copy": str(side == "sendfile").lower()})
    topic = ctx.topic_name(NAME, side)
    timeout = config.phase_timeout(payloads.count)
    with BrokerProcess(spec, log_dir / f"tierd-{side}.log", config.startup_timeout) as broker:
        wait_metadata_ready(broker.bootstrap, config.startup_timeout)
        create_topics(broker.bootstrap, {topic: {}}, config.partitions)
        produced = timed_produce(broker.bootstrap, broker.cpu_seconds, topic, CASE, payloads,
                                 timeout)
        if produced.errors:
            result.verified = False
            result.notes.extend(f"{side} produce: {n}" for n in produced.notes)
            return
        cpu = elapsed = 0.0
        messages = 0
        for n in range(PASSES):
            outcome, verifier = timed_consume(broker.bootstrap, broker.cpu_seconds, topic,
                                              payloads, timeout, config.idle_timeout)
            if not verifier.ok() or outcome.errors:
                result.verified = False
                result.notes.append(f"{side} pass {n + 1}: {verifier.summary()}")
                result.notes.extend(outcome.notes)
            cpu += outcome.broker_cpu
            elapsed += outcome.elapsed
            messages += outcome.messages
    result.metrics[f"{side}_cpu_us_msg"] = cpu / max(messages, 1) * 1e6
    result.metrics[f"{side}_msgs_s"] = messages / max(elapsed, 1e-9)


def run(ctx: ScenarioContext) -> list[CaseResult]:
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} is compared only with itself)")
        return []
    case = f"hot-consume-{CASE.name.split('-', 1)[1]}"
    if not ctx.case_selected(case):
        return []
    result = ctx.new_result(NAME, case)
    try:
        for side in SIDES if ctx.round % 2 == 0 else SIDES[::-1]:
            run_side(ctx, side, result)
        m = result.metrics
        m["cpu_ratio"] = m["sendfile_cpu_us_msg"] / m["pread_cpu_us_msg"]
        ctx.log(f"{NAME} {case}: broker CPU/msg sendfile {m['sendfile_cpu_us_msg']:.3f} us, "
                f"pread {m['pread_cpu_us_msg']:.3f} us (ratio {m['cpu_ratio']:.2f})")
    except Exception as exc:  # noqa: BLE001 - record and go on
        result.error = f"{type(exc).__name__}: {exc}"
        ctx.log(f"{NAME} {case}: ERROR {result.error}")
    return [result]


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: hot consume broker CPU per message with sendfile vs the "
        "pread path (1 KiB lz4)",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=32,
    )
)
