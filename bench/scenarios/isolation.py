"""``isolation``: does background work hurt live traffic? (issue 24)

tierd only. A probe producer (``bench/isolation_clients.py``, a process of its
own, a raw client) sends one 1 KiB acks=all record every millisecond, one
record a request, to a live topic for the whole case. Its answers' latencies
are cut into the case's phases by send time:

* ``steady``: nothing else runs;
* ``hot``: a reader process reads a 200 MiB local topic (1 KiB values) from
  offset 0 as fast as it can, pass after pass for at least 8 s;
* ``cold``: the same on a fully tiered topic (every closed segment remote and
  gone locally; 200 MiB against the 64 MiB chunk cache, so every pass reads
  the remote tier);
* ``copy``: a tiered topic whose copying was held back
  (``remote.log.copy.disable``) while 200 MiB went in is released: from the
  release until its local log is down to the active segment;
* ``clean`` (``dir`` cases): a compacted topic filled with 50 MiB of updates
  over 10,000 keys while cleaning was held back (``min.compaction.lag.ms``)
  is released: the cleaner's passes, from the broker's ``cleaned log`` lines.

Cases: the remote tier is a directory (``dir``) or moto behind the S3 model
(``s3-model``: 30 ms to first byte, 80 MB/s per connection, at the lowest CPU
priority), each with two placements. ``shared``: every process on both
cores. ``pinned``: the broker (with its threads and its cleaner process) on
core 0 (``taskset -c 0``), and this benchmark, the probe, the reader, moto and
the model on core 1, so that the figures are the broker's own; the targets
judge the pinned cases.

Reported per phase: probe p50/p99/p99.9/max and sample count, and p99 over
the steady p99; per read: MB/s (value bytes over the passes' time), cold/hot,
and broker CPU per MB read (the broker's CPU in the read's window less its
steady rate over the same time: the probe's own cost), cold over hot. Logs:
``bench/results/logs/isolation-<case>-round<N>/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import REPO_ROOT, BrokerProcess, BrokerSpec
from bench.kafka_util import wait_metadata_ready
from bench.payload import payload_set
from bench.procstat import tree_cpu_seconds
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.compaction import (
    CODEC,
    HOLD_LAG_MS,
    KEYS,
    Values,
    alter_topic,
    hold_cleaning,
    log_size,
    metrics_url,
    update_keys,
    wait_cleaned,
)
from bench.scenarios.tiered import (
    SEGMENT_BYTES,
    bulk_produce,
    create_topics,
    local_logs,
    open_remote_tier,
    tiered_spec,
    wait_all_tiered,
)
from bench.stats import percentile

NAME = "isolation"
MIB = 1 << 20
SIZE = 1024
BULK_COUNT = 204_800  # 200 MiB of 1 KiB values (x --scale), for hot, cold and copy
CLEAN_COUNT = 51_200  # 50 MiB of updates over KEYS keys
TIERS = ("dir", "s3-model")
PLACEMENTS = ("shared", "pinned")
BROKER_CORE = 0
CLIENT_CORE = 1
WARMUP_S = 1.0
STEADY_S = 10.0
CATCHUP_MIN_S = 8.0
SETTLE_S = 1.0
PHASE_TIMEOUT_S = 300.0
EXTRA_OVERRIDES = {"log.cleaner.backoff.ms": "200"}
PHASES = ("steady", "hot", "cold", "copy", "clean")

# -- metrics -----------------------------------------------------------------------


def _phase_metrics() -> tuple[MetricSpec, ...]:
    specs: list[MetricSpec] = []
    for phase in PHASES:
        cases = "*-dir" if phase == "clean" else "*"
        specs += [
            MetricSpec(f"{phase}_p50_ms", f"produce p50, {phase}", "ms", False, "{:.2f}", cases),
            MetricSpec(f"{phase}_p99_ms", f"produce p99, {phase}", "ms", False, "{:.2f}", cases),
            MetricSpec(f"{phase}_p999_ms", f"produce p99.9, {phase}", "ms", False, "{:.2f}",
                       cases),
            MetricSpec(f"{phase}_max_ms", f"produce max, {phase}", "ms", False, "{:.2f}", cases),
            MetricSpec(f"{phase}_samples", f"probe records, {phase}", "", True, "{:,.0f}",
                       cases),
        ]
        if phase != "steady":
            specs.append(MetricSpec(f"{phase}_p99_ratio", f"p99 {phase} / steady", "x", False,
                                    "{:.2f}", cases))
    return tuple(specs)


METRICS = _phase_metrics() + (
    MetricSpec("hot_mb_s", "hot catch-up read MB/s", "MB/s", True, "{:,.1f}"),
    MetricSpec("cold_mb_s", "cold catch-up read MB/s", "MB/s", True, "{:,.1f}"),
    MetricSpec("cold_hot_ratio", "cold / hot read", "x", True, "{:.2f}"),
    MetricSpec("hot_cpu_ms_per_mb", "broker CPU per hot MB", "ms/MB", False, "{:.2f}"),
    MetricSpec("cold_cpu_ms_per_mb", "broker CPU per cold MB", "ms/MB", False, "{:.2f}"),
    MetricSpec("cold_hot_cpu_ratio", "CPU per MB cold / hot", "x", False, "{:.2f}"),
    MetricSpec("steady_cpu_core", "broker CPU, steady", "cores", False, "{:.3f}"),
    MetricSpec("copy_s", "copying the backlog took", "s", False, "{:.2f}"),
    MetricSpec("clean_s", "cleaning took", "s", False, "{:.2f}", "*-dir"),
)

TARGETS = (
    Target("hot_p99_ratio", TargetKind.ABSOLUTE_AT_MOST, 2.0, "pinned-*", "x"),
    Target("cold_p99_ratio", TargetKind.ABSOLUTE_AT_MOST, 2.0, "pinned-*", "x"),
    Target("hot_p99_ms", TargetKind.ABSOLUTE_AT_MOST, 5.0, "pinned-*", "ms"),
    Target("cold_p99_ms", TargetKind.ABSOLUTE_AT_MOST, 5.0, "pinned-*", "ms"),
    Target("hot_p999_ms", TargetKind.ABSOLUTE_AT_MOST, 10.0, "pinned-*", "ms"),
    Target("cold_p999_ms", TargetKind.ABSOLUTE_AT_MOST, 10.0, "pinned-*", "ms"),
    Target("hot_max_ms", TargetKind.ABSOLUTE_AT_MOST, 25.0, "pinned-*", "ms"),
    Target("cold_max_ms", TargetKind.ABSOLUTE_AT_MOST, 25.0, "pinned-*", "ms"),
    Target("copy_p99_ratio", TargetKind.ABSOLUTE_AT_MOST, 1.2, "pinned-*", "x"),
    Target("clean_p99_ratio", TargetKind.ABSOLUTE_AT_MOST, 1.2, "pinned-dir", "x"),
    Target("cold_hot_ratio", TargetKind.ABSOLUTE_AT_LEAST, 0.8, "pinned-dir", "x"),
    Target("cold_hot_ratio", TargetKind.ABSOLUTE_AT_LEAST, 0.5, "pinned-s3-model", "x"),
    Target("cold_hot_cpu_ratio", TargetKind.ABSOLUTE_AT_MOST, 2.0, "pinned-*", "x"),
)

# -- placement and client processes ------------------------------------------------


@contextmanager
def placement(name: str) -> Iterator[None]:
    """``pinned``: this process (and so every process it starts from now on:
    clients, moto, the model) on the clients' core; restored afterwards."""
    if name != "pinned":
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CLIENT_CORE})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def placed_spec(spec: BrokerSpec, name: str) -> BrokerSpec:
    """The broker on its own core in the pinned placement."""
    if name != "pinned":
        return spec
    return BrokerSpec(spec.name, f"{spec.label} (pinned to core {BROKER_CORE})",
                      f"taskset -c {BROKER_CORE} {spec.command_template}", spec.cwd, spec.env)


def client_argv(role: str, bootstrap: str, topic: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench.isolation_clients", role, "--bootstrap", bootstrap,
            "--topic", topic, "--out", str(out), *extra]


class Probe:
    """The probe producer's process: started ready, stopped with its samples."""

    def __init__(self, bootstrap: str, topic: str, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(client_argv("probe", bootstrap, topic, out),
                                     cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"probe did not start (said {line!r})")

    def stop(self) -> list[tuple[float, float]]:
        self.proc.terminate()
        code = self.proc.wait(60)
        if code != 0:
            raise RuntimeError(f"probe exited with {code}")
        with open(self.out) as f:
            return [(float(a), float(b)) for a, b in (line.split() for line in f)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Window:
    """A phase: wall-clock bounds and the broker's CPU seconds over it."""

    start: float
    end: float
    cpu: float
    mb: float = 0.0


def read_catch_up(broker: BrokerProcess, topic: str, out: Path) -> Window:
    """Run the reader process; the window spans its passes."""
    cpu_before = tree_cpu_seconds(broker.pid)
    subprocess.run(client_argv("reader", broker.bootstrap, topic, out, "--min-seconds",
                               str(CATCHUP_MIN_S)), cwd=REPO_ROOT, check=True,
                   timeout=PHASE_TIMEOUT_S)
    cpu = tree_cpu_seconds(broker.pid) - cpu_before
    passes = [json.loads(line) for line in out.read_text().splitlines()]
    for p in passes:
        if p["errors"] or p["records"] != p["high"] - p["low"]:
            raise RuntimeError(f"read of {topic}: {p}")
    return Window(passes[0]["start"], passes[-1]["end"], cpu,
                  sum(p["bytes"] for p in passes) / 1e6)


def timed(broker: BrokerProcess, run: Callable[[], None]) -> Window:
    cpu_before = tree_cpu_seconds(broker.pid)
    start = time.time()
    run()
    return Window(start, time.time(), tree_cpu_seconds(broker.pid) - cpu_before)


def wait_local_trimmed(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while len(local_logs(broker.data_dir, topic, 0)) > 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not copied after {PHASE_TIMEOUT_S}s")
        time.sleep(0.02)


# -- the case ----------------------------------------------------------------------


def latency_figures(m: dict[str, float], phase: str, samples: list[tuple[float, float]],
                    window: Window) -> None:
    lat = [lat for sent, lat in samples if window.start <= sent <= window.end]
    m[f"{phase}_samples"] = float(len(lat))
    if not lat:
        return
    m[f"{phase}_p50_ms"] = percentile(lat, 50) * 1e3
    m[f"{phase}_p99_ms"] = percentile(lat, 99) * 1e3
    m[f"{phase}_p999_ms"] = percentile(lat, 99.9) * 1e3
    m[f"{phase}_max_ms"] = max(lat) * 1e3


def run_case(ctx: ScenarioContext, tier: str, where: str, result: CaseResult) -> None:
    config = ctx.config
    m = result.metrics
    bulk = max(2000, int(round(BULK_COUNT * config.scale)))
    payloads = payload_set(bulk, SIZE)
    case = f"{where}-{tier}"
    log_dir = config.log_dir / f"{NAME}-{case}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    topic = {name: ctx.topic_name(NAME, f"{case}-{name}")
             for name in ("live", "hot", "cold", "copy", "clean")}
    rsm = "fs" if tier == "dir" else tier
    segment = {"segment.bytes": str(SEGMENT_BYTES)}
    tiered = {**segment, "remote.storage.enable": "true", "local.retention.bytes": "1"}
    windows: dict[str, Window] = {}
    with placement(where), open_remote_tier(rsm, log_dir) as remote:
        spec = tiered_spec(ctx, rsm, {**remote.settings, **EXTRA_OVERRIDES})
        with BrokerProcess(placed_spec(spec, where), log_dir / "tierd.log",
                           config.startup_timeout) as broker:
            wait_metadata_ready(broker.bootstrap, config.startup_timeout)
            topics = {topic["live"]: {}, topic["hot"]: segment, topic["cold"]: tiered,
                      topic["copy"]: {**tiered, "remote.log.copy.disable": "true"}}
            if tier == "dir":
                topics[topic["clean"]] = {"cleanup.policy": "compact", **segment,
                                          "min.compaction.lag.ms": str(HOLD_LAG_MS)}
            create_topics(broker.bootstrap, topics, 1)
            for name in ("hot", "cold", "copy"):
                bulk_produce(broker.bootstrap, topic[name], payloads.values)
            if tier == "dir":
                count = max(2 * KEYS, int(round(CLEAN_COUNT * config.scale)))
                bulk_produce(broker.bootstrap, topic["clean"], Values(0, count), acks="1",
                             codec=CODEC, keys=update_keys(count, ctx.round, True))
            wait_all_tiered(broker.data_dir, topic["cold"], 1)
            url = metrics_url(broker, 0) if tier == "dir" else ""
            probe = Probe(broker.bootstrap, topic["live"], log_dir / "probe.txt")
            try:
                time.sleep(WARMUP_S)
                windows["steady"] = timed(broker, lambda: time.sleep(STEADY_S))
                for side in ("hot", "cold"):
                    time.sleep(SETTLE_S)
                    windows[side] = read_catch_up(broker, topic[side],
                                                  log_dir / f"reader-{side}.jsonl")
                time.sleep(SETTLE_S)

                def copy() -> None:
                    alter_topic(broker.bootstrap, topic["copy"],
                                {"remote.log.copy.disable": "false"})
                    wait_local_trimmed(broker, topic["copy"])

                windows["copy"] = timed(broker, copy)
                if tier == "dir":
                    time.sleep(SETTLE_S)
                    since = log_size(broker)
                    cpu_before = tree_cpu_seconds(broker.pid)
                    hold_cleaning(broker.bootstrap, topic["clean"], False)
                    passes = wait_cleaned(broker, since, topic["clean"], url)
                    windows["clean"] = Window(min(p.start for p in passes),
                                              max(p.end for p in passes),
                                              tree_cpu_seconds(broker.pid) - cpu_before)
                time.sleep(SETTLE_S)
                samples = probe.stop()
            finally:
                probe.kill()
    for phase, window in windows.items():
        latency_figures(m, phase, samples, window)
        if phase != "steady" and m.get("steady_p99_ms"):
            m[f"{phase}_p99_ratio"] = m.get(f"{phase}_p99_ms", float("nan")) / m["steady_p99_ms"]
    steady = windows["steady"]
    steady_rate = steady.cpu / max(1e-9, steady.end - steady.start)
    m["steady_cpu_core"] = steady_rate
    for side in ("hot", "cold"):
        w = windows[side]
        m[f"{side}_mb_s"] = w.mb / max(1e-9, w.end - w.start)
        own = w.cpu - steady_rate * (w.end - w.start)
        m[f"{side}_cpu_ms_per_mb"] = 1e3 * own / max(1e-9, w.mb)
    m["cold_hot_ratio"] = m["cold_mb_s"] / m["hot_mb_s"]
    m["cold_hot_cpu_ratio"] = m["cold_cpu_ms_per_mb"] / m["hot_cpu_ms_per_mb"]
    m["copy_s"] = windows["copy"].end - windows["copy"].start
    if "clean" in windows:
        m["clean_s"] = windows["clean"].end - windows["clean"].start
    for phase in PHASES:
        if phase in windows and m.get(f"{phase}_samples", 0) < 500:
            result.notes.append(f"{phase}: only {m.get(f'{phase}_samples', 0):.0f} probe "
                                "records in its window")


def summary(m: dict[str, float]) -> str:
    parts = []
    for phase in PHASES:
        if f"{phase}_p99_ms" in m:
            parts.append(f"{phase} p99 {m[f'{phase}_p99_ms']:.2f}/p99.9 "
                         f"{m[f'{phase}_p999_ms']:.2f}/max {m[f'{phase}_max_ms']:.1f} ms")
    return "; ".join(parts) + (f"; hot {m['hot_mb_s']:.0f} MB/s, cold {m['cold_mb_s']:.0f} MB/s"
                               f" ({m['cold_hot_ratio']:.2f}x, CPU/MB "
                               f"{m['cold_hot_cpu_ratio']:.2f}x)")


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """Every case on tierd; nothing on Tansu (no tiered storage, no cleaner)."""
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no tiered storage)")
        return []
    if len(os.sched_getaffinity(0)) < 2:
        ctx.log(f"{NAME}: skipped (needs two cores)")
        return []
    results = []
    for tier in TIERS:
        for where in PLACEMENTS:
            case = f"{where}-{tier}"
            if not ctx.case_selected(case):
                continue
            result = ctx.new_result(NAME, case)
            try:
                run_case(ctx, tier, where, result)
                ctx.log(f"{NAME} {case}: {summary(result.metrics)}")
            except Exception as exc:  # noqa: BLE001 - record and go on with the next case
                result.error = f"{type(exc).__name__}: {exc}"
                ctx.log(f"{NAME} {case}: ERROR {result.error}")
            results.append(result)
    return results


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: a 1 ms acks=all probe's latency while hot and cold catch-up "
        "reads, the copier and the cleaner run; shared and pinned placements",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=95,
    )
)
