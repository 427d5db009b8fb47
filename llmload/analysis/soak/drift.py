"""A straight-line trend with a confidence interval, in pure Python (scipy is not a dependency).

`fit_trend(xs, ys)` is ordinary least squares: slope b = Sxy / Sxx, standard error
se = sqrt(SSR / (n - 2) / Sxx) (SSR: sum of squared residuals), and the two-sided interval
b +/- t(1 - (1 - confidence) / 2, n - 2) * se. `Trend.relative(scale)` expresses the slope and
its interval as per cent of the series mean per `scale` units of x (for example per hour).

Student's t with an integer number of degrees of freedom k (a regression on n points has
k = n - 2) has a closed-form distribution. With theta = atan(t / sqrt(k)), the probability
A = P(|T| <= t) of a central interval is a finite sum of powers of c = cos(theta):

- k even: A = sin(theta) * sum_{j=0}^{k/2-1} u_j,  u_0 = 1,  u_j = u_{j-1} * (2j - 1) / (2j) * c^2;
- k odd:  A = (2 / pi) * (theta + sin(theta) * c * sum_{j=0}^{(k-3)/2} v_j),
          v_0 = 1,  v_j = v_{j-1} * (2j) / (2j + 1) * c^2  (the sum is empty for k = 1).

Both follow from integrating the t density (1 + x^2/k)^(-(k+1)/2) after substituting
x = sqrt(k) tan(phi), which turns it into a power of cos(phi), and integrating that power by
parts down to cos^0 or cos^1. The quantile inverts the CDF by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _central_probability(t: float, df: int) -> float:
    """P(-|t| <= T <= |t|) for Student's t with `df` (integer >= 1) degrees of freedom."""
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= (2 * j - 1) / (2 * j) * cos2
            total += term
        return sin * total
    term, total = 1.0, 0.0
    for j in range((df - 1) // 2):
        if j:
            term *= (2 * j) / (2 * j + 1) * cos2
        total += term
    return 2.0 / math.pi * (theta + sin * math.cos(theta) * total)


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` (integer >= 1) degrees of freedom."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be an integer >= 1, got {df}")
    half = _central_probability(t, int(df)) / 2.0
    return 0.5 + half if t >= 0 else 0.5 - half


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on `t_cdf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be an integer >= 1, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True, slots=True)
class Trend:
    """Least-squares line y = intercept + slope * x with the slope's confidence interval."""

    n: int
    slope: float
    intercept: float
    stderr: float  # standard error of the slope
    confidence: float
    low: float  # slope's interval
    high: float
    y_mean: float

    def relative(self, scale: float = 1.0) -> tuple[float, float, float] | None:
        """(slope, low, high) as per cent of the mean of y per `scale` units of x; None if the mean is 0."""
        if self.y_mean == 0:
            return None
        k = 100.0 * scale / self.y_mean
        return self.slope * k, self.low * k, self.high * k


def fit_trend(xs: Sequence[float], ys: Sequence[float], confidence: float = 0.95) -> Trend:
    """Ordinary least squares of ys on xs with a two-sided `confidence` interval on the slope."""
    n = len(xs)
    if n != len(ys):
        raise ValueError("xs and ys differ in length")
    if n < 3:
        raise ValueError(f"a trend with a confidence interval needs at least 3 points, got {n}")
    x_mean = math.fsum(xs) / n
    y_mean = math.fsum(ys) / n
    sxx = math.fsum((x - x_mean) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x values are equal")
    sxy = math.fsum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = y_mean - slope * x_mean
    ssr = math.fsum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    stderr = math.sqrt(ssr / (n - 2) / sxx)
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 2) * stderr
    return Trend(n, slope, intercept, stderr, confidence, slope - half, slope + half, y_mean)
