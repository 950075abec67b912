"""The one report printer (text tables) and the JSON writer for every scenario."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from bench.registry import Scenario
from bench.results import TANSU, TIERD, CaseResult, MetricSpec, Target, Verdict
from bench.runner import BenchRun
from bench.stats import median, ratio


@dataclass
class SummaryRow:
    """One metric of one case: per-round values, medians, ratio and target verdict."""

    scenario: str
    case: str
    metric: MetricSpec
    tierd_rounds: list[float]
    tansu_rounds: list[float]
    tierd_median: float
    tansu_median: float
    ratio: float
    target: Target | None
    verdict: Verdict | None

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-friendly dict (NaN becomes null)."""
        return {
            "scenario": self.scenario,
            "case": self.case,
            "metric": self.metric.key,
            "unit": self.metric.unit,
            "tierd_rounds": [_num(v) for v in self.tierd_rounds],
            "tansu_rounds": [_num(v) for v in self.tansu_rounds],
            "tierd_median": _num(self.tierd_median),
            "tansu_median": _num(self.tansu_median),
            "ratio_tierd_over_tansu": _num(self.ratio),
            "target": self.target.describe() if self.target else None,
            "verdict": self.verdict.value if self.verdict else None,
        }


def _num(value: float) -> float | None:
    """Return ``value`` or None for NaN (JSON has no NaN)."""
    return None if value is None or math.isnan(value) else value


def case_order(results: Iterable[CaseResult], scenario: str) -> list[str]:
    """Return the case names of ``scenario`` in first-seen order (error placeholders skipped)."""
    seen: dict[str, None] = {}
    for r in results:
        if r.scenario == scenario and r.case != "*":
            seen.setdefault(r.case, None)
    return list(seen)


def round_values(
    results: list[CaseResult], scenario: str, case: str, broker: str, metric: str, rounds: int
) -> list[float]:
    """Return the metric per round (NaN for missing, errored or unverified runs)."""
    values = [math.nan] * rounds
    for r in results:
        if (r.scenario, r.case, r.broker) == (scenario, case, broker) and not r.failed():
            values[r.round] = r.metrics.get(metric, math.nan)
    return values


def tierd_failed(results: list[CaseResult], scenario: str, case: str) -> bool:
    """Return True if any tierd run of this case errored or failed verification."""
    return any(
        r.failed() for r in results if (r.scenario, r.case, r.broker) == (scenario, case, TIERD)
    )


def find_target(scenario: Scenario, case: str, metric: str) -> Target | None:
    """Return the first target of ``scenario`` that judges ``metric`` in ``case``."""
    return next((t for t in scenario.targets if t.applies_to(case, metric)), None)


def summarize(run: BenchRun) -> list[SummaryRow]:
    """Build summary rows for every scenario, case and metric with data."""
    rows: list[SummaryRow] = []
    ran_tierd = any(b.name == TIERD for b in run.brokers)
    for scenario in run.scenarios:
        for case in case_order(run.results, scenario.name):
            broken = ran_tierd and tierd_failed(run.results, scenario.name, case)
            for metric in (m for m in scenario.metrics if m.applies_to(case)):
                rows.append(_summary_row(run, scenario, case, metric, broken))
    return rows


def _summary_row(
    run: BenchRun, scenario: Scenario, case: str, metric: MetricSpec, tierd_broken: bool
) -> SummaryRow:
    """Compute medians, ratio and verdict for one metric of one case."""
    rounds = run.config.rounds
    tierd = round_values(run.results, scenario.name, case, TIERD, metric.key, rounds)
    tansu = round_values(run.results, scenario.name, case, TANSU, metric.key, rounds)
    t_med, b_med = median(tierd), median(tansu)
    target = find_target(scenario, case, metric.key)
    verdict = target.evaluate(t_med, b_med) if target else None
    if target and tierd_broken:
        verdict = Verdict.FAIL
    return SummaryRow(
        scenario.name,
        case,
        metric,
        tierd,
        tansu,
        t_med,
        b_med,
        ratio(t_med, b_med),
        target,
        verdict,
    )


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """Render a plain-text table; columns in ``right`` are right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _rounds_text(metric: MetricSpec, values: list[float]) -> str:
    """Render per-round values separated by ' / '."""
    return " / ".join(metric.format(v) for v in values)


def _row_cells(row: SummaryRow) -> list[str]:
    """Return the table cells for one summary row."""
    label = f"{row.metric.label} ({row.metric.unit})"
    ratio_text = "-" if math.isnan(row.ratio) else f"{row.ratio:.2f}x"
    return [
        label,
        row.metric.format(row.tierd_median),
        row.metric.format(row.tansu_median),
        ratio_text,
        row.target.describe() if row.target else "",
        row.verdict.value if row.verdict else "",
        _rounds_text(row.metric, row.tierd_rounds),
        _rounds_text(row.metric, row.tansu_rounds),
    ]


HEADERS = (
    "metric",
    "tierd median",
    "Tansu median",
    "ratio",
    "target",
    "result",
    "tierd per round",
    "Tansu per round",
)


def case_header(run: BenchRun, scenario: Scenario, case: str) -> str:
    """Return the title line of one case table, including message count and problems."""
    runs = [r for r in run.results if (r.scenario, r.case) == (scenario.name, case)]
    counts = {int(r.metrics["messages"]) for r in runs if "messages" in r.metrics}
    count_text = f" ({', '.join(f'{c:,}' for c in sorted(counts))} msgs)" if counts else ""
    return f"== {scenario.name}: {case}{count_text} =="


def case_problems(run: BenchRun, scenario: str, case: str) -> list[str]:
    """Return lines describing errors, failed verification and notes for one case."""
    lines: list[str] = []
    for r in run.results:
        if (r.scenario, r.case) != (scenario, case):
            continue
        tag = f"   {r.broker} round {r.round + 1}:"
        if r.error:
            lines.append(f"{tag} ERROR {r.error}")
        elif not r.verified:
            lines.append(f"{tag} NOT VERIFIED (excluded from medians)")
        lines.extend(f"{tag} {note}" for note in r.notes)
    return lines


def render(run: BenchRun, rows: list[SummaryRow]) -> str:
    """Render the whole text report."""
    out: list[str] = [describe_run(run), ""]
    for scenario in run.scenarios:
        out.append(f"### {scenario.name} - {scenario.description}")
        for case in case_order(run.results, scenario.name):
            case_rows = [r for r in rows if (r.scenario, r.case) == (scenario.name, case)]
            out.append(case_header(run, scenario, case))
            out.append(format_table(HEADERS, [_row_cells(r) for r in case_rows], {1, 2, 3}))
            out.extend(case_problems(run, scenario.name, case))
            out.append("")
        out.extend(scenario_errors(run, scenario.name))
    out.append(render_verdicts(run, rows))
    return "\n".join(out)


def scenario_errors(run: BenchRun, scenario: str) -> list[str]:
    """Return lines for whole-scenario failures (e.g. the broker never started)."""
    lines = [
        f"!! {r.scenario} on {r.broker} round {r.round + 1}: {r.error.splitlines()[0]}"
        for r in run.results
        if r.scenario == scenario and r.case == "*" and r.error
    ]
    return [*lines, ""] if lines else []


def describe_run(run: BenchRun) -> str:
    """Return a short header: brokers, rounds, scale and duration."""
    cfg = run.config
    brokers = ", ".join(b.label for b in run.brokers)
    took = run.finished_at - run.started_at
    return (
        f"tierd vs Tansu benchmark: brokers [{brokers}], {cfg.rounds} round(s), "
        f"scale {cfg.scale:g}, partitions {cfg.partitions}, took {took:.0f}s. "
        f"Ratio = tierd/Tansu; '-' = not measured."
    )


def render_verdicts(run: BenchRun, rows: list[SummaryRow]) -> str:
    """Return the closing summary of targets, verification and errors."""
    judged = [r for r in rows if r.verdict is not None]
    counts = {v: sum(1 for r in judged if r.verdict is v) for v in Verdict}
    lines = [
        "== summary ==",
        f"targets: {counts[Verdict.PASS]} PASS, {counts[Verdict.FAIL]} FAIL, "
        f"{counts[Verdict.NA]} n/a (informational; --strict turns FAIL into exit code 1)",
    ]
    lines.extend(
        f"  FAIL {r.scenario} {r.case}: {r.metric.label} tierd={r.metric.format(r.tierd_median)}"
        f" Tansu={r.metric.format(r.tansu_median)} target {r.target.describe() if r.target else ''}"
        for r in judged
        if r.verdict is Verdict.FAIL
    )
    failed = [r for r in run.results if r.failed()]
    lines.append(f"errored or unverified runs: {len(failed)}")
    lines.extend(f"  problem: {p}" for p in run.problems)
    return "\n".join(lines)


def print_report(run: BenchRun, rows: list[SummaryRow], stream: TextIO = sys.stdout) -> None:
    """Print the text report to ``stream``."""
    print(render(run, rows), file=stream, flush=True)


def _tool_version(argv: list[str]) -> str | None:
    """Return the first line of ``argv``'s output, or None on failure (10 s timeout)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def environment(run: BenchRun) -> dict[str, Any]:
    """Return facts about the machine and software used for the run."""
    import confluent_kafka

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None),
        "librdkafka": confluent_kafka.libversion()[0],
        "git_commit": _tool_version(["git", "rev-parse", "HEAD"]),
    }
    for spec in run.brokers:
        env[f"{spec.name}_command"] = spec.command_template
        if spec.name == TANSU:
            env["tansu_version"] = _tool_version([spec.command(0, Path("."))[0], "--version"])
    return env


def _config_json(run: BenchRun) -> dict[str, Any]:
    """Return the config as JSON-friendly values."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(run.config).items()}


def _result_json(result: CaseResult) -> dict[str, Any]:
    """Return one raw result with NaN metrics as null."""
    data = asdict(result)
    data["metrics"] = {k: _num(v) for k, v in result.metrics.items()}
    return data


def write_json(run: BenchRun, rows: list[SummaryRow], path: Path) -> None:
    """Write config, environment, raw per-round results and the summary to ``path``."""
    doc = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.finished_at)),
        "duration_s": run.finished_at - run.started_at,
        "config": _config_json(run),
        "environment": environment(run),
        "problems": run.problems,
        "summary": [r.to_json() for r in rows],
        "results": [_result_json(r) for r in run.results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
