"""TLS listeners (issue 12): what SSL costs the broker per message against PLAINTEXT.

tierd only (Tansu's rounds report nothing). Each round starts one fresh tierd of its
own (beside the round's plain broker) with two listeners on loopback,
``PLAINTEXT://127.0.0.1:<port>`` and ``SSL://127.0.0.1:<port>``, the SSL one with a PEM
keystore (``ssl.keystore.type=PEM``: unencrypted PKCS8 key, then the chain) from a
throwaway PKI made for the round with ``system_tests.certs.make_pki`` (EC P-256,
server certificate valid for IP 127.0.0.1) and removed afterwards.

For each side, PLAINTEXT and SSL (the order alternating by round, so drift over the
round cancels), on a topic of its own: the throughput scenario's produce phase
(5 × ``--large-count`` × ``--scale`` 1 KiB lz4 values, 1M by default, as
``zero_copy``; acks=all, linger 5 ms) then its verified consume from offset 0, both with confluent-kafka
(``security.protocol=SSL`` and ``ssl.ca.location`` = the PKI's CA for SSL: the client
verifies the broker, hostname included). The broker's CPU (utime+stime from /proc) is
sampled around each phase; the connections (TLS handshakes included) are made before
the timed section. Reported: msgs/s, MB/s, broker and client CPU µs/msg of each
phase and side, and SSL/PLAINTEXT of the broker CPU per message for produce and
consume; target (issue 12): TLS within 1.5x CPU per message.

PLAINTEXT fetches of local data go out with sendfile (``tierd.fetch.zero.copy``,
default on) while TLS fetches are read with pread and encrypted, so the consume
ratio includes the zero copy TLS gives up.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from bench.brokers import LOOPBACK, BrokerProcess, BrokerSpec, free_loopback_port, tierd_spec
from bench.kafka_util import wait_metadata_ready
from bench.payload import payload_set
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.throughput import (
    ThroughputCase,
    _rate_metrics,
    timed_consume,
    timed_produce,
)
from bench.scenarios.tiered import create_topics
from bench.stats import ratio

NAME = "tls"
CASE = ThroughputCase("all", 1024, "lz4")
SIDES = ("plaintext", "ssl")
PHASES = ("produce", "consume")
# Messages relative to the throughput scenario's 1 KiB count (200k): 1M by default (the
# same values as zero_copy's). At ~0.4-2 us of broker CPU a message, 100k would be only
# 4-20 of the kernel's 10 ms ticks a phase; 1M phases take ~2-4 s each here, so three
# rounds (and both brokers' starts) stay under two minutes.
COUNT_FACTOR = 5
CPU_RATIO_TARGET = 1.5

METRICS = (
    *(
        spec
        for side in SIDES
        for phase in PHASES
        for spec in (
            MetricSpec(f"{side}_{phase}_msgs_s", f"{side.upper()} {phase} msgs/s", "msg/s",
                       True, "{:,.0f}"),
            MetricSpec(f"{side}_{phase}_mb_s", f"{side.upper()} {phase} MB/s", "MB/s", True,
                       "{:,.2f}"),
            MetricSpec(f"{side}_{phase}_cpu_us_msg", f"{side.upper()} broker CPU/msg {phase}",
                       "us", False, "{:,.2f}"),
            MetricSpec(f"{side}_{phase}_client_cpu_us_msg",
                       f"{side.upper()} client CPU/msg {phase}", "us", False, "{:,.2f}"),
        )
    ),
    *(MetricSpec(f"{phase}_cpu_ratio", f"broker CPU/msg {phase} SSL/PLAINTEXT", "x", False,
                 "{:,.3f}") for phase in PHASES),
)

TARGETS = tuple(
    Target(f"{phase}_cpu_ratio", TargetKind.ABSOLUTE_AT_MOST, CPU_RATIO_TARGET, unit="x")
    for phase in PHASES
)


def tls_spec(base: BrokerSpec, port: int, ssl_port: int, keystore: Path) -> BrokerSpec:
    """``base`` with a PLAINTEXT listener on ``port`` and an SSL one on ``ssl_port``
    whose key and chain are the PEM file ``keystore``."""
    listeners = f"PLAINTEXT://{LOOPBACK}:{port},SSL://{LOOPBACK}:{ssl_port}"
    return base.with_overrides(f"{base.label} (PLAINTEXT + SSL)", {
        "listeners": listeners,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    })


def client_settings(side: str, ca_pem: Path) -> dict[str, object]:
    """librdkafka settings for ``side``: none for PLAINTEXT; SSL verifying the broker
    with the CA ``ca_pem``."""
    if side == "plaintext":
        return {}
    return {"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)}


def cpu_ratios(metrics: dict[str, float]) -> dict[str, float]:
    """SSL/PLAINTEXT broker CPU per message of each phase (NaN where either is missing)."""
    return {
        f"{phase}_cpu_ratio": ratio(metrics.get(f"ssl_{phase}_cpu_us_msg", math.nan),
                                    metrics.get(f"plaintext_{phase}_cpu_us_msg", math.nan))
        for phase in PHASES
    }


def verdicts_text(metrics: dict[str, float]) -> str:
    """One line: each phase's CPU ratio against its target, with PASS/FAIL (n/a)."""
    parts = []
    for target in TARGETS:
        value = metrics.get(target.metric, math.nan)
        verdict = target.evaluate(value, math.nan)
        phase = target.metric.split("_", 1)[0]
        parts.append(f"{phase} CPU/msg SSL/PLAINTEXT {value:.2f}x "
                     f"(target {target.describe()}: {verdict.value})")
    return "; ".join(parts)


def run_side(ctx: ScenarioContext, broker: BrokerProcess, bootstrap: str, side: str,
             ca_pem: Path, result: CaseResult) -> None:
    """Produce then consume one topic through ``side``'s listener at ``bootstrap``."""
    config = ctx.config
    payloads = payload_set(max(100, round(config.count_for(CASE.size) * COUNT_FACTOR)), CASE.size)
    timeout = config.phase_timeout(payloads.count)
    topic = ctx.topic_name(NAME, f"{CASE.name}-{side}")
    create_topics(broker.bootstrap, {topic: {}}, config.partitions)
    security = client_settings(side, ca_pem)
    produced = timed_produce(bootstrap, broker.cpu_seconds, topic, CASE, payloads, timeout,
                             **security)
    consumed, verifier = timed_consume(bootstrap, broker.cpu_seconds, topic, payloads, timeout,
                                       config.idle_timeout, **security)
    m = result.metrics
    m.update(_rate_metrics(f"{side}_produce", produced, CASE.size))
    m.update(_rate_metrics(f"{side}_consume", consumed, CASE.size))
    m["messages"] = float(payloads.count)
    result.notes.extend(f"{side}: {note}" for note in produced.notes + consumed.notes)
    if produced.errors or not verifier.ok():
        result.verified = False
        result.notes.append(f"{side}: verification failed: {verifier.summary()}")
    ctx.log(f"{NAME} {side}: produce {m[f'{side}_produce_msgs_s']:,.0f} msg/s "
            f"({m[f'{side}_produce_cpu_us_msg']:.2f} us broker CPU/msg), consume "
            f"{m[f'{side}_consume_msgs_s']:,.0f} msg/s "
            f"({m[f'{side}_consume_cpu_us_msg']:.2f} us/msg)")


def run_case(ctx: ScenarioContext, result: CaseResult) -> None:
    """One tierd with both listeners; both sides in this round's order."""
    from system_tests.certs import make_pki  # the system tests' throwaway PKI

    config = ctx.config
    log_dir = config.log_dir / f"{NAME}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        pki = make_pki(Path(tmp))
        broker = BrokerProcess(tierd_spec(config), log_dir / "tierd-tls.log",
                               config.startup_timeout)
        ssl_port = free_loopback_port()
        while ssl_port == broker.port:
            ssl_port = free_loopback_port()
        # The PLAINTEXT port is the one BrokerProcess picked (and waits on).
        broker.spec = tls_spec(broker.spec, broker.port, ssl_port, pki.server_pem)
        with broker:
            wait_metadata_ready(broker.bootstrap, config.startup_timeout)
            bootstraps = {"plaintext": broker.bootstrap, "ssl": f"{LOOPBACK}:{ssl_port}"}
            for side in SIDES if ctx.round % 2 == 0 else SIDES[::-1]:
                run_side(ctx, broker, bootstraps[side], side, pki.ca_pem, result)
    result.metrics.update(cpu_ratios(result.metrics))


def run(ctx: ScenarioContext) -> list[CaseResult]:
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} is compared only with itself)")
        return []
    if not ctx.case_selected(CASE.name):
        return []
    result = ctx.new_result(NAME, CASE.name)
    try:
        run_case(ctx, result)
        ctx.log(f"{NAME} {CASE.name}: {verdicts_text(result.metrics)}"
                f"{'' if result.verified else ' NOT VERIFIED'}")
    except Exception as exc:  # noqa: BLE001 - record and go on
        result.error = f"{type(exc).__name__}: {exc}"
        ctx.log(f"{NAME} {CASE.name}: ERROR {result.error}")
    return [result]


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: PLAINTEXT vs SSL listener on one broker, produce (acks=all) "
        "and consume 1 KiB lz4: throughput and broker CPU per message, SSL/PLAINTEXT",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=33,
    )
)
