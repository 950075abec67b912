"""Fast checks of the harness's pure logic (no broker needed): ``pytest bench/tests``."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from bench.brokers import BrokerSpec, free_loopback_port, port_accepts
from bench.config import REPO_ROOT, BenchConfig
from bench.payload import Verifier, make_value, parse_header, payload_set
from bench.procstat import descendant_pids, tree_cpu_seconds
from bench.report import format_table
from bench.results import Target, TargetKind, Verdict
from bench.scenarios.throughput import matrix
from bench.stats import median, percentile, ratio


def test_median_and_percentile() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert math.isnan(median([]))
    assert median([math.nan, 5.0]) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5
    assert math.isclose(percentile(values, 99), 99.01)
    assert math.isnan(ratio(1.0, 0.0))


def test_targets() -> None:
    at_least = Target("m", TargetKind.RATIO_AT_LEAST, 1.0, cases="*-1KiB-lz4")
    assert at_least.applies_to("acks1-1KiB-lz4", "m")
    assert not at_least.applies_to("acks1-100B-lz4", "m")
    assert at_least.evaluate(10.0, 10.0) is Verdict.PASS
    assert at_least.evaluate(9.0, 10.0) is Verdict.FAIL
    assert at_least.evaluate(9.0, math.nan) is Verdict.NA
    at_most = Target("c", TargetKind.RATIO_AT_MOST, 1.5)
    assert at_most.evaluate(15.0, 10.0) is Verdict.PASS
    assert at_most.evaluate(16.0, 10.0) is Verdict.FAIL
    absolute = Target("p99", TargetKind.ABSOLUTE_AT_MOST, 50.0, unit="ms")
    assert absolute.evaluate(49.0, math.nan) is Verdict.PASS
    assert absolute.describe() == "<= 50 ms"


def test_matrix_has_eight_named_cases() -> None:
    names = [c.name for c in matrix()]
    assert len(names) == len(set(names)) == 8
    assert "acksall-1KiB-lz4" in names and "acks1-100B-none" in names


def test_payload_roundtrip_and_verifier() -> None:
    value = make_value(7, 100, send_ns=123)
    assert len(value) == 100 and parse_header(value) == (7, 123)
    payloads = payload_set(50, 1024)
    assert all(len(v) == 1024 for v in payloads.values)
    verifier = Verifier(payloads.crcs)
    for v in payloads.values[:-1]:
        verifier.feed(v)
    assert not verifier.ok()
    verifier.feed(payloads.values[0])
    verifier.feed(payloads.values[-1][:-1] + b"X")
    verifier.feed(payloads.values[-1])
    assert verifier.complete() and verifier.duplicates == 1 and verifier.bad_crc == 1
    assert not verifier.ok()


def test_format_table_aligns_columns() -> None:
    text = format_table(["a", "bb"], [["x", "1"], ["yyy", "22"]], right={1})
    lines = text.splitlines()
    assert lines[0] == "a    bb"
    assert lines[2] == "x     1"
    assert lines[3] == "yyy  22"


def test_command_template_and_count_scaling() -> None:
    spec = BrokerSpec("x", "X", "{python} -m broker --port {port} --dir {data_dir}", REPO_ROOT)
    argv = spec.command(1234, REPO_ROOT / "a b")
    assert argv[0] == sys.executable and argv[-1] == str(REPO_ROOT / "a b")
    cfg = BenchConfig(scale=0.1)
    assert cfg.count_for(100) == cfg.small_count // 10
    assert cfg.count_for(1024) == cfg.large_count // 10


def test_free_port_is_closed() -> None:
    assert not port_accepts(free_loopback_port(), timeout=0.2)


def test_tree_cpu_counts_a_busy_child() -> None:
    busy = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\n"
    busy += "time.sleep(5)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tree_cpu_seconds(child.pid) < 0.25:
            time.sleep(0.05)
        assert tree_cpu_seconds(child.pid) >= 0.25
        assert child.pid in descendant_pids(os.getpid())
    finally:
        child.kill()
        child.wait(timeout=5)


def test_tiered_spec_adds_overrides_and_keeps_placeholders() -> None:
    from bench.registry import ScenarioContext
    from bench.scenarios.tiered import tiered_spec

    class FakeBroker:
        spec = BrokerSpec("tierd", "tierd", "", REPO_ROOT)

    ctx = ScenarioContext(config=BenchConfig(), broker=FakeBroker(), round=0)  # type: ignore[arg-type]
    spec = tiered_spec(ctx, "s3", {"rsm.config.endpoint.url": "http://h:1/{odd}"})
    argv = spec.command(1234, REPO_ROOT / "d")
    assert "listeners=PLAINTEXT://127.0.0.1:1234" in argv
    assert "remote.log.storage.system.enable=true" in argv
    assert "rsm.config.endpoint.url=http://h:1/{odd}" in argv
    assert dict(spec.env)["AWS_ACCESS_KEY_ID"] == "testing"


def test_cluster_cases_metrics_and_targets() -> None:
    from bench.scenarios import cluster

    cases = [cluster.workload_case(s, c) for s, c in cluster.WORKLOADS]
    cases += list(cluster.FAILOVER_SIGNALS)
    assert cases == ["produce-1KiB-lz4", "produce-100B-none", "failover-sigkill",
                     "failover-sigterm"]
    assert all(any(m.applies_to(case) for case in cases) for m in cluster.METRICS)
    assert not any(m.applies_to("failover-sigkill") for m in cluster.METRICS
                   if m.key.startswith("rf"))
    judged = {(t.cases, t.metric): t.value for t in cluster.TARGETS}
    assert judged[("failover-sigkill", "failover_p99_ms")] == cluster.SESSION_TIMEOUT_MS + 1000
    assert judged[("failover-sigterm", "failover_p99_ms")] == 1000


def test_rebuild_plan_victim_and_windows() -> None:
    from bench.scenarios import rebuild

    full = rebuild.plan(1.0, 100 * rebuild.GiB)
    assert full.data_bytes == rebuild.GiB and not full.note
    assert full.segment_bytes == 16 * rebuild.MiB
    assert full.local_retention == int(rebuild.GiB * 0.02)
    small = rebuild.plan(0.01, 100 * rebuild.GiB)
    assert small.segment_bytes == rebuild.MiB and small.data_bytes < 11 * rebuild.MiB
    # Not enough disk: lowered, with a note saying so.
    tight = rebuild.plan(1.0, 5 * rebuild.GiB)
    assert tight.data_bytes < rebuild.GiB and "lowered" in tight.note
    assert tight.data_bytes * rebuild.DISK_FACTOR + rebuild.DISK_RESERVE <= 5 * rebuild.GiB
    # A follower, not the controller, preferably not the other topic's leader.
    assert rebuild.pick_victim(1, [1, 2, 3], 2, set()) == 3
    assert rebuild.pick_victim(1, [1, 2, 3], 1, {2}) == 3
    assert rebuild.pick_victim(1, [1, 2, 3], 3, {2}) == 2
    assert rebuild.pick_victim(1, [1, 3], 3, set()) == 3
    samples = [(float(t), t / 1000) for t in range(100)]
    assert math.isclose(rebuild.window_p99(samples, 0, 9), 8.91)
    assert math.isnan(rebuild.window_p99(samples, 200, 300))
    a, b = rebuild.make_value(0), rebuild.make_value(1)
    assert len(a) == len(b) == 1024 and a[8:] != b[8:]
