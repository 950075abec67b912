"""Small, dependency-free statistics helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    """Return the median of ``values`` (NaN when empty)."""
    finite = sorted(v for v in values if not math.isnan(v))
    if not finite:
        return math.nan
    mid = len(finite) // 2
    if len(finite) % 2:
        return finite[mid]
    return (finite[mid - 1] + finite[mid]) / 2.0


def percentile(values: Sequence[float], pct: float) -> float:
    """Return the ``pct`` percentile (0..100) using linear interpolation (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (pct / 100.0) * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    frac = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * frac


def ratio(numerator: float, denominator: float) -> float:
    """Return ``numerator / denominator``, NaN when either is missing or the divisor is 0."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator
