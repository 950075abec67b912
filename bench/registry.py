"""Scenario registry: each scenario module registers one :class:`Scenario`.

A scenario is a function ``run(ctx) -> list[CaseResult]`` called once per broker per
round with a fresh broker, plus the metrics it reports (in display order) and the
issue targets that judge them. New scenarios (consumer-group consume, idempotent
producer, tiered cold read, ...) go in their own module under ``bench/scenarios/``,
call :func:`register`, and get listed in ``bench/scenarios/__init__.py``.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from bench.brokers import BrokerProcess
from bench.config import BenchConfig
from bench.results import CaseResult, MetricSpec, Target


@dataclass
class ScenarioContext:
    """What a scenario gets to work with for one broker in one round."""

    config: BenchConfig
    broker: BrokerProcess
    round: int

    @property
    def bootstrap(self) -> str:
        """Return the broker's bootstrap address."""
        return self.broker.bootstrap

    def case_selected(self, case: str) -> bool:
        """Return True if ``case`` matches ``--cases`` (or no filter was given)."""
        patterns = self.config.cases
        return not patterns or any(fnmatch.fnmatchcase(case, p) for p in patterns)

    def topic_name(self, scenario: str, case: str) -> str:
        """Return a unique, legal topic name for this scenario case and round."""
        raw = f"bench-{scenario}-{case}-r{self.round}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", raw)[:249]

    def new_result(self, scenario: str, case: str) -> CaseResult:
        """Return an empty result stamped with scenario, case, broker and round."""
        return CaseResult(
            scenario=scenario, case=case, broker=self.broker.spec.name, round=self.round
        )

    def log(self, message: str) -> None:
        """Print a progress line to stderr."""
        print(
            f"[round {self.round + 1}/{self.config.rounds}] {self.broker.spec.label}: {message}",
            file=sys.stderr,
            flush=True,
        )


ScenarioFn = Callable[[ScenarioContext], list[CaseResult]]


@dataclass(frozen=True)
class Scenario:
    """A named workload with its metrics and targets."""

    name: str
    description: str
    run: ScenarioFn
    metrics: tuple[MetricSpec, ...]
    targets: tuple[Target, ...] = ()
    order: int = 100

    def metric(self, key: str) -> MetricSpec | None:
        """Return the spec for ``key`` if this scenario reports it."""
        return next((m for m in self.metrics if m.key == key), None)


_REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    """Add ``scenario`` to the registry (names must be unique) and return it."""
    if scenario.name in _REGISTRY:
        raise ValueError(f"scenario {scenario.name!r} registered twice")
    _REGISTRY[scenario.name] = scenario
    return scenario


def all_scenarios() -> list[Scenario]:
    """Return every registered scenario, ordered by ``Scenario.order``."""
    import bench.scenarios  # noqa: F401 - importing registers the built-in scenarios

    return sorted(_REGISTRY.values(), key=lambda s: s.order)


def select_scenarios(names: tuple[str, ...]) -> list[Scenario]:
    """Return the scenarios named in ``names`` (all when empty); unknown names raise."""
    scenarios = all_scenarios()
    if not names:
        return scenarios
    known = {s.name: s for s in scenarios}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown scenario(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
