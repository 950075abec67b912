"""The log cleaner (cleanup.policy=compact): cleaning throughput and memory, group
coordinator restart time before vs after __consumer_offsets is cleaned, and produce
latency while a pass runs. tierd only - its rounds against Tansu report nothing.

Two cases, each on fresh tierds of its own (beside the round's plain broker):

``clean-1KiB-lz4`` (log.cleaner.backoff.ms=200):

1. A compacted topic (1 partition, segment.bytes 8 MiB, the default
   min.cleanable.dirty.ratio 0.5) is filled with 100 MiB of 1 KiB values
   (102,400 × ``--scale``, lz4, acks=1) over 10,000 keys: each key once, then
   keys drawn at random (about ten updates per key). Cleaning is held back while it
   fills (min.compaction.lag.ms ~ forever), so the whole backlog is dirty and is
   cleaned at once, without the fill's producer competing for the two cores;
   min.compaction.lag.ms back to 0 (IncrementalAlterConfigs) releases it, and the
   cleaner picks the topic up within a backoff. Reported from the broker's
   "cleaned log" lines of the topic: dirty MB/s (bytes read by the passes over
   their time), passes, recopy (bytes written over bytes read); the topic's size on
   disk before/after; the peak RSS of the broker plus its children (the cleaner
   worker process, multiprocessing's resource tracker), sampled every 100 ms from
   the release until the cleaner is idle again. The topic is then read back: every
   key's last value must be the last one produced for it (else: not verified).
2. A burst of 4× as many updates (400 MiB, same keys) is held back the same way
   and released: one pass of ~5 s. A steady producer (2,000 msgs/s of 1 KiB, linger
   0, acks=1: one record a request) writes to a second, not compacted topic for 5 s
   from the release; the records it sent while the pass ran (the pass's end time
   and duration, from its log line) give p50/p99 while cleaning, against 5 s of the
   same with the cleaner idle: before the burst's release in even rounds, after
   its pass in odd ones, so drift over the round cancels. Read back again.

``offsets-restart`` (offsets.topic.num.partitions=1, offsets.topic.segment.bytes
16 MiB, so the offsets log has closed segments):

1. With the cleaner off, 1,000,000 offset commits (× ``--scale``) are written with
   raw OffsetCommit v7 requests (``system_tests._proc.RawClient``), 100 commits a
   request (10 groups × one 100-partition topic), 8 requests pipelined; simple
   commits: generation -1, empty member id, no group membership.
2. "before": SIGTERM, start again (cleaner still off); the restart time runs from
   the process launch until an OffsetFetch for one group returns its last committed
   offsets (tierd loads __consumer_offsets before it opens its port).
3. Started with the cleaner on; once a "cleaned log" line for __consumer_offsets-0
   is there and the cleaner is idle, SIGTERM and start again: "after".
4. After each restart every group's offsets are fetched and must be the last
   committed ones (otherwise the case does not verify). Also reported: the
   __consumer_offsets-0 size before/after cleaning and the records replayed by each
   restart (from the broker's "group state loaded" line; the active segment is never
   cleaned, so "after" still replays whatever it holds).

Everything started here is stopped before the case returns, on errors too.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from confluent_kafka import KafkaError, Message
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from bench.brokers import LOOPBACK, BrokerProcess, BrokerSpec, tierd_spec
from bench.kafka_util import DeliveryTracker, base_config, wait_metadata_ready
from bench.payload import make_value
from bench.procstat import PeakRss
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec, Target, TargetKind
from bench.scenarios.tiered import bulk_produce, create_topics, paced_produce
from bench.stats import percentile

if TYPE_CHECKING:
    from system_tests._proc import RawClient

NAME = "compaction"
CLEAN_CASE = "clean-1KiB-lz4"
OFFSETS_CASE = "offsets-restart"
MIB = 1 << 20
SIZE = 1024
# 100 MiB of 1 KiB values before --scale, over this many keys (~10 updates each).
FILL_COUNT = 102_400
KEYS = 10_000
SEGMENT_BYTES = 8 << 20
BACKOFF_MS = 200
# min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio: left at the default.
MIN_CLEANABLE_RATIO = 0.5
# min.compaction.lag.ms while the topic fills: nothing is old enough to clean.
HOLD_LAG_MS = 2**62
CODEC = "lz4"
# Then a burst of this many times the fill (400 MiB, ~220 MiB on disk), held back and
# released at once: a pass of ~5 s (~40 MB/s here) for the latency phase.
BURST_FACTOR = 4
# Steady produce while idle / while cleaning (as the tiered scenario's paced phase).
PACED_RATE = 2000
PACED_SECONDS = 5.0
PACED_LINGER_MS = 0
PACED_VALUES = 1000
# Fewer records than this sent during a pass: the while-cleaning p99 is noted as thin.
MIN_CLEAN_SAMPLES = 1000
RSS_INTERVAL_S = 0.1
# The cleaner counts as idle again once its last pass ended this long ago.
IDLE_AFTER_MS = 1000.0
CLEAN_TIMEOUT = 300.0
# __consumer_offsets commits before --scale (issue 11).
COMMITS = 1_000_000
COMMIT_GROUPS = 10
COMMIT_PARTITIONS = 100
PIPELINE = 8
OFFSET_COMMIT_VERSION = 7
OFFSET_FETCH_VERSION = 5
# 16 MiB at full size (issue 11); scaled down with the commits so the log keeps the
# same layout (five closed segments and an active one: ~94 bytes a commit with
# these group and topic names).
OFFSETS_SEGMENT_BYTES = 16 << 20
MIN_OFFSETS_SEGMENT_BYTES = 256 << 10
OFFSETS_TOPIC = "__consumer_offsets"
STOP_TIMEOUT = 30.0
LOAD_TIMEOUT = 180.0
RESTART_TARGET_S = 2.0
P99_RATIO_TARGET = 1.2

CLEANED_LINE = re.compile(r"^(\S+) \[info\s*\] cleaned log\s+(.*)$", re.M)
LOADED_LINE = re.compile(r"\] group state loaded\s+.*?partition=0 records=(\d+)")
PROBLEM_LINE = re.compile(r"^.*(partition marked uncleanable|cleaning pass abandoned|"
                          r"cleaner worker died|Traceback).*$", re.M)
METRICS_LINE = re.compile(r"tierd listening on \S+ \(metrics: (\S+)\)")
FIELD = re.compile(r"(\w+)=(\S+)")

METRICS = (
    # clean-1KiB-lz4: cleaning the 100 MiB fill
    MetricSpec("clean_mb_s", "cleaning throughput (bytes read / pass time)", "MB/s", True, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("clean_passes", "cleaning passes", "passes", False, "{:,.0f}", cases=CLEAN_CASE),
    MetricSpec("clean_mib", "bytes read by the passes", "MiB", False, "{:,.1f}",
               cases=CLEAN_CASE),
    MetricSpec("clean_s", "time in passes", "s", False, "{:,.2f}", cases=CLEAN_CASE),
    MetricSpec("recopy_pct", "recopy (bytes written / read)", "%", False, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("topic_mib_before", "topic on disk before cleaning", "MiB", False, "{:,.1f}",
               cases=CLEAN_CASE),
    MetricSpec("topic_mib_after", "topic on disk after cleaning", "MiB", False, "{:,.1f}",
               cases=CLEAN_CASE),
    MetricSpec("records_left_fill", "records left after cleaning (10,000 keys)", "records",
               False, "{:,.0f}", cases=CLEAN_CASE),
    MetricSpec("rss_before_mib", "RSS broker + children before cleaning", "MiB", False,
               "{:,.1f}", cases=CLEAN_CASE),
    MetricSpec("peak_rss_mib", "peak RSS broker + children while cleaning", "MiB", False,
               "{:,.1f}", cases=CLEAN_CASE),
    MetricSpec("peak_children_rss_mib", "peak RSS children (cleaner worker + tracker)", "MiB",
               False, "{:,.1f}", cases=CLEAN_CASE),
    # clean-1KiB-lz4: the big pass, and produce latency while it runs vs idle
    MetricSpec("big_clean_mb_s", "big pass throughput", "MB/s", True, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("big_clean_s", "big pass time", "s", False, "{:,.2f}", cases=CLEAN_CASE),
    MetricSpec("big_clean_mib", "big pass read", "MiB", False, "{:,.1f}", cases=CLEAN_CASE),
    MetricSpec("big_peak_rss_mib", "peak RSS broker + children, big pass", "MiB", False,
               "{:,.1f}", cases=CLEAN_CASE),
    MetricSpec("p50_idle_ms", "produce p50, cleaner idle", "ms", False, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("p99_idle_ms", "produce p99, cleaner idle", "ms", False, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("p50_cleaning_ms", "produce p50, while cleaning", "ms", False, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("p99_cleaning_ms", "produce p99, while cleaning", "ms", False, "{:,.2f}",
               cases=CLEAN_CASE),
    MetricSpec("p99_ratio", "produce p99 cleaning/idle", "x", False, "{:,.3f}",
               cases=CLEAN_CASE),
    MetricSpec("cleaning_samples", "records sent while the big pass ran", "msgs", True,
               "{:,.0f}", cases=CLEAN_CASE),
    # offsets-restart
    MetricSpec("commits", "offset commits written", "commits", True, "{:,.0f}",
               cases=OFFSETS_CASE),
    MetricSpec("commit_rate", "commit write rate", "commits/s", True, "{:,.0f}",
               cases=OFFSETS_CASE),
    MetricSpec("offsets_mib_before", "__consumer_offsets-0 before cleaning", "MiB", False,
               "{:,.1f}", cases=OFFSETS_CASE),
    MetricSpec("offsets_mib_after", "__consumer_offsets-0 after cleaning", "MiB", False,
               "{:,.1f}", cases=OFFSETS_CASE),
    MetricSpec("active_mib", "  of which the active segment (never cleaned)", "MiB", False,
               "{:,.1f}", cases=OFFSETS_CASE),
    MetricSpec("offsets_clean_s", "__consumer_offsets cleaning pass time", "s", False,
               "{:,.2f}", cases=OFFSETS_CASE),
    MetricSpec("offsets_clean_mb_s", "__consumer_offsets cleaning throughput", "MB/s", True,
               "{:,.2f}", cases=OFFSETS_CASE),
    MetricSpec("records_before", "records replayed at restart, before", "records", False,
               "{:,.0f}", cases=OFFSETS_CASE),
    MetricSpec("records_after", "records replayed at restart, after", "records", False,
               "{:,.0f}", cases=OFFSETS_CASE),
    MetricSpec("restart_before_s", "restart to offsets loaded, before cleaning", "s", False,
               "{:,.2f}", cases=OFFSETS_CASE),
    MetricSpec("restart_after_s", "restart to offsets loaded, after cleaning", "s", False,
               "{:,.2f}", cases=OFFSETS_CASE),
    MetricSpec("restart_speedup", "restart before/after", "x", True, "{:,.2f}",
               cases=OFFSETS_CASE),
)

TARGETS = (
    Target("p99_ratio", TargetKind.ABSOLUTE_AT_MOST, P99_RATIO_TARGET, cases=CLEAN_CASE,
           unit="x"),
    Target("restart_after_s", TargetKind.ABSOLUTE_AT_MOST, RESTART_TARGET_S, cases=OFFSETS_CASE,
           unit="s"),
)


# -- the broker's own account: log lines and gauges ----------------------------------


@dataclass(frozen=True)
class CleanedPass:
    """One "cleaned log" line."""

    topic: str
    partition: int
    end: float  # wall-clock seconds (the line's timestamp)
    seconds: float
    bytes_in: int
    bytes_out: int

    @property
    def start(self) -> float:
        return self.end - self.seconds


def log_text(broker: BrokerProcess, start: int = 0) -> str:
    """The broker's log from byte ``start`` on."""
    with open(broker.log_path, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def log_size(broker: BrokerProcess) -> int:
    return broker.log_path.stat().st_size


def parse_passes(text: str, topic: str) -> list[CleanedPass]:
    """The "cleaned log" lines of ``topic`` in ``text``."""
    passes = []
    for stamp, rest in CLEANED_LINE.findall(text):
        fields = dict(FIELD.findall(rest))
        if fields.get("topic") != topic:
            continue
        end = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        passes.append(CleanedPass(topic, int(fields["partition"]), end,
                                  float(fields["seconds"]), int(fields["bytes_in"]),
                                  int(fields["bytes_out"])))
    return passes


def cleaner_problems(text: str) -> list[str]:
    """Lines saying a pass failed, was abandoned, or the broker raised."""
    return [m.group(0).strip()[:300] for m in PROBLEM_LINE.finditer(text)]


def metrics_url(broker: BrokerProcess, since: int) -> str:
    """The metrics endpoint the current run of ``broker`` announced (log from ``since``)."""
    deadline = time.monotonic() + 10.0
    while True:
        found = METRICS_LINE.findall(log_text(broker, since))
        if found:
            return str(found[-1])
        if time.monotonic() > deadline:
            raise RuntimeError(f"no metrics URL in {broker.log_path}")
        time.sleep(0.05)


def gauges(url: str) -> dict[str, float]:
    """The tierd_* cleaner gauges (unlabelled) of one scrape."""
    from system_tests._proc import scrape  # the system tests' Prometheus scraper

    snap = scrape(url)
    return {name: value for (name, labels), value in snap.samples.items()
            if name.startswith("tierd_") and not labels}


def dir_bytes(path: Path) -> int:
    """Bytes of the files in ``path`` (one partition directory)."""
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def check_alive(broker: BrokerProcess, what: str) -> None:
    if not broker.alive():
        raise RuntimeError(f"broker exited (code {broker.returncode()}) {what}; log tail:\n"
                           f"{broker.log_tail(40)}")


def wait_cleaned(broker: BrokerProcess, since: int, topic: str, url: str) -> list[CleanedPass]:
    """Until ``topic`` had a pass (logged after byte ``since``) and the cleaner is idle:
    its last pass ended IDLE_AFTER_MS ago and the dirtiest compacted log is below
    the cleaning ratio (``tierd_max_dirty_percent``; one cleaner thread looks again
    right after each pass)."""
    deadline = time.monotonic() + CLEAN_TIMEOUT
    while True:
        check_alive(broker, f"while cleaning {topic}")
        text = log_text(broker, since)
        passes = parse_passes(text, topic)
        if passes:
            g = gauges(url)
            if (g.get("tierd_time_since_last_run_ms", 0.0) >= IDLE_AFTER_MS
                    and g.get("tierd_max_dirty_percent", 100.0) < 100 * MIN_CLEANABLE_RATIO):
                return passes
        problems = [p for p in cleaner_problems(text) if "uncleanable" in p]
        if problems:
            raise RuntimeError(f"cleaner gave up on a partition: {problems[0]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not cleaned after {CLEAN_TIMEOUT:.0f}s "
                               f"({len(passes)} passes logged)")
        time.sleep(0.2)


def note_problems(result: CaseResult, broker: BrokerProcess, since: int) -> None:
    for line in cleaner_problems(log_text(broker, since)):
        result.notes.append(f"broker log: {line}")


# -- case 1: cleaning throughput, memory, produce latency ------------------------------


class TimedTracker(DeliveryTracker):
    """Delivery callback that also keeps each record's send time (its CreateTime)."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[tuple[float, float]] = []  # (sent, wall-clock s; latency s)

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        super().__call__(err, msg)
        latency = msg.latency()
        if err is None and latency is not None:
            self.samples.append((msg.timestamp()[1] / 1000.0, latency))


class Values(Sequence[bytes]):
    """Values ``first``.. ``first + count - 1`` of :func:`bench.payload.make_value`, built
    when read (the burst alone would hold 400 MiB)."""

    def __init__(self, first: int, count: int) -> None:
        self.first = first
        self.length = count

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if not -self.length <= index < self.length:
            raise IndexError(index)
        return make_value(self.first + index % self.length, SIZE)


def update_keys(count: int, seed: int, every_key_first: bool) -> list[bytes]:
    """Keys of ``count`` updates: optionally every key once first (shuffled), then keys
    drawn at random (~count/KEYS updates per key)."""
    rng = random.Random(seed)
    first = list(range(min(KEYS, count))) if every_key_first else []
    rng.shuffle(first)
    rest = [rng.randrange(KEYS) for _ in range(count - len(first))]
    return [b"key-%05d" % k for k in first + rest]


def last_values(keys: list[bytes], values: Values) -> dict[bytes, bytes]:
    """Each key's last value (what a compacted topic must keep)."""
    last = {key: i for i, key in enumerate(keys)}
    return {key: values[i] for key, i in last.items()}


def alter_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of ``configs`` on ``topic``."""
    admin = AdminClient(base_config(bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def hold_cleaning(bootstrap: str, topic: str, hold: bool) -> None:
    """min.compaction.lag.ms ~forever (nothing is old enough to clean) or 0."""
    alter_topic(bootstrap, topic, {"min.compaction.lag.ms": str(HOLD_LAG_MS if hold else 0)})


def latency_figures(result: CaseResult, side: str, latencies: list[float]) -> None:
    result.metrics[f"p50_{side}_ms"] = percentile(latencies, 50) * 1e3
    result.metrics[f"p99_{side}_ms"] = percentile(latencies, 99) * 1e3


def pass_figures(result: CaseResult, prefix: str, passes: list[CleanedPass]) -> None:
    """Throughput, count, bytes and time of ``passes`` as ``<prefix>clean_*``."""
    read = sum(p.bytes_in for p in passes)
    seconds = sum(p.seconds for p in passes)
    m = result.metrics
    m[f"{prefix}clean_passes"] = float(len(passes))
    m[f"{prefix}clean_mib"] = read / MIB
    m[f"{prefix}clean_s"] = seconds
    m[f"{prefix}clean_mb_s"] = read / 1e6 / seconds if seconds else float("nan")


def verify_compacted(bootstrap: str, topic: str, expected: dict[bytes, bytes],
                     result: CaseResult, when: str) -> None:
    """Read ``topic`` from the start: each key's last value must be ``expected``'s."""
    from system_tests._proc import consume_all

    last: dict[bytes, bytes | None] = {}
    records = consume_all(bootstrap, topic, 1)[0]
    for r in records:
        if r.key is not None:
            last[r.key] = r.value
    wrong = [k for k, v in expected.items() if last.get(k) != v]
    extra = set(last) - set(expected)
    result.metrics[f"records_left_{when}"] = float(len(records))
    if wrong or extra:
        result.verified = False
        result.notes.append(f"compacted topic read back after {when}: {len(wrong)} key(s) "
                            f"without their last value (e.g. {wrong[:3]}), {len(extra)} "
                            f"unknown key(s)")


def run_clean_case(ctx: ScenarioContext, result: CaseResult) -> None:
    config = ctx.config
    m = result.metrics
    count = max(2 * KEYS, int(round(FILL_COUNT * config.scale)))
    values = Values(0, count)
    keys = update_keys(count, 2 * ctx.round, every_key_first=True)
    expected = last_values(keys, values)
    compacted = ctx.topic_name(NAME, "compacted")
    paced = ctx.topic_name(NAME, "paced")
    log_dir = config.log_dir / f"{NAME}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    base = tierd_spec(config)
    spec = base.with_overrides(f"{base.label} (compaction)",
                               {"log.cleaner.backoff.ms": str(BACKOFF_MS)})
    with BrokerProcess(spec, log_dir / "tierd-clean.log", config.startup_timeout) as broker:
        wait_metadata_ready(broker.bootstrap, config.startup_timeout)
        url = metrics_url(broker, 0)
        create_topics(broker.bootstrap, {
            compacted: {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                        "min.compaction.lag.ms": str(HOLD_LAG_MS)},
            paced: {}}, 1)
        topic_dir = broker.data_dir / f"{compacted}-0"

        # 1. Clean the 100 MiB fill: throughput, passes, recopy, RSS.
        bulk_produce(broker.bootstrap, compacted, values, acks="1", codec=CODEC, keys=keys)
        check_alive(broker, "after the fill")
        m["topic_mib_before"] = dir_bytes(topic_dir) / MIB
        since = log_size(broker)
        with PeakRss(broker.pid, RSS_INTERVAL_S, children=True) as rss:
            m["rss_before_mib"] = rss.peak / MIB
            hold_cleaning(broker.bootstrap, compacted, False)
            passes = wait_cleaned(broker, since, compacted, url)
        note_problems(result, broker, since)
        pass_figures(result, "", passes)
        m["recopy_pct"] = (100.0 * sum(p.bytes_out for p in passes)
                           / max(1, sum(p.bytes_in for p in passes)))
        m["peak_rss_mib"] = rss.peak / MIB
        m["peak_children_rss_mib"] = rss.peak_children / MIB
        m["topic_mib_after"] = dir_bytes(topic_dir) / MIB
        verify_compacted(broker.bootstrap, compacted, expected, result, "fill")

        # 2. A big pass (a burst of updates, held back, then released) while a steady
        #    producer runs, against the same producer with the cleaner idle.
        hold_cleaning(broker.bootstrap, compacted, True)
        burst = Values(count, count * BURST_FACTOR)
        burst_keys = update_keys(len(burst), 2 * ctx.round + 1, every_key_first=False)
        expected.update(last_values(burst_keys, burst))
        bulk_produce(broker.bootstrap, compacted, burst, acks="1", codec=CODEC,
                     keys=burst_keys)
        check_alive(broker, "after the burst")
        steady = Values(0, PACED_VALUES)
        idle_first = ctx.round % 2 == 0

        def idle_p99() -> None:
            latencies = paced_produce(broker.bootstrap, paced, steady, PACED_RATE,
                                      PACED_SECONDS, PACED_LINGER_MS, acks="1")
            latency_figures(result, "idle", latencies)

        if idle_first:
            idle_p99()
        since = log_size(broker)
        tracker = TimedTracker()
        with PeakRss(broker.pid, RSS_INTERVAL_S, children=True) as rss:
            hold_cleaning(broker.bootstrap, compacted, False)
            paced_produce(broker.bootstrap, paced, steady, PACED_RATE, PACED_SECONDS,
                          PACED_LINGER_MS, acks="1", tracker=tracker)
            big = wait_cleaned(broker, since, compacted, url)
        if not idle_first:
            idle_p99()
        note_problems(result, broker, since)
        pass_figures(result, "big_", big)
        m["big_peak_rss_mib"] = rss.peak / MIB
        during = [lat for sent, lat in tracker.samples
                  if any(p.start <= sent <= p.end for p in big)]
        m["cleaning_samples"] = float(len(during))
        latency_figures(result, "cleaning", during)
        m["p99_ratio"] = (m["p99_cleaning_ms"] / m["p99_idle_ms"]
                          if during and m["p99_idle_ms"] else float("nan"))
        if len(during) < MIN_CLEAN_SAMPLES:
            result.notes.append(f"only {len(during)} records were sent while the big pass "
                                f"ran ({m['big_clean_s']:.2f}s)")
        verify_compacted(broker.bootstrap, compacted, expected, result, "burst")


# -- case 2: __consumer_offsets restart before / after cleaning ------------------------


def offset_for(request_index: int, partition: int) -> int:
    """The offset request ``request_index`` commits for ``partition`` (its group is
    ``request_index % COMMIT_GROUPS``): distinct per request and partition."""
    return (request_index // COMMIT_GROUPS) * COMMIT_PARTITIONS + partition


def group_name(round_index: int, g: int) -> str:
    return f"bench-compaction-r{round_index}-g{g}"


def commit_request(group: str, topic: str, request_index: int) -> Any:
    from kafka.protocol.consumer import OffsetCommitRequest

    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    return OffsetCommitRequest[OFFSET_COMMIT_VERSION](
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
        topics=[topic_cls(name=topic, partitions=[
            part_cls(partition_index=p, committed_offset=offset_for(request_index, p),
                     committed_leader_epoch=-1, committed_metadata="")
            for p in range(COMMIT_PARTITIONS)])])


def write_commits(port: int, groups: list[str], topic: str, requests: int
                  ) -> dict[str, int]:
    """``requests`` OffsetCommits of COMMIT_PARTITIONS each, round robin over
    ``groups``, PIPELINE in flight; raises on any error. Returns each group's last
    request index."""
    from kafka.protocol.consumer import OffsetCommitResponse

    from system_tests._proc import RawClient, encode_request

    last: dict[str, int] = {}
    inflight: deque[int] = deque()
    sent = done = 0
    with RawClient(LOOPBACK, port, timeout_s=60.0) as client:
        while done < requests:
            while sent < requests and len(inflight) < PIPELINE:
                group = groups[sent % len(groups)]
                correlation = client.next_correlation_id()
                client.send_raw(encode_request(commit_request(group, topic, sent),
                                               OFFSET_COMMIT_VERSION, correlation))
                inflight.append(correlation)
                last[group] = sent
                sent += 1
            resp = OffsetCommitResponse.decode(client.recv_frame(),
                                               version=OFFSET_COMMIT_VERSION, header=True)
            if resp.header.correlation_id != inflight.popleft():
                raise RuntimeError("OffsetCommit answered out of order")
            errors = {p.error_code for t in resp.topics for p in t.partitions} - {0}
            if errors:
                raise RuntimeError(f"OffsetCommit {done}: error code(s) {sorted(errors)}")
            done += 1
    return last


def fetch_offsets(client: RawClient, group: str, topic: str) -> tuple[int, dict[int, int]]:
    """(group error code, {partition: committed offset}) of one OffsetFetch."""
    from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

    topic_cls = OffsetFetchRequest.OffsetFetchRequestTopic
    req = OffsetFetchRequest[OFFSET_FETCH_VERSION](
        group_id=group, topics=[topic_cls(name=topic,
                                          partition_indexes=list(range(COMMIT_PARTITIONS)))])
    resp = client.request(req, OFFSET_FETCH_VERSION, OffsetFetchResponse)
    offsets = {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions
               if p.error_code == 0}
    return resp.error_code, offsets


def expected_offsets(last_request: int) -> dict[int, int]:
    return {p: offset_for(last_request, p) for p in range(COMMIT_PARTITIONS)}


def timed_restart(broker: BrokerProcess, spec: BrokerSpec, topic: str, probe: str,
                  want: dict[int, int]) -> float:
    """SIGTERM ``broker``, start it again as ``spec`` (same port and data); seconds
    from the launch until an OffsetFetch of group ``probe`` returns ``want``."""
    from system_tests._proc import RawClient

    broker.send_signal(signal.SIGTERM)
    code = broker.wait_exit(STOP_TIMEOUT)
    if code is None:
        raise RuntimeError(f"broker did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM")
    broker.spec = spec  # the next start() launches this command line
    started = time.monotonic()
    broker.start()
    deadline = started + LOAD_TIMEOUT
    seen: tuple[int, dict[int, int]] = (-1, {})
    with RawClient(LOOPBACK, broker.port, timeout_s=LOAD_TIMEOUT) as client:
        while time.monotonic() < deadline:
            seen = fetch_offsets(client, probe, topic)
            if seen[0] == 0 and seen[1] == want:
                return time.monotonic() - started
            check_alive(broker, "while loading the group coordinator")
            time.sleep(0.01)
    raise TimeoutError(f"group {probe} not loaded with its last offsets after "
                       f"{LOAD_TIMEOUT:.0f}s (last answer: error {seen[0]}, "
                       f"{len(seen[1])} partitions)")


def verify_offsets(broker: BrokerProcess, topic: str, last: dict[str, int], when: str,
                   result: CaseResult) -> None:
    """Every group's committed offsets must be its last commit's."""
    from system_tests._proc import RawClient

    wrong = []
    with RawClient(LOOPBACK, broker.port) as client:
        for group, index in last.items():
            error, offsets = fetch_offsets(client, group, topic)
            if error or offsets != expected_offsets(index):
                wrong.append(group)
    if wrong:
        result.verified = False
        result.notes.append(f"{when}: {len(wrong)} group(s) without their last committed "
                            f"offsets: {wrong[:3]}")


def records_replayed(broker: BrokerProcess, since: int) -> float:
    found = LOADED_LINE.findall(log_text(broker, since))
    return float(found[-1]) if found else float("nan")


def offsets_segment_bytes(scale: float) -> int:
    """offsets.topic.segment.bytes for ``--scale``: 16 MiB at 1 and above, else scaled."""
    return max(MIN_OFFSETS_SEGMENT_BYTES, int(OFFSETS_SEGMENT_BYTES * min(1.0, scale)))


def run_offsets_case(ctx: ScenarioContext, result: CaseResult) -> None:
    config = ctx.config
    requests = max(10, int(round(COMMITS * config.scale)) // COMMIT_PARTITIONS)
    groups = [group_name(ctx.round, g) for g in range(COMMIT_GROUPS)]
    topic = ctx.topic_name(NAME, "committed")
    log_dir = config.log_dir / f"{NAME}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    base = tierd_spec(config)
    offsets = {"offsets.topic.num.partitions": "1",
               "offsets.topic.segment.bytes": str(offsets_segment_bytes(config.scale)),
               "log.cleaner.backoff.ms": str(BACKOFF_MS)}
    off = base.with_overrides(f"{base.label} (offsets, cleaner off)",
                              {**offsets, "log.cleaner.enable": "false"})
    on = base.with_overrides(f"{base.label} (offsets, cleaner on)",
                             {**offsets, "log.cleaner.enable": "true"})
    m = result.metrics
    with BrokerProcess(off, log_dir / "tierd-offsets.log", config.startup_timeout) as broker:
        wait_metadata_ready(broker.bootstrap, config.startup_timeout)
        create_topics(broker.bootstrap, {topic: {}}, COMMIT_PARTITIONS)
        started = time.perf_counter()
        last = write_commits(broker.port, groups, topic, requests)
        m["commit_rate"] = requests * COMMIT_PARTITIONS / (time.perf_counter() - started)
        m["commits"] = float(requests * COMMIT_PARTITIONS)
        ctx.log(f"{NAME} {OFFSETS_CASE}: {m['commits']:,.0f} commits at "
                f"{m['commit_rate']:,.0f}/s")
        offsets_dir = broker.data_dir / f"{OFFSETS_TOPIC}-0"
        m["offsets_mib_before"] = dir_bytes(offsets_dir) / MIB
        if len(list(offsets_dir.glob("*.log"))) < 2:
            raise RuntimeError(f"{OFFSETS_TOPIC}-0 has no closed segment to clean "
                               f"({m['offsets_mib_before']:.1f} MiB in one segment)")
        probe = groups[-1]
        want = expected_offsets(last[probe])

        since = log_size(broker)
        m["restart_before_s"] = timed_restart(broker, off, topic, probe, want)
        m["records_before"] = records_replayed(broker, since)
        verify_offsets(broker, topic, last, "restart before cleaning", result)

        # Clean: start with the cleaner on and wait until it is done.
        since = log_size(broker)
        timed_restart(broker, on, topic, probe, want)
        passes = wait_cleaned(broker, since, OFFSETS_TOPIC, metrics_url(broker, since))
        note_problems(result, broker, since)
        seconds = sum(p.seconds for p in passes)
        m["offsets_clean_s"] = seconds
        m["offsets_clean_mb_s"] = (sum(p.bytes_in for p in passes) / 1e6 / seconds
                                   if seconds else float("nan"))
        m["offsets_mib_after"] = dir_bytes(offsets_dir) / MIB
        active = max(offsets_dir.glob("*.log"), key=lambda f: int(f.stem))
        m["active_mib"] = active.stat().st_size / MIB

        since = log_size(broker)
        m["restart_after_s"] = timed_restart(broker, on, topic, probe, want)
        m["records_after"] = records_replayed(broker, since)
        verify_offsets(broker, topic, last, "restart after cleaning", result)
        note_problems(result, broker, since)
    m["restart_speedup"] = m["restart_before_s"] / m["restart_after_s"]


# -- the scenario --------------------------------------------------------------------


CASES = ((CLEAN_CASE, run_clean_case), (OFFSETS_CASE, run_offsets_case))


def summary(case: str, m: dict[str, float]) -> str:
    if case == CLEAN_CASE:
        return (f"{m['clean_mb_s']:.2f} MB/s in {m['clean_passes']:.0f} pass(es), recopy "
                f"{m['recopy_pct']:.1f}%, peak RSS {m['peak_rss_mib']:.0f} MiB; produce p99 "
                f"idle {m['p99_idle_ms']:.2f} ms, cleaning {m['p99_cleaning_ms']:.2f} ms "
                f"(x{m['p99_ratio']:.2f})")
    return (f"restart {m['restart_before_s']:.2f} s before cleaning, "
            f"{m['restart_after_s']:.2f} s after; __consumer_offsets-0 "
            f"{m['offsets_mib_before']:.1f} -> {m['offsets_mib_after']:.1f} MiB")


def run(ctx: ScenarioContext) -> list[CaseResult]:
    """Both cases on tierd; nothing on Tansu (its log is not compacted here)."""
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} is compared only with itself)")
        return []
    results = []
    for case, fn in CASES:
        if not ctx.case_selected(case):
            continue
        result = ctx.new_result(NAME, case)
        try:
            fn(ctx, result)
            ctx.log(f"{NAME} {case}: {summary(case, result.metrics)}"
                    f"{'' if result.verified else ' NOT VERIFIED'}")
        except Exception as exc:  # noqa: BLE001 - record and go on with the next case
            result.error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"{NAME} {case}: ERROR {result.error}")
        results.append(result)
    return results


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: log cleaner throughput and RSS (1 KiB lz4, 10k keys), "
        "produce p99 while cleaning vs idle, restart with 1M offset commits before vs "
        "after __consumer_offsets is cleaned",
        run=run,
        metrics=METRICS,
        targets=TARGETS,
        order=34,
    )
)
