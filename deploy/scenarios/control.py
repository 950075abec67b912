"""How a scenario acts on the cluster: one small interface, two backends.

* ``ProcessControl`` drives a cluster started by ``python -m deploy.launcher``
  through the JSON state file it writes (per broker: pid, command line,
  environment additions, working directory, data dir, log file; the S3
  server's pid). Brokers are signalled by pid, after checking that the pid
  still runs the recorded command line (a pid may have been reused).
* ``ComposeControl`` drives a docker-compose cluster (``deploy/docker-compose.yml``,
  optionally with ``deploy/test/docker-compose.test.yml``) through the
  ``docker-compose`` CLI; ``DOCKER_HOST`` is inherited from the environment.

``add_control_args`` / ``control_from_args`` give every scenario the same
command line: ``--launcher STATE_FILE`` or ``--compose-file F ... --project P
--bootstrap H:P,H:P,H:P``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

# Broker ids of the three-broker topology (compose services broker1..3).
BROKER_IDS = (1, 2, 3)
# The S3 service is called "minio" in both compose files (moto in the test one).
S3_SERVICE = "minio"
# Where the broker image keeps its log directory.
COMPOSE_DATA_DIR = "/var/lib/tierd/data"
# Bound on one docker-compose call (a `run` may have to create a container).
COMPOSE_TIMEOUT_S = 180.0
# How much of a broker's log file broker_log() returns.
LOG_TAIL_BYTES = 8 << 20


class ControlError(Exception):
    """An action on the cluster could not be carried out."""


class Control:
    """What a scenario may do to the cluster.

    Attributes:
        bootstrap: "host:port,host:port,host:port" for clients.
        brokers: broker id -> "host:port".
    """

    bootstrap: str
    brokers: dict[int, str]

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker."""
        raise NotImplementedError

    def start(self, broker_id: int) -> None:
        """Start the (stopped) broker again with its configuration."""
        raise NotImplementedError

    def wipe(self, broker_id: int) -> None:
        """Delete the stopped broker's data so that it restarts empty."""
        raise NotImplementedError

    def pause_s3(self) -> None:
        """Make the S3 endpoint stop answering (connections hang)."""
        raise NotImplementedError

    def broker_log(self, broker_id: int) -> str | None:
        """The broker's recent log output, or None where it cannot be had."""
        return None

    def resume_s3(self) -> None:
        """Make the S3 endpoint answer again."""
        raise NotImplementedError


# -- processes started by deploy.launcher --------------------------------------


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rpartition(")")[2].split()[0] != "Z"


def pid_runs(pid: int, command: list[str]) -> bool:
    """True if ``pid`` is alive and runs exactly ``command`` (guards against reuse)."""
    if not pid or not pid_alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no procfs: trust the pid
    return raw.rstrip(b"\0").split(b"\0") == [part.encode() for part in command]


def spawn_detached(command: list[str], env_add: dict[str, str], cwd: str, log_path: str) -> int:
    """Start ``command`` in its own session, output appended to ``log_path``; its pid."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, env={**os.environ, **env_add}, cwd=cwd,
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return process.pid


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (readers never see half of it)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


class ProcessControl(Control):
    """A cluster of local processes described by the launcher's state file."""

    def __init__(self, state_file: str | Path) -> None:
        self.state_file = Path(state_file)
        state = read_state(self.state_file)
        self.brokers = {int(k): str(v["address"]) for k, v in state["brokers"].items()}
        self.bootstrap = ",".join(self.brokers[n] for n in sorted(self.brokers))

    def _broker(self, broker_id: int) -> dict[str, Any]:
        entry = read_state(self.state_file)["brokers"].get(str(broker_id))
        if entry is None:
            raise ControlError(f"no broker {broker_id} in {self.state_file}")
        return dict(entry)

    def kill(self, broker_id: int) -> None:
        entry = self._broker(broker_id)
        if not pid_runs(entry["pid"], entry["command"]):
            raise ControlError(f"broker {broker_id} (pid {entry['pid']}) is not running")
        os.kill(entry["pid"], signal.SIGKILL)

    def start(self, broker_id: int) -> None:
        entry = self._broker(broker_id)
        if pid_runs(entry["pid"], entry["command"]):
            raise ControlError(f"broker {broker_id} is still running (pid {entry['pid']})")
        Path(entry["data_dir"]).mkdir(parents=True, exist_ok=True)
        pid = spawn_detached(entry["command"], entry["env"], entry["cwd"], entry["log"])
        state = read_state(self.state_file)
        state["brokers"][str(broker_id)]["pid"] = pid
        write_state(self.state_file, state)

    def wipe(self, broker_id: int) -> None:
        entry = self._broker(broker_id)
        if pid_runs(entry["pid"], entry["command"]):
            raise ControlError(f"broker {broker_id} must be stopped before a wipe")
        shutil.rmtree(entry["data_dir"], ignore_errors=True)
        Path(entry["data_dir"]).mkdir(parents=True, exist_ok=True)

    def broker_log(self, broker_id: int) -> str | None:
        path = Path(self._broker(broker_id)["log"])
        try:
            with open(path, "rb") as log:
                log.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
                return log.read().decode(errors="replace")
        except OSError:
            return None

    def _s3_signal(self, sig: signal.Signals) -> None:
        s3 = read_state(self.state_file)["s3"]
        if not pid_runs(s3["pid"], s3["command"]):
            raise ControlError(f"the S3 server (pid {s3['pid']}) is not running")
        os.kill(s3["pid"], sig)

    def pause_s3(self) -> None:
        self._s3_signal(signal.SIGSTOP)

    def resume_s3(self) -> None:
        self._s3_signal(signal.SIGCONT)


# -- docker-compose ------------------------------------------------------------


class ComposeControl(Control):
    """A docker-compose cluster: services broker1..3 and minio."""

    def __init__(self, files: list[str], project: str, bootstrap: str) -> None:
        addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
        if len(addresses) != len(BROKER_IDS):
            raise ControlError(f"--bootstrap needs {len(BROKER_IDS)} addresses, got {bootstrap!r}")
        self.files = list(files)
        self.project = project
        self.brokers = dict(zip(BROKER_IDS, addresses, strict=True))
        self.bootstrap = ",".join(addresses)

    def _compose(self, *args: str) -> str:
        command = ["docker-compose"]
        for path in self.files:
            command += ["-f", path]
        command += ["-p", self.project, *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=COMPOSE_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ControlError(f"{' '.join(command)}: {exc}") from None
        if done.returncode != 0:
            raise ControlError(f"{' '.join(command)} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done.stdout

    @staticmethod
    def _service(broker_id: int) -> str:
        if broker_id not in BROKER_IDS:
            raise ControlError(f"no broker {broker_id} (ids {BROKER_IDS})")
        return f"broker{broker_id}"

    def kill(self, broker_id: int) -> None:
        self._compose("kill", "-s", "SIGKILL", self._service(broker_id))

    def start(self, broker_id: int) -> None:
        self._compose("start", self._service(broker_id))

    def wipe(self, broker_id: int) -> None:
        self._compose("run", "--rm", "--no-deps", "--entrypoint", "sh", self._service(broker_id),
                      "-c", f"rm -rf {COMPOSE_DATA_DIR}")

    def broker_log(self, broker_id: int) -> str | None:
        return self._compose("logs", "--no-color", "--tail", "20000", self._service(broker_id))

    def pause_s3(self) -> None:
        self._compose("pause", S3_SERVICE)

    def resume_s3(self) -> None:
        self._compose("unpause", S3_SERVICE)


# -- command line --------------------------------------------------------------


def add_control_args(parser: argparse.ArgumentParser) -> None:
    """The options every scenario takes to reach its cluster."""
    group = parser.add_argument_group("cluster (one of --launcher or --compose-file)")
    group.add_argument("--launcher", metavar="STATE_FILE",
                       help="state.json written by python -m deploy.launcher")
    group.add_argument("--compose-file", action="append", default=[], metavar="F",
                       help="docker-compose file (repeatable)")
    group.add_argument("--project", help="docker-compose project name")
    group.add_argument("--bootstrap", metavar="H:P,H:P,H:P",
                       help="addresses of broker1..3, in order")


def control_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Control:
    """The backend the options select (exits with a usage error otherwise)."""
    if args.launcher and args.compose_file:
        parser.error("give either --launcher or --compose-file, not both")
    if args.launcher:
        return ProcessControl(args.launcher)
    if args.compose_file:
        if not args.project or not args.bootstrap:
            parser.error("--compose-file needs --project and --bootstrap")
        try:
            return ComposeControl(args.compose_file, args.project, args.bootstrap)
        except ControlError as exc:
            parser.error(str(exc))
    parser.error("give --launcher STATE_FILE or --compose-file F --project P --bootstrap ...")
    raise AssertionError("unreachable")
