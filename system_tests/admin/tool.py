"""Run ``tierd admin`` as a separate process, as an operator or script would."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

# Bound for one tool run: the tool's own --timeout (default 30 s) plus start-up.
RUN_TIMEOUT_S = 120.0


@dataclass(slots=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_admin(bootstrap: str | None, *args: str, timeout_s: float = RUN_TIMEOUT_S,
              stdin: str | None = None) -> Result:
    """``python -m broker admin [-b bootstrap] args...``; never raises on a non-zero exit."""
    cmd = [sys.executable, "-m", "broker", "admin"]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout_s,
                          input=stdin)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def ok(bootstrap: str | None, *args: str, **kw: Any) -> Result:
    """``run_admin`` that must exit 0 (the assertion shows stderr)."""
    res = run_admin(bootstrap, *args, **kw)
    assert res.returncode == 0, f"tierd admin {' '.join(args)} -> {res.returncode}: {res.stderr}"
    return res
