"""Common result types shared by every scenario, the runner and the report."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from enum import StrEnum

TIERD = "tierd"
TANSU = "tansu"


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is named, formatted and judged; ``cases`` (a glob) limits the
    cases whose tables show it."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    fmt: str = "{:,.1f}"
    cases: str = "*"

    def applies_to(self, case: str) -> bool:
        """Return True if ``case`` reports this metric (fnmatch on the name)."""
        return fnmatch.fnmatchcase(case, self.cases)

    def format(self, value: float) -> str:
        """Render ``value`` with this metric's format ('-' when missing)."""
        if value is None or math.isnan(value):
            return "-"
        return self.fmt.format(value)


class TargetKind(StrEnum):
    """How a target compares tierd's median with Tansu's or with a constant."""

    RATIO_AT_LEAST = "ratio>="
    RATIO_AT_MOST = "ratio<="
    ABSOLUTE_AT_MOST = "tierd<="
    ABSOLUTE_AT_LEAST = "tierd>="


class Verdict(StrEnum):
    """Outcome of one target check."""

    PASS = "PASS"
    FAIL = "FAIL"
    NA = "n/a"


@dataclass(frozen=True)
class Target:
    """An issue target for one metric in the cases whose name matches ``cases``."""

    metric: str
    kind: TargetKind
    value: float
    cases: str = "*"
    unit: str = ""

    def applies_to(self, case: str, metric: str) -> bool:
        """Return True if this target judges ``metric`` in ``case`` (fnmatch on the name)."""
        return metric == self.metric and fnmatch.fnmatchcase(case, self.cases)

    def describe(self) -> str:
        """Return a short human description, e.g. '>= 1.0x Tansu' or '<= 50 ms'."""
        if self.kind is TargetKind.RATIO_AT_LEAST:
            return f">= {self.value:g}x Tansu"
        if self.kind is TargetKind.RATIO_AT_MOST:
            return f"<= {self.value:g}x Tansu"
        op = "<=" if self.kind is TargetKind.ABSOLUTE_AT_MOST else ">="
        return f"{op} {self.value:g} {self.unit}".rstrip()

    def evaluate(self, tierd: float, tansu: float) -> Verdict:
        """Judge tierd's median (and Tansu's for ratio targets)."""
        if self.kind in (TargetKind.RATIO_AT_LEAST, TargetKind.RATIO_AT_MOST):
            if math.isnan(tierd) or math.isnan(tansu) or tansu == 0:
                return Verdict.NA
            r = tierd / tansu
            good = r >= self.value if self.kind is TargetKind.RATIO_AT_LEAST else r <= self.value
        else:
            if math.isnan(tierd):
                return Verdict.NA
            good = (
                tierd <= self.value
                if self.kind is TargetKind.ABSOLUTE_AT_MOST
                else tierd >= self.value
            )
        return Verdict.PASS if good else Verdict.FAIL


@dataclass
class CaseResult:
    """Metrics from one scenario case, on one broker, in one round."""

    scenario: str
    case: str
    broker: str
    round: int
    metrics: dict[str, float] = field(default_factory=dict)
    verified: bool = True
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def failed(self) -> bool:
        """Return True if the case errored or its data did not verify."""
        return self.error is not None or not self.verified
