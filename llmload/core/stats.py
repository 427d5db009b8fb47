"""Descriptive statistics over raw values: the one percentile of llmload, and mean / std.

Percentiles use linear interpolation between closest ranks, the same as numpy's default
`method="linear"` and so the same as vLLM `bench serve` (which calls `np.percentile` on the raw
per-request values): for sorted values x[0..n-1] and q in [0, 100], h = (n - 1) * q / 100 and
the result is x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)]). Every percentile
llmload reports or uses is this one (`percentile_of_ranks`): of a list (`percentile`), of a
histogram (`summarize_counts`), and of a numpy array without a sort (`percentiles_of_array`,
for the hot paths).
`std` is the population standard deviation (numpy's default ddof=0, as vLLM reports it).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of `values`, numpy-style linear interpolation."""
    if not values:
        raise ValueError("percentile of no values")
    return _percentile_of_sorted(sorted(values), q)


def _percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    return percentile_of_ranks(len(ordered), q, ordered.__getitem__)


def percentile_ranks(n: int, q: float) -> tuple[int, int]:
    """The two ranks (0-based, in sorted order) of n values that the q-th percentile interpolates
    between; ValueError when q is outside [0, 100]."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    lo = math.floor((n - 1) * q / 100.0)
    return lo, min(lo + 1, n - 1)


def percentile_of_ranks(n: int, q: float, at: Callable[[int], float]) -> float:
    """The q-th percentile of n values, `at(rank)` giving the value of a rank (0-based, in sorted
    order): the one interpolation of `percentile`, `summarize` and `summarize_counts`."""
    lo, hi = percentile_ranks(n, q)
    h = (n - 1) * q / 100.0
    low = at(lo)
    return low + (h - lo) * (at(hi) - low)


def percentiles_of_array(values: np.ndarray, wanted: Sequence[float]) -> dict[float, float]:
    """The `wanted` percentiles of a non-empty array (`percentile`'s, bit for bit), from one
    `np.partition` at the ranks they interpolate between (the values a sort puts there)."""
    n = values.size
    part = np.partition(values, sorted({r for q in wanted for r in percentile_ranks(n, q)}))
    return {q: percentile_of_ranks(n, q, lambda rank: part[rank].item()) for q in wanted}


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def pstdev(values: Sequence[float]) -> float:
    """Population standard deviation (divides by n, like numpy's np.std)."""
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / len(values))


def percentile_label(q: float) -> str:
    """Column label for a percentile: 50 -> 'p50', 99.9 -> 'p99.9'."""
    return f"p{q:g}"


@dataclass(frozen=True, slots=True)
class Summary:
    """mean / median / std and the requested percentiles of one metric, in its input unit."""

    count: int
    mean: float
    median: float
    std: float
    percentiles: dict[float, float]

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            "count": self.count,
            "mean": self.mean,
            "median": self.median,
            "std": self.std,
        }
        out.update({percentile_label(q): v for q, v in self.percentiles.items()})
        return out


def summarize(values: Sequence[float], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> Summary | None:
    """Summary of raw values, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)  # once for every percentile
    return Summary(
        count=len(values),
        mean=mean(values),
        median=_percentile_of_sorted(ordered, 50.0),
        std=pstdev(values),
        percentiles={q: _percentile_of_sorted(ordered, q) for q in percentiles},
    )


def summarize_counts(
    counts: Mapping[float, int], percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> Summary | None:
    """`summarize` of a histogram (value -> how many times it occurs), or None when it is empty.

    The percentiles are exactly those of the expanded values (the same ranks and interpolation);
    mean and std sum value * count, which can differ from the expanded sums in the last bit.
    Memory and time grow with the distinct values, not with the count."""
    items = sorted((v, c) for v, c in counts.items() if c > 0)
    if not items:
        return None
    values = [v for v, _ in items]
    ends = list(accumulate(c for _, c in items))  # ends[i]: rank just past the last copy of values[i]
    n = ends[-1]

    def at(rank: int) -> float:
        return values[bisect_right(ends, rank)]

    def pct(q: float) -> float:
        return percentile_of_ranks(n, q, at)

    m = math.fsum(v * c for v, c in items) / n
    return Summary(
        count=n,
        mean=m,
        median=pct(50.0),
        std=math.sqrt(math.fsum(c * (v - m) ** 2 for v, c in items) / n),
        percentiles={q: pct(q) for q in percentiles},
    )
