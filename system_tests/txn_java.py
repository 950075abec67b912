"""Compile and run java/TxnTool.java (the Java client's transactions) for the system tests.

Built like KafkaTool (see javatool.py): same jars and logging config,
compiled on first use into `.deps/javabin/txn-<hash>/`, keyed by the
source and the jar names, so an unchanged tree reuses the classes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from system_tests import javatool

SOURCE = Path(__file__).resolve().parent / "java" / "TxnTool.java"
MAIN_CLASS = "TxnTool"
# Bound for one tool run; the tool's own client timeouts are 30 s.
TIMEOUT_S = 180.0


def _classes() -> tuple[Path, list[Path]]:
    jars = javatool.classpath_jars()
    digest = hashlib.sha256(SOURCE.read_bytes())
    for jar in jars:
        digest.update(jar.name.encode())
    target = javatool.BIN_ROOT / f"txn-{digest.hexdigest()[:16]}"
    if (target / f"{MAIN_CLASS}.class").exists():
        return target, jars
    javac = shutil.which("javac")
    if javac is None:
        raise javatool.JavaToolError("javac not on PATH: run scripts/install-deps.sh")
    javatool.BIN_ROOT.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=javatool.BIN_ROOT, prefix="build-txn-"))
    done = subprocess.run([javac, "-encoding", "UTF-8", "-d", str(scratch), "-cp",
                           os.pathsep.join(map(str, jars)), str(SOURCE)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise javatool.JavaToolError("javac failed", done.returncode, stderr=done.stderr)
    try:
        scratch.rename(target)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
    return target, jars


def command(args: Sequence[str]) -> list[str]:
    classes, jars = _classes()
    java = shutil.which("java")
    if java is None:
        raise javatool.JavaToolError("java not on PATH: run scripts/install-deps.sh")
    return [java, *javatool.JVM_FLAGS, f"-Dlog4j2.configurationFile={javatool.LOG_CONFIG}",
            "-cp", os.pathsep.join(map(str, [classes, *jars])), MAIN_CLASS, *args]


def run(args: Sequence[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run one TxnTool subcommand to completion; its (last) JSON line.

    Raises:
        JavaToolError: non-zero exit or no JSON.
    """
    done = subprocess.run(command(args), capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise javatool.JavaToolError(f"TxnTool {args[0]} exited {done.returncode}: "
                                     f"{done.stdout[-2000:]}", done.returncode,
                                     stderr=done.stderr)
    return dict(json.loads(lines[-1]))


class OpenTransaction:
    """`TxnTool open`: a Java producer holding a transaction open until told otherwise."""

    def __init__(self, args: Sequence[str], stderr_path: Path) -> None:
        self._stderr = stderr_path.open("w")
        self.proc = subprocess.Popen(command(["open", *args]), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        ready = self._line()
        if not ready.get("ready"):
            self.close()
            raise javatool.JavaToolError(f"TxnTool open failed: {ready}")

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return dict(json.loads(line)) if line.startswith("{") else {"error": line or "EOF"}

    def send(self, command_: str) -> dict[str, Any]:
        """"commit", "abort" or "exit"; the tool's answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command_ + "\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self._stderr.close()
