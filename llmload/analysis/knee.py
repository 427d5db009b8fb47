"""The knee of a concurrency ladder: the concurrency past which added users stop adding throughput
and add only latency; and the fall that stops a ladder early (over-saturation).

Definitions (docs/metrics.md, "The knee of the ladder"), on the points (conc, agg tok/s) of a
concurrency sweep's rungs (rate rungs and partial rungs are not points):

- **the knee**: a hinge, agg tok/s = a + s1 x min(c, k) + s2 x max(c - k, 0), fitted by least
  squares for each rung k between the second-lowest and the second-highest concurrency; the k of
  the least squared error (the lower on a tie) is the knee when s1 > 0 and past it each added
  user adds less than `KNEE_SHARE` of what each added below it, beyond the fit's noise
  (s2 + `SE_MARGIN` x its standard error < KNEE_SHARE x s1: a hinge placed near the top rung on
  a noisy straight line has a wide s2 and is no knee); else the curve still scales to the top
  rung: no knee in the range. A fit of every point is robust to a
  noisy rung in a way a difference of two neighbours is not. With s1 <= 0 (throughput does not
  rise from the lowest rung) the knee is the lowest rung. Needs `MIN_CONCS` concurrencies.
- **its interval**: a residual bootstrap of the fit (`RESAMPLES` resamples, seeded): the fitted
  curve plus the fit's residuals drawn with replacement, the knee placed again by the rule; the
  2.5th and 97.5th percentiles of the knees placed (`llmload.core.stats.percentile`), widened to
  the rungs that hold them (a resample that found no knee counts as the top rung).
- **over-saturation**: throughput falls as users rise. The ladder stops (`falling`) when each of
  the last `FALLS` rungs, each of more users than the one before, has an agg tok/s more than
  `FALL_PCT` % below that rung's, and the last more than `FALL_FROM_BEST_PCT` % below the
  ladder's best so far: two falls in a row, each beyond what a rung's noise moves its figure, to
  well below the best (on the busy 2-core build machine a plateau's rungs moved by 14 % and 5 %
  in a row).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.step_fit import least_squares
from llmload.core.stats import percentile

KNEE_SHARE = 0.5  # past the knee an added user adds less than this share of what one added below it
MIN_CONCS = 5  # distinct concurrencies a hinge needs (its 3 terms and 2 left to judge its noise by)
SE_MARGIN = 2.0  # ... beyond the fit's noise: s2 plus this many of its standard errors
RESAMPLES = 200  # the interval's bootstrap resamples
SEED = 52  # the bootstrap's seed: the same run gives the same interval
FALLS = 2  # rungs in a row whose throughput fell ...
FALL_PCT = 10.0  # ... each by more than this percentage of the rung before (a fixed-count rung past a
# batch limit reads a few % low by its last round alone: c = 7 over 6 slots runs 28 requests in 5 rounds)
FALL_FROM_BEST_PCT = 25.0  # ... and the last this far below the best rung so far


@dataclass(frozen=True, slots=True)
class Knee:
    """Where the ladder stops scaling (module docstring); `conc` None: no knee in the range."""

    conc: int | None
    low: int | None  # the 95 % bootstrap interval of the knee
    high: int | None
    slope_below: float  # agg tok/s each added user added up to the knee (s1; no knee: one line's)
    slope_above: float  # ... and past it (s2; no knee: the same)
    lowest: int  # the range the rule looked at
    highest: int
    batch_limit: int | None = None  # the batch limit measured beside it (None: none reached)
    batch_source: str = ""  # which measure gave it

    def past(self, conc: int) -> bool:
        """Whether a rung of `conc` users is past the knee (queueing: only latency added)."""
        return self.conc is not None and conc > self.conc

    def as_dict(self) -> dict[str, Any]:
        return {
            "conc": self.conc,
            "low": self.low,
            "high": self.high,
            "slope_below_tok_s": self.slope_below,
            "slope_above_tok_s": self.slope_above,
            "range": [self.lowest, self.highest],
            "batch_limit": self.batch_limit,
            "batch_source": self.batch_source,
            "rule": f"hinge fit; knee where added users add < {KNEE_SHARE:g} of the first rungs' tok/s each",
        }

    def line(self) -> str:
        """The knee as the sweep prints it under its table, in one line."""
        limit = (
            f"; batch limit {self.batch_limit} ({self.batch_source})" if self.batch_limit is not None else ""
        )
        if self.conc is None:
            return (
                f"knee: none in the range conc {self.lowest}-{self.highest}: agg tok/s rises "
                f"{self.slope_below:.1f} tok/s per added user to the top rung{limit}"
            )
        return (
            f"knee: conc {self.conc} [{self.low}, {self.high}] (95 %): agg tok/s rose "
            f"{self.slope_below:.1f} tok/s per added user up to it, {self.slope_above:+.1f} past it, "
            f"where added users add latency{limit}"
        )


@dataclass(frozen=True, slots=True)
class _Fits:
    """The best hinge of each of m curves on the same concurrencies: its knee (NO_KNEE: none in
    the range), slopes and fitted curve."""

    knee: np.ndarray  # (m,) int
    s1: np.ndarray
    s2: np.ndarray
    fitted: np.ndarray  # (m, n)


NO_KNEE = -1


def _place(concs: np.ndarray, curves: np.ndarray, candidates: Sequence[int]) -> _Fits:
    """The rule on each row of `curves` (m, n) at once: every candidate hinge by least squares,
    the least squared error's (the lower k on a tie), judged against its slopes."""
    m, n = curves.shape
    sse, coefs, fits, s2_var = [], [], [], []
    for k in candidates:
        design = np.column_stack([np.ones(n), np.minimum(concs, k), np.maximum(concs - k, 0.0)])
        coef = curves @ np.linalg.pinv(design).T  # (m, 3)
        fitted = coef @ design.T
        sse.append(((curves - fitted) ** 2).sum(axis=1))
        coefs.append(coef)
        fits.append(fitted)
        s2_var.append(float(np.linalg.pinv(design.T @ design)[2, 2]))
    errors = np.array(sse)  # (candidates, m)
    tolerance = 1e-9 * np.maximum(errors.min(axis=0), 1.0)
    best = (errors <= errors.min(axis=0) + tolerance).argmax(axis=0)  # the first (lowest k) of the least
    rows = np.arange(m)
    coef = np.array(coefs)[best, rows]  # (m, 3)
    s1, s2 = coef[:, 1], coef[:, 2]
    s2_se = np.sqrt(errors[best, rows] / max(n - 3, 1) * np.array(s2_var)[best])
    flat = s2 + SE_MARGIN * s2_se < KNEE_SHARE * s1
    knee = np.where(flat, np.array(candidates)[best], NO_KNEE)
    rising = s1 > 1e-9 * np.abs(curves).max(axis=1)  # a flat curve's s1 is 0 up to rounding
    knee = np.where(rising, knee, int(concs.min()))
    return _Fits(knee, s1, s2, np.array(fits)[best, rows])


def knee_of(
    points: Iterable[tuple[int, float]], batch_limit: int | None = None, batch_source: str = ""
) -> Knee | None:
    """The knee of the curve (conc, agg tok/s) by the rule (module docstring), with its interval;
    None with fewer than MIN_CONCS concurrencies."""
    pairs = sorted((int(c), float(r)) for c, r in points if math.isfinite(r))
    distinct = sorted({c for c, _ in pairs})
    if len(distinct) < MIN_CONCS:
        return None
    concs = np.array([c for c, _ in pairs], dtype=float)
    rates = np.array([r for _, r in pairs], dtype=float)
    candidates = distinct[1:-1]
    fit = _place(concs, rates[None, :], candidates)
    knee = int(fit.knee[0])
    s1, s2 = float(fit.s1[0]), float(fit.s2[0])
    if knee == NO_KNEE:  # the slope of one line through every point, below and past alike
        (_, slope), _, _ = least_squares([[1.0] * len(concs), concs.tolist()], rates.tolist())
        return Knee(
            None, None, None, float(slope), float(slope), distinct[0], distinct[-1], batch_limit, batch_source
        )
    fitted = fit.fitted[0]
    rng = np.random.default_rng(SEED)
    drawn = fitted + rng.choice(rates - fitted, size=(RESAMPLES, len(rates)), replace=True)
    placed = _place(concs, drawn, candidates).knee
    placed = np.where(placed == NO_KNEE, distinct[-1], placed)
    low = max(c for c in distinct if c <= percentile(placed.tolist(), 2.5))
    high = min(c for c in distinct if c >= percentile(placed.tolist(), 97.5))
    low, high = min(low, knee), max(high, knee)
    return Knee(knee, low, high, s1, s2, distinct[0], distinct[-1], batch_limit, batch_source)


def row_batch_limit(rows: Sequence[SweepRow]) -> int | None:
    """The batch limit the sweep's rows show: when some rung's requests waited for a place in the
    server's batch, the most streams any rung decoded at once (`SweepRow.decoding_max`,
    llmload.analysis.run.steps); None when no request waited."""
    if not any(r.waited for r in rows):
        return None
    seen = [r.decoding_max for r in rows if r.decoding_max is not None]
    return max(seen) if seen else None


def sweep_points(rows: Sequence[SweepRow]) -> list[tuple[int, float]]:
    """The curve a knee is placed on: (conc, agg tok/s) of each whole concurrency rung."""
    return [(r.conc, r.agg_tok_s) for r in rows if r.rate is None and not r.partial]


def sweep_knee(rows: Sequence[SweepRow]) -> Knee | None:
    """The knee of a sweep's rows, beside the batch limit they show (None: too few rungs)."""
    return knee_of(sweep_points(rows), row_batch_limit(rows), "the most streams decoding at once")


def falling(points: Sequence[tuple[int, float]]) -> bool:
    """Over-saturation (module docstring): the last FALLS rungs each fell beyond FALL_PCT with
    more users than the rung before, the last below the best so far beyond FALL_FROM_BEST_PCT."""
    if len(points) < FALLS + 1:
        return False
    best = max(r for _, r in points)
    tail = points[-(FALLS + 1) :]
    for (c0, r0), (c1, r1) in zip(tail, tail[1:], strict=False):
        if c1 <= c0 or r1 >= r0 * (1.0 - FALL_PCT / 100.0):
            return False
    return tail[-1][1] < best * (1.0 - FALL_FROM_BEST_PCT / 100.0)
