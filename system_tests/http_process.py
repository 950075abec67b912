"""A test server process (moto, the GCS emulator, Azurite) on a free loopback
port, started and waited for until it answers HTTP, and stopped.

``HttpServerProcess`` holds the start/wait/stop logic once; a subclass names
its command (``_command``) and, if it needs them, the environment and
working directory of the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from system_tests.harness import free_port

LOOPBACK = "127.0.0.1"

# moto imports a lot on start, Node and the emulators take about a second;
# 30 s covers a loaded CI machine.
STARTUP_TIMEOUT_S = 30.0
# A port picked as free can be taken before the server binds it; try a few.
START_ATTEMPTS = 3
PROBE_INTERVAL_S = 0.05

S = TypeVar("S", bound="HttpServerProcess")

# prctl option: signal to send this process when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGTERM when the test process
    dies, even by SIGKILL or a timeout, so no server outlives its run."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class HttpServerProcess:
    """A server process on loopback, logging to ``log_path``. Not thread-safe.

    ``keeps_port``: a ``start`` after a ``stop`` uses the previous port (a
    store's outage and return, same endpoint); otherwise every start picks a
    fresh free port.
    """

    name = "server"
    keeps_port = False

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str] | None:
        """The process's environment; None: this process's."""
        return None

    def _cwd(self) -> Path | None:
        return None

    def start(self) -> None:
        """Start and wait until it answers HTTP.

        Raises:
            RuntimeError: it did not come up (its log is in the message).
        """
        fixed = self.keeps_port and self.port != 0
        for _ in range(1 if fixed else START_ATTEMPTS):
            if not fixed:
                self.port = free_port()
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    self._command(), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=self._cwd(), env=self._env(),
                    preexec_fn=_die_with_parent)
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"{self.name} did not start; log:\n{self.log_path.read_text()[-4000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=1.0)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                return True
            except OSError:
                time.sleep(PROBE_INTERVAL_S)
        return False

    def stop(self) -> None:
        """Terminate the process (kill if it lingers). Idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def running(server: S) -> Iterator[S]:
    """``server`` started for the block, stopped after it (a fixture's body)."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
