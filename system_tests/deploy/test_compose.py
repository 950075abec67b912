"""The docker-compose cluster for real: deploy/docker-compose.yml with the
test override (local images, host network, moto in place of MinIO) brought
up by Debian's docker-compose on a Docker engine the tests start, and the
operator scenarios (deploy/scenarios/) run against it.

Prometheus runs from Debian's package and must scrape every broker; every
query of the Grafana dashboard must evaluate on it. Grafana itself is not
started (no image can be pulled or made here).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.grafana.build_dashboard import dashboard
from system_tests.cluster.cluster import wait_for
from system_tests.deploy import docker_env

ROOT = docker_env.ROOT
SOURCES = ["deploy/docker-compose.yml", "deploy/test/docker-compose.test.yml"]
# The two merged into one file, with the host-network services' published
# ports dropped: compose v1 merges port lists (it has no "!reset") and
# refuses ports with host networking. Written by ``merged_file``.
MERGED = docker_env.RUN_DIR / "docker-compose.merged.yml"
FILES = [str(MERGED)]
PROJECT = "tierdtest"
BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
METRICS = "http://127.0.0.1:19404/metrics"
PROMETHEUS = "http://127.0.0.1:19090/api/v1/query"
# Up, down and one scenario each; the cluster's start includes three brokers
# registering in ZooKeeper on a loaded 2-core machine.
COMPOSE_TIMEOUT_S = 300.0
SCENARIO_TIMEOUT_S = 300.0
SCENARIOS: dict[str, list[str]] = {
    "kill_leader": ["--records", "200"],
    "wipe_rebuild": ["--records", "1024", "--record-size", "1024"],
    "s3_outage": ["--records", "256", "--rounds", "2", "--outage-seconds", "4"],
}


def compose(*args: str, timeout_s: float = COMPOSE_TIMEOUT_S, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
    files = [arg for f in FILES for arg in ("-f", f)]
    result = subprocess.run(["docker-compose", *files, "-p", PROJECT, *args], cwd=ROOT,
                            env=docker_env.env(), capture_output=True, text=True,
                            timeout=timeout_s)
    if check and result.returncode != 0:
        raise AssertionError(f"docker-compose {' '.join(args)}: {result.returncode}\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def merged_file() -> None:
    """``docker-compose config`` of the user file and the test override, with
    the ports of services on the host network removed (they publish nothing)."""
    import yaml

    files = [arg for f in SOURCES for arg in ("-f", f)]
    result = subprocess.run(["docker-compose", *files, "config"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True)
    config = yaml.safe_load(result.stdout)
    for service in config["services"].values():
        if service.get("network_mode") == "host":
            service.pop("ports", None)
    docker_env.RUN_DIR.mkdir(parents=True, exist_ok=True)
    MERGED.write_text(yaml.safe_dump(config, sort_keys=False))


def registered_brokers() -> int:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP.split(","), request_timeout_ms=5000,
                             bootstrap_timeout_ms=5000)
    try:
        return len(admin.describe_cluster()["brokers"])
    finally:
        admin.close()


def all_brokers_serving() -> bool:
    """Every broker accepts connections on its port and all three are
    registered. Registration alone is not enough after a restart: the other
    brokers' metadata can still list a broker whose process is only starting
    (docker-compose start returns at once), and a client sent there is refused."""
    for address in BOOTSTRAP.split(","):
        host, port = address.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except OSError:
            return False
    return registered_brokers() == 3


@pytest.fixture(scope="module")
def compose_cluster() -> Iterator[None]:
    engine = docker_env.Engine()
    engine.start()
    merged_file()
    try:
        docker_env.build_test_images()
        compose("down", "-v", "--remove-orphans")
        compose("up", "-d", "--no-build")
        try:
            wait_for("three brokers registered", lambda: registered_brokers() == 3,
                     timeout_s=COMPOSE_TIMEOUT_S)
            yield
        finally:
            logs = compose("logs", "--no-color", "--tail", "200", check=False).stdout
            compose("down", "-v", "--remove-orphans", check=False)
            Path(docker_env.RUN_DIR / "compose-last.log").write_text(logs)
    finally:
        engine.stop()


def test_user_compose_file_is_valid() -> None:
    result = subprocess.run(["docker-compose", "-f", "deploy/docker-compose.yml", "config", "-q"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    merged_file()
    merged = compose("config").stdout
    assert "network_mode: host" in merged and "tierd:test" in merged and "19092:" not in merged


def test_brokers_become_healthy(compose_cluster: None) -> None:
    def healthy() -> bool:
        ids = compose("ps", "-q", "broker1", "broker2", "broker3").stdout.split()
        states = [docker_env.docker("inspect", "--format", "{{.State.Health.Status}}", i)
                  .stdout.strip() for i in ids]
        return len(states) == 3 and set(states) == {"healthy"}

    wait_for("every broker container healthy", healthy, timeout_s=COMPOSE_TIMEOUT_S)
    user = docker_env.docker("inspect", "--format", "{{.Config.User}}", "tierd:test")
    assert user.stdout.strip() == "tierd"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_against_compose(compose_cluster: None, scenario: str) -> None:
    cmd = [sys.executable, "-m", f"deploy.scenarios.{scenario}",
           *(arg for f in FILES for arg in ("--compose-file", f)), "--project", PROJECT,
           "--bootstrap", BOOTSTRAP, *SCENARIOS[scenario]]
    result = subprocess.run(cmd, cwd=ROOT, env=docker_env.env(), capture_output=True, text=True,
                            timeout=SCENARIO_TIMEOUT_S)
    assert result.returncode == 0 and "VERDICT: PASS" in result.stdout, \
        f"{scenario} exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-3000:]}"


def test_dashboard_queries_name_exported_metrics(compose_cluster: None) -> None:
    lines = urllib.request.urlopen(METRICS, timeout=10).read().decode().splitlines()
    # Samples, and the HELP lines of labelled families with no sample yet.
    exported = {line.split("{")[0].split(" ")[0] for line in lines
                if line and not line.startswith("#")}
    exported |= {line.split()[2] for line in lines if line.startswith("# HELP ")}
    families = exported | {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported}
    text = json.dumps(dashboard())
    assert json.loads((ROOT / "deploy/grafana/dashboards/tierd.json").read_text()) == dashboard()
    named = set(re.findall(r"\b(tierd_[A-Za-z_]+|Remote[A-Za-z]+(?:_total|_bucket)?)\b", text))
    # Counters and histograms with labels appear once used; their families are
    # registered from the start, so check by family name.
    missing = {n for n in named if re.sub(r"_(total|bucket)$", "", n) not in families}
    assert not missing, missing


def test_sigterm_is_a_clean_controlled_shutdown(compose_cluster: None) -> None:
    compose("stop", "-t", "60", "broker3")
    [cid] = compose("ps", "-q", "broker3").stdout.split()
    code = docker_env.docker("inspect", "--format", "{{.State.ExitCode}}", cid).stdout.strip()
    logs = compose("logs", "--no-color", "broker3").stdout
    assert code == "0", logs[-3000:]
    assert "controlled shutdown" in logs.lower(), logs[-3000:]
    compose("start", "broker3")
    wait_for("broker3 serving and registered again", all_brokers_serving,
             timeout_s=COMPOSE_TIMEOUT_S)


def test_the_cleaner_compacts_inside_the_image(compose_cluster: None) -> None:
    """A compacted RF 3 topic shrinks to its latest value per key in the image
    (its cleaner runs in a worker process through trio's threads: a trio the
    lock did not pin once broke every pass there)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "compose-compacted"
    wait_for("every broker serving", all_brokers_serving, timeout_s=COMPOSE_TIMEOUT_S)
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP.split(","), request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic, 1, 3, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": "500",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP.split(","), acks="all", retries=5)
    latest = {}
    for n in range(2000):
        key = f"key-{n % 20}".encode()
        latest[key] = f"value-{n}".encode()
        producer.send(topic, key=key, value=latest[key])
    producer.flush(60)
    written = 2000

    def records_from_start() -> list[tuple[bytes, bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP.split(","), enable_auto_commit=False,
                                 consumer_timeout_ms=3000)
        tp = TopicPartition(topic, 0)
        try:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            return [(r.key, r.value) for r in consumer if r.key != b"roll"]
        finally:
            consumer.close()

    def compacted() -> bool:
        # A record on a key of its own rolls the active segment (segment.ms),
        # so every written record becomes cleanable.
        producer.send(topic, key=b"roll", value=b"roll").get(30)
        records = records_from_start()
        return len(records) <= written // 4 and dict(records) == latest

    try:
        wait_for("the compacted topic cleaned in the image", compacted, timeout_s=120)
    finally:
        producer.close()
    logs = compose("logs", "--no-color", "broker1", "broker2", "broker3").stdout
    assert "uncleanable" not in logs and "cleaning pass failed" not in logs, logs[-3000:]


def prom(query: str) -> dict:  # type: ignore[type-arg]
    url = PROMETHEUS + "?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.loads(response.read()))


def test_prometheus_scrapes_every_broker_and_runs_the_dashboard(compose_cluster: None) -> None:
    def all_up() -> bool:
        result = prom('up{job="tierd"}')["data"]["result"]
        return len(result) == 3 and all(r["value"][1] == "1" for r in result)

    wait_for("Prometheus scraping three brokers", all_up, timeout_s=COMPOSE_TIMEOUT_S)
    partitions = prom("sum(tierd_PartitionCount)")["data"]["result"]
    assert partitions and float(partitions[0]["value"][1]) > 0, partitions
    for panel in dashboard()["panels"]:  # type: ignore[union-attr]
        for target in panel["targets"]:
            answer = prom(target["expr"])
            assert answer["status"] == "success", (panel["title"], target["expr"], answer)
