"""A wiped broker rebuilt from the remote tier (issue 8, KIP-405 "Follower
Replication") vs the same topic re-replicated in full. tierd only - Tansu has no
cluster or tiered storage here, so its rounds report nothing.

In each round, one fresh three-node tierd cluster (:mod:`bench.cluster`) with
tiering on over one shared directory (the filesystem RSM; ``__remote_log_metadata``
with replication factor 3), and two one-partition topics with RF 3, min.insync 2
and the same ``segment.bytes``: ``tiered`` (remote.storage.enable=true,
local.retention.bytes about 2 % of the data) and ``plain`` (not tiered, default
retention). The same amount of data (1 GiB x ``--scale``, 1 KiB incompressible
values, uncompressed, so the log on disk is as large) goes to each, one topic
at a time:

1. Bulk-produce to ``tiered`` (acks=all) and wait until every replica's local log
   is trimmed to local retention (so the rest is in the tier).
2. Wipe: a steady producer (500 msgs/s of 1 KiB, acks=all, linger 0) runs on the
   topic; after a steady window with every replica in sync, one follower (if
   there is a choice, not the controller and not the other topic's leader) is
   SIGKILLed; once the ISR has dropped it, its data directory is emptied and it is
   restarted on the same port. The rebuild time runs from the restart (process
   launch, so it includes tierd's own start, also reported alone) to the moment
   Metadata shows it back in the topic's ISR.
3. Bulk-produce as much to ``plain`` and do the same wipe on ``plain``.

Two wipes, one per topic, each after its own topic got its data: a wipe removes a
broker's every partition, so with both topics full the tiered measurement would
also carry a full re-replication of ``plain`` on the same fetcher (and the same
cores). Here the wipe for ``tiered`` finds ``plain`` still empty; the wipe for
``plain`` also rebuilds ``tiered`` (a small local tail) alongside, as a real wiped
broker would. The ``plain`` rebuild is capped at a deadline; if it is reached the
figure (and the ratio) is a lower bound and says so in the notes.

Produce p99 of the steady producer: records sent during the steady window before
the kill vs those sent between the restarted node's port opening (it is running
and can fetch) and its return to the ISR. The outage in between, when acks=all
waits for the dead replica until the ISR shrinks, is in neither.

Everything started here (ZooKeeper, nodes, the remote directory) is stopped or
removed before ``run`` returns.
"""

from __future__ import annotations

import random
import shutil
import signal
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from bench.cluster import QUIET_LOG_LEVEL, WAIT_S, Cluster, running_cluster, wait_for
from bench.kafka_util import producer_config
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.tiered import TIERED_OVERRIDES, remote_tier
from bench.stats import percentile, ratio

NAME = "rebuild"
CASE = "wipe-fs-1KiB"
MiB = 1 << 20
GiB = 1 << 30
# Data per topic before --scale.
DATA_BYTES = GiB
VALUE_SIZE = 1024
HEADER = struct.Struct(">Q")
# 16 MiB segments at 1 GiB (64 of them); smaller data gets smaller segments (at
# least 1 MiB) so the tier still holds many.
SEGMENT_BYTES = 16 * MiB
MIN_SEGMENT_BYTES = MiB
SEGMENTS_PER_TOPIC = 64
LOCAL_RETENTION_SHARE = 0.02
# Disk needed per byte of data at the peak: 3 replicas of each topic plus the tier
# (local retention trims tiered replicas only once their segments are copied), and
# what stays free for everyone else.
DISK_FACTOR = 7.5
DISK_RESERVE = 2 * GiB
BULK_LINGER_MS = 5
# The steady producer: 1 KiB values, linger 0, acks=all, at most 5 requests in
# flight (the Java client's default; librdkafka's is 1,000,000, one request per
# record, and three brokers on two shared cores fall behind 1,000 acks=all
# requests/s: latencies then grow for as long as it runs). At 500 msgs/s the steady
# state is well within what the cluster sustains, so the rebuild's effect shows.
STEADY_RATE = 500
STEADY_IN_FLIGHT = 5
STEADY_SECONDS = 10.0
STEADY_WARMUP_S = 2.0
STEADY_FLUSH_S = 60.0
# A tiered rebuild that takes longer is an error; a plain one is cut off there and
# reported as a lower bound.
TIERED_DEADLINE_S = 180.0
PLAIN_DEADLINE_S = 240.0
POLL_INTERVAL_S = 0.05
# Metadata partitions only need a few replicas; RF 3 so that a wiped broker
# rebuilds them too, as in the system tests.
REBUILD_OVERRIDES = {
    **TIERED_OVERRIDES,
    "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
}

METRICS = (
    MetricSpec("data_mib", "data per topic", "MiB", True, "{:,.0f}"),
    MetricSpec("tiered_local_pct", "tiered: local share per replica", "%", False, "{:,.1f}"),
    MetricSpec("remote_mib", "tiered: in the remote tier", "MiB", True, "{:,.0f}"),
    MetricSpec("tier_wait_s", "tiered & trimmed after produce", "s", False, "{:,.1f}"),
    MetricSpec("tiered_rebuild_s", "tiered: restart to back in ISR", "s", False, "{:,.2f}"),
    MetricSpec("plain_rebuild_s", "plain: restart to back in ISR", "s", False, "{:,.2f}"),
    MetricSpec("rebuild_ratio", "plain / tiered rebuild time", "x", True, "{:,.1f}"),
    MetricSpec("startup_s", "restart to port open (mean)", "s", False, "{:,.2f}"),
    MetricSpec("rebuild_ratio_up", "plain / tiered, from port open", "x", True, "{:,.1f}"),
    MetricSpec("plain_mib_s", "plain: replicated MiB/s from port open", "MiB/s", True,
               "{:,.0f}"),
    MetricSpec("tiered_copied_mib", "tiered: replicated to wiped node", "MiB", False,
               "{:,.1f}"),
    MetricSpec("plain_copied_mib", "plain: replicated to wiped node", "MiB", False,
               "{:,.1f}"),
    MetricSpec("tiered_p99_steady_ms", "tiered: produce p99 steady", "ms", False, "{:,.2f}"),
    MetricSpec("tiered_p99_rebuild_ms", "tiered: produce p99 in rebuild", "ms", False,
               "{:,.2f}"),
    MetricSpec("plain_p99_steady_ms", "plain: produce p99 steady", "ms", False, "{:,.2f}"),
    MetricSpec("plain_p99_rebuild_ms", "plain: produce p99 in rebuild", "ms", False,
               "{:,.2f}"),
    MetricSpec("plain_capped", "plain rebuild cut off (lower bound)", "n", False, "{:,.0f}"),
)

TARGETS = (Target("rebuild_ratio", TargetKind.ABSOLUTE_AT_LEAST, 50.0, unit="x"),)


# -- sizing and pure helpers ---------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How much goes to each topic and how its segments and retention are sized."""

    count: int
    segment_bytes: int
    local_retention: int
    note: str = ""

    @property
    def data_bytes(self) -> int:
        """Return the value bytes per topic."""
        return self.count * VALUE_SIZE


def plan(scale: float, free_bytes: int) -> Plan:
    """Size the round: 1 GiB x ``scale`` per topic, lowered (with a note) to what the
    disk holding the data directories can take."""
    wanted = int(DATA_BYTES * scale)
    fits = int(max(0, free_bytes - DISK_RESERVE) / DISK_FACTOR)
    note = ""
    data = wanted
    if fits < wanted:
        data = fits
        note = (f"data per topic lowered from {wanted / MiB:,.0f} MiB to {data / MiB:,.0f} MiB: "
                f"{free_bytes / GiB:.1f} GiB free, {DISK_FACTOR:g}x the data plus "
                f"{DISK_RESERVE / GiB:.0f} GiB needed")
    count = max(1000, data // VALUE_SIZE)
    segment = min(SEGMENT_BYTES, max(MIN_SEGMENT_BYTES, count * VALUE_SIZE // SEGMENTS_PER_TOPIC))
    return Plan(count, segment, max(1, int(count * VALUE_SIZE * LOCAL_RETENTION_SHARE)), note)


@lru_cache(maxsize=1)
def random_block(size: int = 4 * MiB, seed: int = 8) -> bytes:
    """Return ``size`` pseudo-random (incompressible) bytes."""
    return random.Random(seed).randbytes(size)


def make_value(seq: int, size: int = VALUE_SIZE) -> bytes:
    """Return value ``seq``: its number, then a slice of the random block."""
    block = random_block()
    pad = size - HEADER.size
    start = (seq * 7919) % (len(block) - pad)
    return HEADER.pack(seq) + block[start:start + pad]


def window_p99(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """p99 (ms) of the latencies of records sent in [start, end] (NaN if none)."""
    return percentile([lat for sent, lat in samples if start <= sent <= end], 99) * 1e3


def pick_victim(leader: int, isr: list[int], controller: int, busy: set[int]) -> int:
    """A follower in the ISR to wipe: not the controller if there is a choice, then
    preferably none of ``busy`` (leaders of the other bench topic)."""
    followers = [n for n in isr if n != leader]
    if not followers:
        raise RuntimeError(f"no follower in the ISR {isr} (leader {leader})")
    return min(followers, key=lambda n: (n == controller, n in busy))


def local_log_bytes(data_dir: Path, topic: str) -> tuple[int, int]:
    """(bytes of the .log files, base offset of the first) of partition 0 on a node;
    (0, -1) if it has none."""
    logs = sorted((int(p.stem), p) for p in (data_dir / f"{topic}-0").glob("*.log")
                  if p.stem.isdigit())
    size = 0
    for _, path in logs:
        try:
            size += path.stat().st_size
        except FileNotFoundError:  # deleted by retention while we looked
            pass
    return size, logs[0][0] if logs else -1


def tree_bytes(root: Path) -> int:
    """Total size of the files under ``root``."""
    total = 0
    for path in root.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


# -- producers ---------------------------------------------------------------------


class Deliveries:
    """Delivery-report callback: counts errors, optionally keeps (sent, latency)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.samples: list[tuple[float, float]] = []
        self.delivered = 0
        self.errors = 0
        self.first_error = ""

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            self.first_error = self.first_error or str(err)
            return
        self.delivered += 1
        latency = msg.latency()
        if self.keep and latency is not None:
            self.samples.append((time.monotonic() - latency, latency))


def bulk_produce(bootstrap: str, topic: str, count: int, timeout: float) -> float:
    """Produce ``count`` values as fast as the client goes (acks=all); return seconds."""
    reports = Deliveries(keep=False)
    producer = Producer(producer_config(bootstrap, "all", "none", BULK_LINGER_MS,
                                        on_delivery=reports, log_level=QUIET_LOG_LEVEL))
    started = time.monotonic()
    for seq in range(count):
        value = make_value(seq)
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.005)
        if seq % 1024 == 0:
            producer.poll(0)
    left = producer.flush(timeout)
    elapsed = time.monotonic() - started
    if left or reports.errors:
        raise RuntimeError(f"bulk produce to {topic}: {left} undelivered, {reports.errors} "
                           f"errors (first: {reports.first_error})")
    return elapsed


class SteadyProducer:
    """A thread producing 1 KiB values at STEADY_RATE (acks=all, linger 0, at most
    STEADY_IN_FLIGHT requests in flight) until stopped; every delivery is kept as
    (sent, latency)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.reports = Deliveries(keep=True)
        self.producer = Producer(producer_config(
            bootstrap, "all", "none", 0, on_delivery=self.reports,
            log_level=QUIET_LOG_LEVEL,
            **{"message.timeout.ms": int(PLAIN_DEADLINE_S * 2000),
               "max.in.flight.requests.per.connection": STEADY_IN_FLIGHT}))
        self.topic = topic
        self.sent = 0
        self.left = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"steady-{topic}", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        interval = 1.0 / STEADY_RATE
        start = time.monotonic()
        while not self._stop.is_set():
            due = start + self.sent * interval
            while (delay := due - time.monotonic()) > 0:
                self.producer.poll(delay)
            self.producer.produce(self.topic, make_value(self.sent), partition=0)
            self.sent += 1
            self.producer.poll(0)
        self.left = self.producer.flush(STEADY_FLUSH_S)

    def stop(self) -> None:
        """Stop sending and wait for the outstanding deliveries."""
        self._stop.set()
        self._thread.join(STEADY_FLUSH_S + 10)

    @property
    def samples(self) -> list[tuple[float, float]]:
        """(sent, latency) of every delivered record."""
        return self.reports.samples


# -- one wipe ----------------------------------------------------------------------


@dataclass
class Wipe:
    """What one wipe of a follower measured."""

    victim: int
    rebuild_s: float
    startup_s: float
    capped: bool
    copied_bytes: int
    local_start: int
    p99_steady_ms: float
    p99_rebuild_ms: float
    rebuild_samples: int
    notes: list[str] = field(default_factory=list)


def wipe_and_rebuild(ctx: ScenarioContext, cluster: Cluster, topic: str, other: str,
                     deadline_s: float, must_finish: bool) -> Wipe:
    """With a steady producer on ``topic``: kill a follower (not the leader of
    ``other`` if there is a choice), wait until the ISR has dropped it, empty its data
    directory, restart it and time its return to the ISR."""
    wait_for(f"{topic} fully in sync", lambda: cluster.in_sync(topic))
    with SteadyProducer(cluster.bootstrap, topic) as steady:
        time.sleep(STEADY_WARMUP_S)
        steady_from = time.monotonic()
        time.sleep(STEADY_SECONDS)
        leader, isr, controller = cluster.partition(topic)
        victim = pick_victim(leader, isr, controller, {cluster.partition(other)[0]})
        node = cluster.nodes[victim]
        killed = time.monotonic()
        node.send_signal(signal.SIGKILL)
        if node.wait_exit(WAIT_S) is None:
            raise TimeoutError(f"node {victim} still running {WAIT_S:.0f}s after SIGKILL")
        wait_for(f"node {victim} out of the ISR of {topic}",
                 lambda: victim not in cluster.partition(topic)[1])
        dropped = time.monotonic()
        shutil.rmtree(node.data_dir)
        node.data_dir.mkdir()
        restarted = time.monotonic()
        node.start()
        up = time.monotonic()
        ctx.log(f"{NAME}: {topic}: node {victim} killed (leader {leader}, controller "
                f"{controller}), out of the ISR after {dropped - killed:.1f}s, wiped and "
                f"restarted (port open after {up - restarted:.1f}s)")
        deadline = restarted + deadline_s
        capped = False
        while True:
            try:
                if victim in cluster.partition(topic)[1]:
                    break
            except Exception:  # noqa: BLE001 - a metadata timeout counts as not yet
                pass
            if time.monotonic() > deadline:
                if must_finish:
                    raise TimeoutError(
                        f"wiped node {victim} not back in the ISR of {topic} after "
                        f"{deadline_s:.0f}s; its log tail:\n{node.log_tail(40)}")
                capped = True
                break
            time.sleep(POLL_INTERVAL_S)
        rejoined = time.monotonic()
        copied, local_start = local_log_bytes(node.data_dir, topic)
    wipe = Wipe(victim=victim, rebuild_s=rejoined - restarted, startup_s=up - restarted,
                capped=capped, copied_bytes=copied, local_start=local_start,
                p99_steady_ms=window_p99(steady.samples, steady_from, steady_from
                                         + STEADY_SECONDS),
                p99_rebuild_ms=window_p99(steady.samples, up, rejoined),
                rebuild_samples=sum(up <= sent <= rejoined for sent, _ in steady.samples))
    r = steady.reports
    if r.errors or steady.left:
        wipe.notes.append(f"{topic}: steady producer: {r.errors} failed, {steady.left} "
                          f"undelivered of {steady.sent} (first: {r.first_error})")
    return wipe


# -- the round ---------------------------------------------------------------------


def wait_trimmed(cluster: Cluster, topic: str, limit: int, timeout: float) -> dict[int, int]:
    """Until every replica of ``topic`` keeps at most ``limit`` bytes of log locally
    (local retention deletes only segments already in the tier); return the sizes."""

    def sizes() -> dict[int, int] | None:
        found = {n: local_log_bytes(b.data_dir, topic)[0] for n, b in cluster.nodes.items()}
        return found if all(s <= limit for s in found.values()) else None

    try:
        return wait_for(f"{topic} tiered and trimmed to {limit / MiB:.1f} MiB on every node",
                        sizes, timeout)
    except TimeoutError as exc:
        now = {n: local_log_bytes(b.data_dir, topic)[0] / MiB for n, b in cluster.nodes.items()}
        raise TimeoutError(f"{exc}; local MiB now: "
                           + ", ".join(f"node {n} {s:.0f}" for n, s in now.items())) from exc


def record_wipe(result: CaseResult, side: str, wipe: Wipe, plan_: Plan) -> None:
    """Store one wipe's figures under ``side`` ('tiered' or 'plain')."""
    m = result.metrics
    m[f"{side}_rebuild_s"] = wipe.rebuild_s
    m[f"{side}_copied_mib"] = wipe.copied_bytes / MiB
    m[f"{side}_p99_steady_ms"] = wipe.p99_steady_ms
    m[f"{side}_p99_rebuild_ms"] = wipe.p99_rebuild_ms
    result.notes.extend(wipe.notes)
    result.notes.append(
        f"{side}: wiped node {wipe.victim}, back in the ISR {wipe.rebuild_s:.2f}s after the "
        f"restart{' (cut off: lower bound)' if wipe.capped else ''}; its local log then "
        f"started at offset {wipe.local_start} with {wipe.copied_bytes / MiB:.1f} MiB "
        f"(the topic has {plan_.count:,} bulk records); produce p99 over "
        f"{wipe.rebuild_samples} records sent during the rebuild")


def run_case(ctx: ScenarioContext, result: CaseResult) -> None:
    """One cluster, the tiered wipe, then the plain wipe."""
    config = ctx.config
    tmp = Path(tempfile.gettempdir())
    p = plan(config.scale, shutil.disk_usage(tmp).free)
    if p.note:
        ctx.log(f"{NAME}: NOTE {p.note}")
        result.notes.append(p.note)
    m = result.metrics
    m["data_mib"] = p.data_bytes / MiB
    m["messages"] = float(p.count)
    tiered = ctx.topic_name(NAME, "tiered")
    plain = ctx.topic_name(NAME, "plain")
    segment = {"segment.bytes": str(p.segment_bytes)}
    log_dir = config.log_dir / f"rebuild-round{ctx.round + 1}"
    produce_timeout = 120.0 + p.data_bytes / (2 * MiB)
    with remote_tier("fs", log_dir) as settings, running_cluster(
            config, log_dir, {**REBUILD_OVERRIDES, **settings}) as cluster:
        remote_root = Path(settings["rsm.config.dir"])
        cluster.create_topic(tiered, 1, {**segment, "remote.storage.enable": "true",
                                         "local.retention.bytes": str(p.local_retention)})
        cluster.create_topic(plain, 1, segment)
        ctx.log(f"{NAME}: producing {p.data_bytes / MiB:,.0f} MiB to {tiered} "
                f"({p.segment_bytes / MiB:g} MiB segments, local retention "
                f"{p.local_retention / MiB:.1f} MiB)")
        secs = bulk_produce(cluster.bootstrap, tiered, p.count, produce_timeout)
        produced = time.monotonic()
        sizes = wait_trimmed(cluster, tiered, p.local_retention + p.segment_bytes,
                             produce_timeout)
        m["tier_wait_s"] = time.monotonic() - produced
        m["tiered_local_pct"] = 100.0 * max(sizes.values()) / p.data_bytes
        m["remote_mib"] = tree_bytes(remote_root) / MiB
        ctx.log(f"{NAME}: {tiered}: produced in {secs:.1f}s "
                f"({p.data_bytes / MiB / max(secs, 1e-9):.0f} MiB/s), tiered and trimmed "
                f"{m['tier_wait_s']:.1f}s later; local MiB per node "
                + ", ".join(f"{n}: {s / MiB:.1f}" for n, s in sizes.items())
                + f"; remote tier {m['remote_mib']:.0f} MiB")
        wipe = wipe_and_rebuild(ctx, cluster, tiered, plain, TIERED_DEADLINE_S,
                                must_finish=True)
        record_wipe(result, "tiered", wipe, p)
        if wipe.local_start <= 0:
            result.verified = False
            result.notes.append(f"tiered: the wiped node's log starts at {wipe.local_start}: "
                                f"it replicated from the start, not from the tier")
        ctx.log(f"{NAME}: {tiered}: back in the ISR {wipe.rebuild_s:.2f}s after the restart "
                f"({wipe.copied_bytes / MiB:.1f} MiB local from offset {wipe.local_start}); "
                f"produce p99 {wipe.p99_steady_ms:.1f} ms steady, "
                f"{wipe.p99_rebuild_ms:.1f} ms during the rebuild")

        ctx.log(f"{NAME}: producing {p.data_bytes / MiB:,.0f} MiB to {plain}")
        secs = bulk_produce(cluster.bootstrap, plain, p.count, produce_timeout)
        ctx.log(f"{NAME}: {plain}: produced in {secs:.1f}s "
                f"({p.data_bytes / MiB / max(secs, 1e-9):.0f} MiB/s)")
        wait_for(f"{tiered} fully in sync", lambda: cluster.in_sync(tiered))
        plain_wipe = wipe_and_rebuild(ctx, cluster, plain, tiered, PLAIN_DEADLINE_S,
                                      must_finish=False)
        record_wipe(result, "plain", plain_wipe, p)
        m["plain_capped"] = float(plain_wipe.capped)
        m["startup_s"] = (wipe.startup_s + plain_wipe.startup_s) / 2
        m["rebuild_ratio"] = ratio(plain_wipe.rebuild_s, wipe.rebuild_s)
        plain_up = plain_wipe.rebuild_s - plain_wipe.startup_s
        m["rebuild_ratio_up"] = ratio(plain_up, wipe.rebuild_s - wipe.startup_s)
        m["plain_mib_s"] = ratio(plain_wipe.copied_bytes / MiB, plain_up)
        if plain_wipe.capped:
            result.notes.append(
                f"plain rebuild cut off at {PLAIN_DEADLINE_S:.0f}s with "
                f"{plain_wipe.copied_bytes / MiB:.0f} of {p.data_bytes / MiB:.0f} MiB copied: "
                f"plain time and ratio are lower bounds")
        ctx.log(f"{NAME}: {plain}: back in the ISR "
                f"{'>= ' if plain_wipe.capped else ''}{plain_wipe.rebuild_s:.2f}s after the "
                f"restart ({plain_wipe.copied_bytes / MiB:.1f} MiB); plain/tiered "
                f"{'>= ' if plain_wipe.capped else ''}{m['rebuild_ratio']:.1f}x; produce p99 "
                f"{plain_wipe.p99_steady_ms:.1f} ms steady, {plain_wipe.p99_rebuild_ms:.1f} ms "
                f"during the rebuild")


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """The two wipes on a fresh tiered cluster; nothing on Tansu."""
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no cluster or tiered storage "
                f"here)")
        return []
    if not ctx.case_selected(CASE):
        return []
    result = ctx.new_result(NAME, CASE)
    try:
        run_case(ctx, result)
    except Exception as exc:  # noqa: BLE001 - record it; the cluster is already stopped
        stage = "plain" if "tiered_rebuild_s" in result.metrics else "tiered"
        result.error = f"{stage}: {type(exc).__name__}: {exc}"
        ctx.log(f"{NAME}: ERROR {result.error}")
    return [result]


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: wipe one broker of three, time until it is back in the "
        "ISR: a topic rebuilt from the tier vs the same topic not tiered (1 GiB each)",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=50,
    )
)
