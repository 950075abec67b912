"""Broker CPU accounting from ``/proc/<pid>/stat`` (Linux only)."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")

# Field positions counted after the ``(comm)`` field (state is index 0).
_UTIME, _STIME, _CUTIME, _CSTIME = 11, 12, 13, 14


def _stat_fields(pid: int) -> list[str]:
    """Return the whitespace-separated fields of /proc/<pid>/stat that follow ``comm``."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def process_cpu_ticks(pid: int, include_reaped_children: bool = False) -> int:
    """Return utime+stime of ``pid`` in clock ticks (optionally plus its reaped children)."""
    fields = _stat_fields(pid)
    ticks = int(fields[_UTIME]) + int(fields[_STIME])
    if include_reaped_children:
        ticks += int(fields[_CUTIME]) + int(fields[_CSTIME])
    return ticks


def _parent_map() -> dict[int, list[int]]:
    """Return ppid -> [pid, ...] for every process visible in /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry.name))[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    return parents


def descendant_pids(pid: int, limit: int = 1024) -> list[int]:
    """Return all live descendants of ``pid`` (breadth first, at most ``limit``)."""
    parents = _parent_map()
    found: list[int] = []
    frontier = [pid]
    while frontier and len(found) < limit:
        nxt = [child for parent in frontier for child in parents.get(parent, [])]
        found.extend(nxt)
        frontier = nxt
    return found[:limit]


def tree_cpu_seconds(pid: int) -> float:
    """Return CPU seconds (user+system) used by ``pid`` and its descendants so far.

    Reaped children are included through the root's cutime/cstime, so a broker that
    forks short-lived helpers is still charged for them.
    """
    ticks = process_cpu_ticks(pid, include_reaped_children=True)
    for child in descendant_pids(pid):
        try:
            ticks += process_cpu_ticks(child, include_reaped_children=True)
        except (OSError, ValueError, IndexError):
            continue
    return ticks / CLOCK_TICKS_PER_SECOND


def own_cpu_seconds() -> float:
    """Return CPU seconds used by the benchmark process itself (all threads)."""
    times = os.times()
    return times.user + times.system


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def child_pids(pid: int) -> list[int]:
    """Live descendants of ``pid`` from ``/proc/<pid>/task/*/children`` (recursively):
    cheaper than :func:`descendant_pids`' scan of all of /proc, for frequent sampling."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for children in Path(f"/proc/{parent}/task").glob("*/children"):
                try:
                    nxt.extend(int(c) for c in children.read_text().split())
                except (OSError, ValueError):
                    continue
        found.extend(nxt)
        frontier = nxt
    return found


class PeakRss:
    """Samples a process's RSS every ``interval_s`` in a thread while open;
    ``peak`` is the largest sample (bytes).

    With ``children``, each sample is the process's RSS plus its live
    descendants' (:func:`child_pids`, e.g. a broker's worker processes), and
    ``peak_children`` is the largest sample of the descendants alone.
    """

    def __init__(self, pid: int, interval_s: float = 0.05, children: bool = False) -> None:
        import threading

        self.pid = pid
        self.interval_s = interval_s
        self.children = children
        self.peak = 0
        self.peak_children = 0
        self._sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-rss")

    def _sample(self) -> None:
        own = rss_bytes(self.pid)
        kids = sum(rss_bytes(c) for c in child_pids(self.pid)) if self.children else 0
        self.peak = max(self.peak, own + kids)
        self.peak_children = max(self.peak_children, kids)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
