"""The process launcher (``python -m deploy.launcher``) and the operator
scenarios (``python -m deploy.scenarios.*``) run against it, end to end.

One launcher serves the module: it is started as a subprocess in a temporary
directory on free ports; each scenario runs as a subprocess with
``--launcher STATE_FILE`` and must print ``VERDICT: PASS`` and exit 0; the
last test stops the launcher with SIGTERM and checks that it exits 0 and
leaves no broker, S3 or ZooKeeper process behind. Data sizes are small so
the module takes about a minute.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.scenarios.control import pid_alive, pid_runs
from system_tests.harness import free_port_run

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 150.0
SCENARIO_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0
# Small sizes: the scenarios' defaults are for operators.
SCENARIOS: dict[str, list[str]] = {
    "kill_leader": ["--records", "200"],
    "wipe_rebuild": ["--records", "1024", "--record-size", "1024"],
    "s3_outage": ["--records", "256", "--rounds", "2", "--outage-seconds", "4"],
}
PR_SET_PDEATHSIG = 1


@dataclass
class Launched:
    process: subprocess.Popen[bytes]
    workdir: Path
    output: Path

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.state_file.read_text()))

    def output_tail(self) -> str:
        return self.output.read_text(errors="replace")[-4000:] if self.output.exists() else ""


def _die_with_parent() -> None:
    """In the launcher before exec: SIGTERM it (it then stops the cluster) if
    pytest dies, so no cluster outlives an aborted run."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def _kill_leftovers(state: dict[str, Any]) -> None:
    """SIGKILL what the launcher started and left running (pids checked against
    their recorded command lines)."""
    entries = [*state.get("brokers", {}).values(), state.get("s3"), state.get("zookeeper")]
    for entry in entries:
        if entry and pid_runs(entry["pid"], entry["command"]):
            os.kill(entry["pid"], signal.SIGCONT)
            os.kill(entry["pid"], signal.SIGKILL)


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    yield from launch(tmp_path_factory.mktemp("launcher"), [])


def launch(workdir: Path, extra: list[str], brokers: int = 3) -> Iterator[Launched]:
    """The launcher in ``workdir`` with ``extra`` arguments, until ready; stopped
    (and whatever it left running killed) when the generator closes."""
    output = workdir / "launcher.out"
    with open(output, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "deploy.launcher", "--dir", str(workdir),
             "--base-port", str(free_port_run(brokers)), *extra],
            cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent)
    launched = Launched(process, workdir, output)
    try:
        started = time.monotonic()
        deadline = started + LAUNCH_TIMEOUT_S
        while not (launched.state_file.exists() and launched.state().get("ready")):
            if process.poll() is not None:
                pytest.fail(f"launcher exited {process.returncode}:\n{launched.output_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"cluster not ready in {LAUNCH_TIMEOUT_S} s:\n{launched.output_tail()}")
            time.sleep(0.2)
        print(f"launcher ready in {time.monotonic() - started:.1f} s")
        yield launched
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if launched.state_file.exists():
            _kill_leftovers(launched.state())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_passes(launched: Launched, name: str) -> None:
    if launched.process.poll() is not None:
        pytest.fail(f"launcher exited {launched.process.returncode}:\n{launched.output_tail()}")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", f"deploy.scenarios.{name}", "--launcher",
         str(launched.state_file), *SCENARIOS[name]],
        cwd=ROOT, env=env(), capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S,
        check=False)
    took = time.monotonic() - started
    report = (f"{name} exited {done.returncode} after {took:.1f} s\n--- stdout\n{done.stdout}"
              f"--- stderr (tail)\n{done.stderr[-3000:]}\n(logs: {launched.workdir / 'logs'})")
    assert done.returncode == 0, report
    assert "VERDICT: PASS" in done.stdout, report
    assert "FAIL" not in done.stdout, report
    print(f"{name}: {took:.1f} s")


def test_launcher_stops_cleanly(launched: Launched) -> None:
    state = launched.state()
    assert launched.process.poll() is None, launched.output_tail()
    launched.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code = launched.process.wait(STOP_TIMEOUT_S)
    print(f"launcher stopped in {time.monotonic() - started:.1f} s")
    assert code == 0, launched.output_tail()
    final = launched.state()  # scenarios restarted brokers under new pids
    entries = {f"broker {k}": e for k, e in final["brokers"].items()}
    entries.update(s3=final["s3"], zookeeper=final["zookeeper"])
    left = {name: e["pid"] for name, e in entries.items() if pid_alive(e["pid"])
            and pid_runs(e["pid"], e["command"])}
    assert not left, f"still running: {left}"
    assert final.get("stopped") is True
    assert {k: e["pid"] for k, e in state["brokers"].items()} == {
        k: e["pid"] for k, e in final["brokers"].items()}


def test_several_brokers_per_host_keep_replicas_on_different_hosts(
        tmp_path: Path) -> None:
    """--hosts 2 --brokers-per-host 2: four brokers, each with its host as
    broker.rack; every partition of an RF 2 topic has one replica per host."""
    from kafka.admin import KafkaAdminClient, NewTopic

    runs = launch(tmp_path, ["--hosts", "2", "--brokers-per-host", "2"], brokers=4)
    launched = next(runs)
    try:
        state = launched.state()
        hosts = {int(k): e["host"] for k, e in state["brokers"].items()}
        assert hosts == {1: "host1", 2: "host1", 3: "host2", 4: "host2"}
        admin = KafkaAdminClient(bootstrap_servers=state["bootstrap"].split(","),
                                 request_timeout_ms=20_000)
        try:
            assert {b["broker_id"]: b["rack"] for b in admin.describe_cluster()["brokers"]} \
                == hosts
            admin.create_topics([NewTopic("spread", 8, 2)])
            deadline = time.monotonic() + 60
            while True:
                [topic] = admin.describe_topics(["spread"])
                parts = topic["partitions"]
                if len(parts) == 8 and all(p["leader_id"] > 0 for p in parts):
                    break
                assert time.monotonic() < deadline, topic
                time.sleep(0.2)
            for p in parts:
                assert {hosts[b] for b in p["replica_nodes"]} == {"host1", "host2"}, p
        finally:
            admin.close()
        launched.process.send_signal(signal.SIGTERM)
        assert launched.process.wait(STOP_TIMEOUT_S) == 0, launched.output_tail()
    finally:
        runs.close()
