"""Round orchestration: fresh broker per round, brokers alternating A, B, A, B, ..."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from bench.brokers import BROKER_FACTORIES, BrokerProcess, BrokerSpec, BrokerStartError
from bench.config import BenchConfig
from bench.kafka_util import wait_metadata_ready
from bench.registry import Scenario, ScenarioContext
from bench.results import CaseResult

BROKER_ORDER = ("tierd", "tansu")


@dataclass
class BenchRun:
    """Everything a run produced: per-round results plus run-level problems."""

    config: BenchConfig
    scenarios: list[Scenario]
    brokers: list[BrokerSpec]
    results: list[CaseResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    finished_at: float = 0.0


def log(message: str) -> None:
    """Print a progress line to stderr."""
    print(message, file=sys.stderr, flush=True)


def broker_specs(config: BenchConfig) -> list[BrokerSpec]:
    """Return the brokers to run, in alternation order, honouring ``--only``."""
    names = [config.only] if config.only else list(BROKER_ORDER)
    return [BROKER_FACTORIES[name](config) for name in names]


def _startup_failure(
    spec: BrokerSpec, round_index: int, scenarios: list[Scenario], error: str
) -> list[CaseResult]:
    """Return one error result per scenario for a broker that could not be started."""
    return [
        CaseResult(scenario=s.name, case="*", broker=spec.name, round=round_index, error=error)
        for s in scenarios
    ]


def run_scenarios_on(
    broker: BrokerProcess, config: BenchConfig, round_index: int, scenarios: list[Scenario]
) -> list[CaseResult]:
    """Run every scenario against an already started broker."""
    results: list[CaseResult] = []
    ctx = ScenarioContext(config=config, broker=broker, round=round_index)
    for scenario in scenarios:
        if not broker.alive():
            error = f"broker exited (code {broker.returncode()}) before scenario started"
            results.append(
                CaseResult(scenario.name, "*", broker.spec.name, round_index, error=error)
            )
            continue
        try:
            results.extend(scenario.run(ctx))
        except Exception as exc:  # noqa: BLE001 - one scenario failing must not stop the run
            error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"{scenario.name}: ERROR {error}")
            results.append(
                CaseResult(scenario.name, "*", broker.spec.name, round_index, error=error)
            )
    return results


def run_broker_round(
    spec: BrokerSpec, config: BenchConfig, round_index: int, scenarios: list[Scenario]
) -> tuple[list[CaseResult], str | None]:
    """Start ``spec`` fresh, run all scenarios, stop it; return results and a start error."""
    log_path = config.log_dir / f"{spec.name}-round{round_index + 1}.log"
    log(f"[round {round_index + 1}/{config.rounds}] starting {spec.label} (log: {log_path})")
    try:
        with BrokerProcess(spec, log_path, config.startup_timeout) as broker:
            wait_metadata_ready(broker.bootstrap, config.startup_timeout)
            results = run_scenarios_on(broker, config, round_index, scenarios)
            if results and not broker.alive():
                tail = broker.log_tail()
                results[-1].notes.append(f"broker exited during the round; log tail:\n{tail}")
    except (BrokerStartError, TimeoutError) as exc:
        error = f"{spec.label} failed to start: {exc}"
        log(error)
        return _startup_failure(spec, round_index, scenarios, error), error
    return results, None


def run_bench(config: BenchConfig, scenarios: list[Scenario]) -> BenchRun:
    """Run ``config.rounds`` rounds, each broker once per round, alternating brokers."""
    specs = broker_specs(config)
    run = BenchRun(config=config, scenarios=scenarios, brokers=specs)
    disabled: set[str] = set()
    for round_index in range(config.rounds):
        for spec in specs:
            if spec.name in disabled:
                continue
            results, start_error = run_broker_round(spec, config, round_index, scenarios)
            run.results.extend(results)
            if start_error:
                run.problems.append(start_error)
                disabled.add(spec.name)
                log(f"{spec.label} disabled for the remaining rounds")
    run.finished_at = time.time()
    return run
