"""A real ZooKeeper server (Debian's package) for cluster-mode tests.

Started as ``java -cp /usr/share/java/zookeeper.jar:/usr/share/java/* \
org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` on a free loopback
port, with a short tick so tests can use sessions of a few seconds. Ready
when it answers the ``ruok`` four-letter word with ``imok``; every wait has a
deadline. ``pause``/``resume`` (SIGSTOP/SIGCONT) make it unavailable for a
while without losing its data.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from system_tests.harness import free_port

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/*"
# A short tick lets tests use 2-6 s sessions (the minimum session is 2 ticks).
TICK_MS = 200
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def four_letter(port: int, word: bytes, timeout_s: float = 1.0) -> bytes:
    """Send a ZooKeeper four-letter word; b"" when it does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(word)
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks)
    except OSError:
        return b""


class ZooKeeperServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "zookeeper.log"

    def start(self) -> None:
        data = self.workdir / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"tickTime={TICK_MS}", f"dataDir={data}", f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1", "maxClientCnxns=0", "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat", "minSessionTimeout=400",
            "maxSessionTimeout=60000"]) + "\n")
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", ZK_CLASSPATH,
                 "-Dzookeeper.log.dir=" + str(self.workdir),
                 "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if four_letter(self.port, b"ruok") == b"imok":
                return
            time.sleep(0.1)
        tail = self.log_path.read_text(errors="replace")[-4000:]
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start on port {self.port}; log:\n{tail}")

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def make_chroot(self, path: str) -> str:
        """Create ``path`` (e.g. /tierd-test) and return the connect string with it."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect, timeout=5)
        client.start(timeout=10)
        try:
            client.ensure_path(path)
        finally:
            client.stop()
            client.close()
        return self.connect + path
