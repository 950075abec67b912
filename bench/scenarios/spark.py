"""Spark backfill (deploy/spark/backfill.py) over the remote tier vs local disk:
records/s of the same batch job on a tiered topic and on a plain one. tierd only -
Tansu has no tiered storage, so its rounds report nothing here and the figures to
read are tierd's own ratio.

One case (``fs-backfill``: the filesystem remote storage manager). In each round:

1. A tierd with tiering on (its own process, beside the round's plain broker; the
   ``tiered`` scenario's :func:`~bench.scenarios.tiered.tiered_spec` and
   :func:`~bench.scenarios.tiered.remote_tier`) and two topics of ``PARTITIONS``
   partitions with the same small ``segment.bytes``: ``cold``
   (remote.storage.enable=true, local.retention.bytes=1: every closed segment is
   copied, then deleted locally) and ``hot`` (not tiered); plus a small ``warm``
   topic for the warm-up jobs. ``--partitions`` does not apply here.
2. The same JSON events (``{"key", "ts", "amount", "id", "note"}``, 100-200 bytes,
   200k x ``--scale``) bulk-produced to both; wait until every closed segment of
   ``cold`` is remote and gone from local disk. What stays local is each
   partition's active segment, which may hold one whole producer batch (up to
   ~1 MB, above ``segment.bytes``): the remote share is reported, ~90-97 %.
3. One local[2] SparkSession for the case (the connector jars from
   ``.deps/spark-jars/``, as the pipeline's tests use it); unmeasured backfills of
   ``warm`` (JVM class loading and JIT out of the figures), then ``RUNS`` backfills
   of ``cold`` and of ``hot`` in ABBA order (cold, hot, hot, cold; hot first in odd
   rounds): ``backfill.run`` from earliest to latest, parse, aggregate per key and
   UTC day, write Parquet. Each job is timed as a whole; records/s is events x RUNS
   / the side's total job seconds, and cold/hot its ratio.
4. Each job's Parquet is read back and compared with the aggregates computed in
   Python from the events produced (count and exact decimal sum per key and day);
   any difference marks the case unverified.

The Spark JVM (started by pyspark) outlives ``spark.stop()``, so later rounds reuse
it with a new session; the warm-up jobs keep the first round comparable.

Everything started here (the broker, the Spark session, the remote and output
directories) is stopped or removed before the case returns, on errors too.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from bench.brokers import BrokerProcess
from bench.kafka_util import wait_metadata_ready
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec
from bench.scenarios.tiered import (
    bulk_produce,
    create_topics,
    local_logs,
    remote_tier,
    tiered_spec,
    wait_all_tiered,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "spark"
RSM = "fs"
CASE = f"{RSM}-backfill"
# Events per topic before --scale: ~30 MB of JSON at ~150 bytes each.
EVENT_COUNT = 200_000
PARTITIONS = 4
# 128 KiB segments: ~60 per partition at full size, so the active segment (which
# stays local) is a few per cent of the cold topic and the job crosses many remote
# segments.
SEGMENT_BYTES = 128 * 1024
# Jobs per topic per round, in ABBA order; records/s is over their total time.
RUNS = 2
# Unmeasured warm-up jobs on a small topic first: the JVM's class loading and JIT
# would otherwise land on whichever side goes first.
WARMUP_COUNT = 20_000
WARMUP_RUNS = 2
# Events: KEYS keys over DAYS UTC days from FIRST_DAY (ts anywhere in a day, every
# tenth on its first or last millisecond), amounts with two decimals, some negative.
KEYS = 64
DAYS = 7
FIRST_DAY = date(2025, 3, 30)
MS_PER_DAY = 86_400_000
EPOCH = date(1970, 1, 1)
FIRST_DAY_MS = (FIRST_DAY - EPOCH).days * MS_PER_DAY
# The "note" pads the JSON to 100-200 bytes (from_json ignores fields not in the schema).
NOTE_MIN, NOTE_MAX = 20, 115
NOTE_WORDS = ("order shipped to customer region eu-west after payment confirmed by card "
              "issuer within session timeout window retry count zero status ok ").split()
SEED = 405
# As the pipeline tests: two task slots on two cores, no UI port, tiny shuffles;
# and no stage progress bars on stderr.
MASTER = "local[2]"
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
              "spark.driver.memory": "1g", "spark.ui.showConsoleProgress": "false"}
SPARK_LOG_LEVEL = "ERROR"

Aggregates = dict[tuple[str, date], tuple[int, Decimal]]

METRICS = (
    MetricSpec("cold_rec_s", "backfill cold (remote) records/s", "rec/s", True, "{:,.0f}"),
    MetricSpec("hot_rec_s", "backfill hot (local) records/s", "rec/s", True, "{:,.0f}"),
    MetricSpec("cold_hot_ratio", "cold/hot backfill records/s", "x", True, "{:,.3f}"),
    MetricSpec("cold_s", "backfill cold (remote) job, mean", "s", False, "{:,.2f}"),
    MetricSpec("hot_s", "backfill hot (local) job, mean", "s", False, "{:,.2f}"),
    MetricSpec("remote_pct", "cold topic share remote", "%", True, "{:,.1f}"),
    MetricSpec("tier_wait_s", "cold topic tiered after", "s", False, "{:,.2f}"),
    MetricSpec("event_bytes", "mean event (value) size", "B", False, "{:,.1f}"),
)


# -- events and their expected aggregates -------------------------------------------


@dataclass(frozen=True)
class EventSet:
    """The JSON values produced to each topic and what the job must make of them."""

    values: list[bytes]
    expected: Aggregates

    @property
    def count(self) -> int:
        """Number of events."""
        return len(self.values)

    @property
    def total_bytes(self) -> int:
        """Sum of value lengths."""
        return sum(len(v) for v in self.values)


def amount_text(cents: int) -> str:
    """``cents`` as a JSON number with exactly two decimals (never an exponent)."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


@lru_cache(maxsize=2)
def event_set(count: int, seed: int = SEED) -> EventSet:
    """Build (and cache across rounds) ``count`` events and their aggregates per key
    and UTC day, computed in Python (integer cents, so sums are exact)."""
    rng = random.Random(seed)
    notes = " ".join(NOTE_WORDS * 8)
    keys = [f"user-{k:04d}" for k in range(KEYS)]
    values: list[bytes] = []
    counts: dict[tuple[str, date], int] = defaultdict(int)
    cents_sum: dict[tuple[str, date], int] = defaultdict(int)
    for i in range(count):
        day = rng.randrange(DAYS)
        if i % 10 == 0:
            offset = MS_PER_DAY - 1 if i % 20 else 0
        else:
            offset = rng.randrange(MS_PER_DAY)
        ts = FIRST_DAY_MS + day * MS_PER_DAY + offset
        cents = rng.randrange(-5_000, 100_000)
        key = keys[rng.randrange(KEYS)]
        start = rng.randrange(len(notes) - NOTE_MAX)
        note = notes[start:start + rng.randint(NOTE_MIN, NOTE_MAX)]
        values.append(f'{{"key": "{key}", "ts": {ts}, "amount": {amount_text(cents)}, '
                      f'"id": {i}, "note": "{note}"}}'.encode())
        bucket = (key, FIRST_DAY + timedelta(days=day))
        counts[bucket] += 1
        cents_sum[bucket] += cents
    expected = {k: (counts[k], Decimal(cents_sum[k]).scaleb(-2)) for k in counts}
    return EventSet(values, expected)


# -- the Spark side -------------------------------------------------------------------


def spark_session() -> SparkSession:
    """A fresh local[2] session with the connector jars (``deploy/spark/session.py``)."""
    from deploy.spark.session import build_session

    spark = build_session("tierd-bench-backfill", master=MASTER, conf=SPARK_CONF)
    spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL)
    return spark


def run_backfill(spark: SparkSession, bootstrap: str, topic: str, out: Path) -> float:
    """``deploy/spark/backfill.py`` over ``topic`` (earliest to latest) into ``out``;
    return the job's wall time in seconds."""
    from deploy.spark import backfill

    args = backfill.parse_args(["--bootstrap", bootstrap, "--topic", topic, "--out", str(out)])
    started = time.perf_counter()
    backfill.run(spark, args)
    return time.perf_counter() - started


def read_aggregates(spark: SparkSession, out: Path) -> tuple[Aggregates, int]:
    """The job's Parquet as {(key, day): (count, amount)} and the number of rows
    (more rows than keys means a duplicate (key, day))."""
    rows = spark.read.parquet(str(out)).collect()
    return {(r["key"], r["day"]): (r["count"], r["amount"]) for r in rows}, len(rows)


def compare(got: Aggregates, rows: int, expected: Aggregates) -> str:
    """An empty string if ``got`` is exactly ``expected``, else what differs."""
    if got == expected and rows == len(expected):
        return ""
    problems = []
    if rows != len(got):
        problems.append(f"{rows - len(got)} duplicate (key, day) row(s)")
    missing = expected.keys() - got.keys()
    extra = got.keys() - expected.keys()
    wrong = [k for k in expected.keys() & got.keys() if got[k] != expected[k]]
    if missing:
        problems.append(f"{len(missing)} (key, day) missing")
    if extra:
        problems.append(f"{len(extra)} unexpected (key, day)")
    if wrong:
        k = min(wrong)
        problems.append(f"{len(wrong)} wrong, e.g. {k}: got {got[k]}, expected {expected[k]}")
    counted = sum(c for c, _ in got.values())
    want = sum(c for c, _ in expected.values())
    problems.append(f"{counted} of {want} events counted")
    return "; ".join(problems)


# -- one case ----------------------------------------------------------------------


def run_case(ctx: ScenarioContext, result: CaseResult) -> None:
    """Start a tiered tierd, backfill both topics with Spark, stop everything again."""
    config = ctx.config
    events = event_set(max(1000, int(round(EVENT_COUNT * config.scale))))
    warm = event_set(WARMUP_COUNT, SEED + 1)
    cold = ctx.topic_name(NAME, f"{RSM}-cold")
    hot = ctx.topic_name(NAME, f"{RSM}-hot")
    warmup = ctx.topic_name(NAME, f"{RSM}-warm")
    log_dir = config.log_dir / f"spark-{RSM}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    out_root = Path(tempfile.mkdtemp(prefix="bench-spark-out-"))
    spark: SparkSession | None = None
    try:
        with remote_tier(RSM, log_dir) as settings, BrokerProcess(
                tiered_spec(ctx, RSM, settings), log_dir / "tierd.log",
                config.startup_timeout) as broker:
            wait_metadata_ready(broker.bootstrap, config.startup_timeout)
            segment = {"segment.bytes": str(SEGMENT_BYTES)}
            create_topics(broker.bootstrap, {
                cold: {**segment, "remote.storage.enable": "true",
                       "local.retention.bytes": "1"},
                hot: segment,
                warmup: segment,
            }, PARTITIONS)
            for topic in (cold, hot):
                bulk_produce(broker.bootstrap, topic, events.values)
            bulk_produce(broker.bootstrap, warmup, warm.values)
            tier_started = time.monotonic()
            wait_all_tiered(broker.data_dir, cold, PARTITIONS)
            result.metrics["tier_wait_s"] = time.monotonic() - tier_started
            local_start = sum(local_logs(broker.data_dir, cold, p)[0] for p in range(PARTITIONS))
            result.metrics["remote_pct"] = 100.0 * local_start / events.count

            ctx.log(f"{NAME}: starting Spark ({MASTER})")
            spark = spark_session()
            for i in range(WARMUP_RUNS):
                run_backfill(spark, broker.bootstrap, warmup, out_root / f"warm-{i}")
            # ABBA: cold, hot, hot, cold (hot first in odd rounds), so a linear drift
            # over the round (and what the first job still warms up) cancels out.
            pair = [(cold, "cold"), (hot, "hot")]
            if ctx.round % 2:
                pair.reverse()
            order = (pair + pair[::-1]) * (RUNS // 2) + pair * (RUNS % 2)
            seconds: dict[str, float] = defaultdict(float)
            for i, (topic, side) in enumerate(order):
                out = out_root / f"{side}-{i}"
                seconds[side] += run_backfill(spark, broker.bootstrap, topic, out)
                got, rows = read_aggregates(spark, out)
                problem = compare(got, rows, events.expected)
                if problem:
                    result.verified = False
                    result.notes.append(f"{side} backfill (job {i + 1}): {problem}")
            for side in ("cold", "hot"):
                secs = max(seconds[side], 1e-9)
                result.metrics[f"{side}_s"] = secs / RUNS
                result.metrics[f"{side}_rec_s"] = events.count * RUNS / secs
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(out_root, ignore_errors=True)
    m = result.metrics
    m["cold_hot_ratio"] = m["cold_rec_s"] / m["hot_rec_s"] if m["hot_rec_s"] else float("nan")
    m["event_bytes"] = events.total_bytes / events.count
    m["messages"] = float(events.count)


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """The backfill case on tierd; nothing on Tansu (it has no tiered storage)."""
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no tiered storage)")
        return []
    if not ctx.case_selected(CASE):
        return []
    result = ctx.new_result(NAME, CASE)
    try:
        run_case(ctx, result)
        m = result.metrics
        ctx.log(f"{NAME} {CASE}: cold {m['cold_rec_s']:,.0f} rec/s ({m['cold_s']:.2f} s), "
                f"hot {m['hot_rec_s']:,.0f} rec/s ({m['hot_s']:.2f} s), cold/hot "
                f"{m['cold_hot_ratio']:.2f}; {m['remote_pct']:.1f} % remote"
                f"{'' if result.verified else ' NOT VERIFIED'}")
    except Exception as exc:  # noqa: BLE001 - record it as the case's error
        result.error = f"{type(exc).__name__}: {exc}"
        ctx.log(f"{NAME} {CASE}: ERROR {result.error}")
    return [result]


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: Spark backfill (deploy/spark/backfill.py, local[2]) records/s "
        "over a tiered topic (remote, fs) vs a local one, Parquet aggregates verified",
        run=run,
        metrics=METRICS,
        order=35,
    )
)
