"""Benchmark configuration: one frozen dataclass built from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

#: Base message counts per throughput case (multiplied by ``--scale``). Broker CPU comes
#: from /proc in 10 ms ticks, so phases must be long enough for the per-message figure
#: to be stable; with both brokers near 1M msg/s (100 B) the full default run takes
#: about 2 minutes on 2 cores, leaving room for a much slower broker within ~10 min.
DEFAULT_SMALL_COUNT = 500_000
DEFAULT_LARGE_COUNT = 200_000


@dataclass(frozen=True)
class BenchConfig:
    """Everything a benchmark run needs to know; immutable once parsed."""

    rounds: int = 3
    scale: float = 1.0
    small_count: int = DEFAULT_SMALL_COUNT
    large_count: int = DEFAULT_LARGE_COUNT
    partitions: int = 1
    only: str | None = None
    scenarios: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    e2e_seconds: float = 10.0
    e2e_rate: int = 1000
    strict: bool = False
    output: Path = RESULTS_DIR / "latest.json"
    log_dir: Path = RESULTS_DIR / "logs"
    tansu_bin: str | None = None
    tierd_cmd: str | None = None
    startup_timeout: float = 60.0
    idle_timeout: float = 15.0

    def count_for(self, size: int) -> int:
        """Return the scaled message count for a throughput case with ``size``-byte values."""
        base = self.small_count if size <= 512 else self.large_count
        return max(100, int(round(base * self.scale)))

    def phase_timeout(self, count: int) -> float:
        """Return a generous upper bound in seconds for one produce or consume phase."""
        return 60.0 + count / 500.0
