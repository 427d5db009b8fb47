"""A straight-line trend with a confidence interval, in pure Python (scipy is not a dependency).

`fit_trend(xs, ys)` is ordinary least squares: slope b = Sxy / Sxx, standard error
se = sqrt(SSR / (n - 2) / Sxx) (SSR: sum of squared residuals), and the two-sided interval
b +/- t(1 - (1 - confidence) / 2, n - 2) * se, with Student's t quantile computed here from the
regularized incomplete beta function (continued fraction, Numerical Recipes 3rd ed. section 6.4)
and inverted by bisection. `Trend.relative(scale)` expresses the slope and its interval as per cent
of the series mean per `scale` units of x (for example per hour).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_EPS = 1e-15
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's evaluation of the continued fraction of I_x(a, b) (Numerical Recipes `betacf`)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on `t_cdf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
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
