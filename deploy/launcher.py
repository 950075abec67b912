"""A tierd cluster as local processes: the compose file's topology for
machines without Docker, or several brokers per host.

    python -m deploy.launcher --dir DIR [--base-port 19092] [--zk-port P] [--s3-port P]
                              [--hosts 3] [--brokers-per-host 1]

Starts ZooKeeper (Debian's jars, as system_tests/zkserver.py runs them),
moto's S3 server on 127.0.0.1 with a bucket ``tierd``, and brokers
1..hosts*brokers-per-host on 127.0.0.1:base.. with the S3 store on moto (fake
credentials), replication factor 3 everywhere, min.insync.replicas 2 and
short tiering intervals (as deploy/test/docker-compose.test.yml).

Several brokers per host: one tierd process runs its event loop on one
core, so a host with more cores runs more brokers. Brokers 1..N are "host1",
the next N "host2", and so on; each broker's ``broker.rack`` is its host, so
rack-aware placement never puts two replicas of a partition on one host
(losing a host loses at most one replica of each partition). The hosts are
simulated here (all on this machine); on real machines give each broker
its host name as ``broker.rack`` the same way.

Once every broker is registered it writes DIR/state.json (read by
``deploy.scenarios.control.ProcessControl``; scenarios may restart brokers and
update the pids in it), prints the bootstrap and how to run the scenarios, and
stays in the foreground. SIGINT or SIGTERM stops everything: the brokers
with SIGTERM first (SIGKILL after a grace period), then S3 and ZooKeeper.
Logs go to DIR/logs/. Exit status 0 after a clean stop, 1 if startup failed.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deploy.scenarios.control import pid_alive, pid_runs, read_state, write_state

REPO_ROOT = Path(__file__).resolve().parents[1]
ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/*"
BUCKET = "tierd"
REGION = "us-east-1"
# Credentials moto accepts; nothing real.
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "tierd", "AWS_SECRET_ACCESS_KEY": "tierd-secret",
            "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}
DEFAULT_HOSTS = 3
START_TIMEOUT_S = 90.0
BROKER_GRACE_S = 30.0
STOP_TIMEOUT_S = 10.0


def broker_config(node: int, port: int, zk_port: int, s3_url: str, data_dir: Path,
                  metrics_port: int, rack: str) -> dict[str, str]:
    """server.properties of one broker: deploy/docker.properties, the compose
    file's environment and the test override's short intervals."""
    return {
        "broker.id": str(node),
        "broker.rack": rack,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(data_dir),
        "tierd.metrics.port": str(metrics_port),
        "auto.create.topics.enable": "true",
        "zookeeper.connect": f"127.0.0.1:{zk_port}",
        "zookeeper.session.timeout.ms": "6000",
        "replica.lag.time.max.ms": "4000",
        "replica.fetch.backoff.ms": "200",
        "controlled.shutdown.retry.backoff.ms": "500",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "remote.log.storage.system.enable": "true",
        "remote.log.metadata.manager.class.name": "topic-based",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.bucket": BUCKET,
        "rsm.config.region": REGION,
        "rsm.config.endpoint.url": s3_url,
        "rsm.config.path.style.access": "true",
        "rsm.config.retry.max.attempts": "2",
        "rsm.config.connect.timeout.ms": "1000",
        "rsm.config.read.timeout.ms": "2000",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "remote.log.manager.task.interval.ms": "500",
        "remote.log.manager.task.retry.backoff.max.ms": "2000",
        "log.retention.check.interval.ms": "500",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until(what: str, fn: Any, timeout_s: float = START_TIMEOUT_S,
               alive: Any = None) -> None:
    """Poll ``fn`` until truthy; RuntimeError after the deadline or when ``alive()`` is false."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if fn():
                return
        except Exception:  # not up yet
            pass
        if alive is not None and not alive():
            raise RuntimeError(f"{what}: the process exited")
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def zk_ruok(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(b"ruok")
        return sock.recv(16) == b"imok"


class Launcher:
    """Starts, records and stops the cluster's processes."""

    def __init__(self, workdir: Path, base_port: int, zk_port: int, s3_port: int,
                 metrics_base_port: int, hosts: int = DEFAULT_HOSTS,
                 per_host: int = 1) -> None:
        self.dir = workdir.resolve()
        self.logs = self.dir / "logs"
        self.state_path = self.dir / "state.json"
        self.nodes = list(range(1, hosts * per_host + 1))
        # Brokers 1..per_host on host1, and so on.
        self.hosts = {n: f"host{(n - 1) // per_host + 1}" for n in self.nodes}
        self.ports = {n: base_port + i for i, n in enumerate(self.nodes)}
        self.zk_port = zk_port or free_port()
        self.s3_port = s3_port or free_port()
        self.metrics_base_port = metrics_base_port
        self.state: dict[str, Any] = {"ready": False, "launcher_pid": os.getpid(), "brokers": {}}
        self.children: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in self.nodes)

    def _spawn(self, name: str, command: list[str], env_add: dict[str, str]) -> dict[str, Any]:
        log = self.logs / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(command, env={**os.environ, **env_add}, cwd=self.dir,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append(proc)
        return {"pid": proc.pid, "command": command, "env": env_add, "cwd": str(self.dir),
                "log": str(log)}

    def _save(self) -> None:
        write_state(self.state_path, self.state)

    def start(self) -> None:
        taken = [p for p in (*self.ports.values(), self.zk_port, self.s3_port) if not port_free(p)]
        if taken:
            raise RuntimeError(f"ports in use: {taken} (choose --base-port / --zk-port / --s3-port)")
        self.logs.mkdir(parents=True, exist_ok=True)
        self._start_zookeeper()
        self._start_s3()
        for node in self.nodes:
            self._start_broker(node)
        self._save()
        wait_until(f"{len(self.nodes)} brokers registered", self._all_registered, alive=lambda: all(
            pid_alive(e["pid"]) for e in self.state["brokers"].values()))
        self.state["bootstrap"] = self.bootstrap
        self.state["ready"] = True
        self._save()

    def _start_zookeeper(self) -> None:
        data = self.dir / "zookeeper"
        data.mkdir(parents=True, exist_ok=True)
        cfg = data / "zoo.cfg"
        cfg.write_text("\n".join([
            "tickTime=200", f"dataDir={data}", f"clientPort={self.zk_port}",
            "clientPortAddress=127.0.0.1", "maxClientCnxns=0", "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat", "minSessionTimeout=400",
            "maxSessionTimeout=60000"]) + "\n")
        entry = self._spawn("zookeeper", [
            "java", "-Xmx256m", "-cp", ZK_CLASSPATH, f"-Dzookeeper.log.dir={self.logs}",
            "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)], {})
        entry["connect"] = f"127.0.0.1:{self.zk_port}"
        self.state["zookeeper"] = entry
        self._save()
        wait_until("ZooKeeper", lambda: zk_ruok(self.zk_port),
                   alive=lambda: pid_alive(entry["pid"]))

    def _start_s3(self) -> None:
        entry = self._spawn("s3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                   "-p", str(self.s3_port)], dict(FAKE_AWS))
        entry["endpoint"] = f"http://127.0.0.1:{self.s3_port}"
        entry["bucket"] = BUCKET
        self.state["s3"] = entry
        self._save()
        import boto3

        client = boto3.session.Session().client(
            "s3", endpoint_url=entry["endpoint"], region_name=REGION,
            aws_access_key_id=FAKE_AWS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_AWS["AWS_SECRET_ACCESS_KEY"])
        wait_until("the S3 server and its bucket", lambda: client.create_bucket(Bucket=BUCKET),
                   alive=lambda: pid_alive(entry["pid"]))

    def _start_broker(self, node: int) -> None:
        home = self.dir / f"broker{node}"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        metrics = -1 if self.metrics_base_port < 0 else self.metrics_base_port + node - 1
        config = broker_config(node, self.ports[node], self.zk_port,
                               self.state["s3"]["endpoint"], data, metrics, self.hosts[node])
        properties = home / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        env_add = {**FAKE_AWS, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        entry = self._spawn(f"broker{node}", [sys.executable, "-m", "broker", "--config",
                                              str(properties)], env_add)
        entry.update(address=f"127.0.0.1:{self.ports[node]}", data_dir=str(data),
                     host=self.hosts[node])
        self.state["brokers"][str(node)] = entry
        self._save()

    def _all_registered(self) -> bool:
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","),
                                 request_timeout_ms=5000, bootstrap_timeout_ms=5000)
        try:
            return len(admin.describe_cluster()["brokers"]) == len(self.nodes)
        finally:
            admin.close()

    def reap(self) -> None:
        """Collect children that exited (brokers killed by a scenario)."""
        for proc in self.children:
            proc.poll()

    def stop(self) -> None:
        """Brokers (current pids from the state file) with SIGTERM, then SIGKILL
        after the grace period; then S3 and ZooKeeper."""
        if self.state_path.exists():
            current = read_state(self.state_path)
            self.state["brokers"] = current.get("brokers", self.state["brokers"])
        brokers = [e for e in self.state["brokers"].values() if pid_runs(e["pid"], e["command"])]
        self._terminate(brokers, BROKER_GRACE_S)
        others = [self.state[k] for k in ("s3", "zookeeper") if k in self.state]
        for entry in others:
            if pid_runs(entry["pid"], entry["command"]):
                os.kill(entry["pid"], signal.SIGCONT)  # a paused S3 server must see SIGTERM
        self._terminate(others, STOP_TIMEOUT_S)
        self.state["ready"] = False
        self.state["stopped"] = True
        self._save()

    def _terminate(self, entries: list[dict[str, Any]], grace_s: float) -> None:
        for entry in entries:
            if pid_runs(entry["pid"], entry["command"]):
                os.kill(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(
                pid_runs(e["pid"], e["command"]) for e in entries):
            self.reap()
            time.sleep(0.1)
        for entry in entries:
            if pid_runs(entry["pid"], entry["command"]):
                print(f"pid {entry['pid']} did not stop in {grace_s:.0f} s: SIGKILL", flush=True)
                os.kill(entry["pid"], signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(pid_alive(e["pid"]) for e in entries):
            self.reap()
            time.sleep(0.05)


def print_banner(launcher: Launcher) -> None:
    state = launcher.state_path
    print(f"tierd cluster up: bootstrap {launcher.bootstrap}\n"
          f"  ZooKeeper 127.0.0.1:{launcher.zk_port}, S3 {launcher.state['s3']['endpoint']} "
          f"(bucket {BUCKET})\n"
          f"  state {state}, logs {launcher.logs}/\n"
          f"Scenarios (from {REPO_ROOT}):\n"
          f"  python -m deploy.scenarios.kill_leader --launcher {state}\n"
          f"  python -m deploy.scenarios.wipe_rebuild --launcher {state}\n"
          f"  python -m deploy.scenarios.s3_outage --launcher {state}\n"
          f"  python -m broker admin -b {launcher.bootstrap} tiering status --replicas\n"
          f"Ctrl-C (or SIGTERM) stops the cluster.", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="working directory")
    parser.add_argument("--base-port", type=int, default=19092,
                        help="port of broker 1; the others use the next ones (default 19092)")
    parser.add_argument("--zk-port", type=int, default=0, help="ZooKeeper port (default: free)")
    parser.add_argument("--s3-port", type=int, default=0, help="S3 server port (default: free)")
    parser.add_argument("--metrics-base-port", type=int, default=-1,
                        help="Prometheus port of broker 1, the next ones for the others "
                        "(default -1: off)")
    parser.add_argument("--hosts", type=int, default=DEFAULT_HOSTS,
                        help="simulated hosts, each its own broker.rack (default 3)")
    parser.add_argument("--brokers-per-host", type=int, default=1,
                        help="brokers per host, about one per core (default 1)")
    args = parser.parse_args(argv)
    stop_requested: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_requested.append(signum)
        raise KeyboardInterrupt

    args.dir.mkdir(parents=True, exist_ok=True)
    if args.hosts < 1 or args.brokers_per_host < 1:
        parser.error("--hosts and --brokers-per-host must be at least 1")
    launcher = Launcher(args.dir, args.base_port, args.zk_port, args.s3_port,
                        args.metrics_base_port, args.hosts, args.brokers_per_host)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = 0
    try:
        launcher.start()
        print_banner(launcher)
        while True:
            launcher.reap()
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping the cluster", flush=True)
    except Exception as exc:
        print(f"launcher: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        launcher.stop()
    print("stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
