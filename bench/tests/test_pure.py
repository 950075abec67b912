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


def test_peak_rss_counts_child_processes() -> None:
    from bench.procstat import PeakRss, child_pids

    hog = "import time\nx = bytearray(64 << 20)\nx[::4096] = b'x' * len(x[::4096])\ntime.sleep(5)"
    child = subprocess.Popen([sys.executable, "-c", hog])
    try:
        deadline = time.monotonic() + 10
        with PeakRss(os.getpid(), 0.02, children=True) as rss:
            while time.monotonic() < deadline and rss.peak_children < 64 << 20:
                time.sleep(0.05)
        assert child.pid in child_pids(os.getpid())
        assert rss.peak_children >= 64 << 20
        assert rss.peak >= rss.peak_children
    finally:
        child.kill()
        child.wait(timeout=5)


def test_compaction_log_parsing_keys_and_layout() -> None:
    from bench.payload import make_value
    from bench.scenarios import compaction as c

    text = (
        "2026-11-26T20:56:06.966022Z [info     ] cleaned log                    "
        "bytes_in=55990857 bytes_out=4957553 cleaned_up_to=100590 first_dirty=0 "
        "map_entries=10000 mb_per_s=38.16 partition=0 seconds=1.467 topic=t1\n"
        "2026-11-26T20:56:07.000000Z [info     ] cleaned log                    "
        "bytes_in=10 bytes_out=1 partition=0 seconds=0.5 topic=__consumer_offsets\n"
        "2026-11-26T20:56:08.000000Z [error    ] partition marked uncleanable   "
        "error=boom partition=0 topic=t1\n"
    )
    [p] = c.parse_passes(text, "t1")
    assert (p.bytes_in, p.bytes_out, p.seconds) == (55990857, 4957553, 1.467)
    assert math.isclose(p.end - p.start, 1.467, abs_tol=1e-6)
    assert len(c.parse_passes(text, c.OFFSETS_TOPIC)) == 1
    assert any("uncleanable" in line for line in c.cleaner_problems(text))
    # Every key at least once, ~count/KEYS updates each; last values win.
    keys = c.update_keys(3 * c.KEYS, seed=1, every_key_first=True)
    assert len(set(keys)) == c.KEYS and len(keys) == 3 * c.KEYS
    values = c.Values(10, len(keys))
    assert values[0] == make_value(10, c.SIZE) and values[-1] == make_value(10 + 3 * c.KEYS - 1,
                                                                          c.SIZE)
    last = c.last_values(keys, values)
    assert last[keys[-1]] == values[-1] and len(last) == c.KEYS
    # Offsets segment: 16 MiB at full scale, scaled down (not below the floor).
    assert c.offsets_segment_bytes(1.0) == c.offsets_segment_bytes(3.0) == 16 << 20
    assert c.offsets_segment_bytes(0.1) == int((16 << 20) * 0.1)
    assert c.offsets_segment_bytes(0.001) == c.MIN_OFFSETS_SEGMENT_BYTES
    # Commit offsets are distinct per request and partition; requests encode.
    offsets = {c.offset_for(r, p) for r in range(30) for p in range(c.COMMIT_PARTITIONS)}
    assert len(offsets) == 30 // c.COMMIT_GROUPS * c.COMMIT_PARTITIONS
    assert c.expected_offsets(29)[5] == c.offset_for(29, 5)
    from system_tests._proc import encode_request

    frame = encode_request(c.commit_request("g", "t", 7), c.OFFSET_COMMIT_VERSION, 1)
    assert len(frame) > 100 * c.COMMIT_PARTITIONS // 10


def test_compaction_metrics_and_targets_cover_both_cases() -> None:
    from bench.scenarios import compaction as c

    cases = (c.CLEAN_CASE, c.OFFSETS_CASE)
    assert all(any(m.applies_to(case) for case in cases) for m in c.METRICS)
    judged = {(t.cases, t.metric): t.value for t in c.TARGETS}
    assert judged[(c.CLEAN_CASE, "p99_ratio")] == 1.2
    assert judged[(c.OFFSETS_CASE, "restart_after_s")] == 2.0
    keys = [m.key for m in c.METRICS]
    assert len(keys) == len(set(keys))


def test_tls_spec_settings_ratios_and_verdicts() -> None:
    from bench.results import Verdict
    from bench.scenarios import tls

    base = BrokerSpec("tierd", "tierd", "{python} -m broker --override "
                      "listeners=PLAINTEXT://127.0.0.1:{port}", REPO_ROOT)
    argv = tls.tls_spec(base, 1234, 5678, REPO_ROOT / "k.pem").command(1234, REPO_ROOT / "d")
    # The later listeners override wins in tierd: both listeners, on the ports given.
    assert argv[-5] == "listeners=PLAINTEXT://127.0.0.1:1234,SSL://127.0.0.1:5678"
    assert "ssl.keystore.type=PEM" in argv and f"ssl.keystore.location={REPO_ROOT}/k.pem" in argv
    assert tls.client_settings("plaintext", REPO_ROOT / "ca.pem") == {}
    assert tls.client_settings("ssl", REPO_ROOT / "ca.pem") == {
        "security.protocol": "SSL", "ssl.ca.location": str(REPO_ROOT / "ca.pem")}
    m = {"plaintext_produce_cpu_us_msg": 2.0, "ssl_produce_cpu_us_msg": 3.0,
         "plaintext_consume_cpu_us_msg": 1.0, "ssl_consume_cpu_us_msg": 1.6}
    ratios = tls.cpu_ratios(m)
    assert ratios == {"produce_cpu_ratio": 1.5, "consume_cpu_ratio": 1.6}
    assert math.isnan(tls.cpu_ratios({"ssl_produce_cpu_us_msg": 1.0})["produce_cpu_ratio"])
    judged = {t.metric: t for t in tls.TARGETS}
    assert judged["produce_cpu_ratio"].evaluate(1.5, math.nan) is Verdict.PASS
    assert judged["consume_cpu_ratio"].evaluate(1.6, math.nan) is Verdict.FAIL
    text = tls.verdicts_text(ratios)
    assert "produce CPU/msg SSL/PLAINTEXT 1.50x (target <= 1.5 x: PASS)" in text
    assert "consume CPU/msg SSL/PLAINTEXT 1.60x (target <= 1.5 x: FAIL)" in text
    keys = [spec.key for spec in tls.METRICS]
    assert len(keys) == len(set(keys)) == 2 * 2 * 4 + 2
    assert all(tls.SCENARIO.metric(t.metric) for t in tls.TARGETS)


def test_isolation_cuts_probe_samples_by_phase_and_pins_the_broker() -> None:
    from bench.scenarios.isolation import Window, latency_figures, placed_spec

    samples = [(t / 1000, 0.001 if t < 500 else 0.004) for t in range(1000)]
    m: dict[str, float] = {}
    latency_figures(m, "steady", samples, Window(0.0, 0.4995, 0.0))
    latency_figures(m, "hot", samples, Window(0.5, 0.9995, 0.0))
    assert m["steady_samples"] == m["hot_samples"] == 500
    assert m["steady_p99_ms"] == 1.0 and m["hot_max_ms"] == 4.0
    base = BrokerSpec("tierd", "tierd", "{python} -m broker", REPO_ROOT)
    assert placed_spec(base, "shared") is base
    argv = placed_spec(base, "pinned").command(1, REPO_ROOT)
    assert argv[:3] == ["taskset", "-c", "0"] and argv[4:6] == ["-m", "broker"]
