"""The trend statistics of soak drift: Student's t against published t-table values (and its own
CDF against the density integrated numerically), and a regression worked by hand."""

from __future__ import annotations

import math

import pytest

from llmload.analysis.soak.drift import fit_trend, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 5, 2.571),
        (0.975, 10, 2.228),
        (0.975, 30, 2.042),
        (0.95, 10, 1.812),
        (0.995, 20, 2.845),
        (0.025, 4, -2.776),
    ],
)
def test_t_quantile_matches_the_t_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)


def test_fit_trend_matches_a_regression_worked_by_hand():
    # Sxx = 10, Sxy = 19.9 -> slope 1.99, intercept 0.05; residuals .06 -.13 .18 -.21 .10 -> SSR .107;
    # se = sqrt(.107 / 3 / 10) = .05972; 95 % CI = 1.99 +/- 3.1824 * .05972
    trend = fit_trend([1, 2, 3, 4, 5], [2.1, 3.9, 6.2, 7.8, 10.1], 0.95)
    assert trend.slope == pytest.approx(1.99)
    assert trend.intercept == pytest.approx(0.05)
    assert trend.stderr == pytest.approx(0.059722, rel=1e-4)
    assert (trend.low, trend.high) == pytest.approx((1.99 - 0.19006, 1.99 + 0.19006), rel=1e-4)
    slope, low, high = trend.relative(scale=1.0)
    assert slope == pytest.approx(100 * 1.99 / 6.02)
    with pytest.raises(ValueError):
        fit_trend([1, 2], [1, 2])


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 33])
def test_t_cdf_equals_the_integrated_density(df: int) -> None:
    """P(T <= 1.3) by the closed form and by Simpson's rule on the t density from -60 to 1.3."""
    norm = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def density(x: float) -> float:
        return norm * (1 + x * x / df) ** (-(df + 1) / 2)

    a, b, n = -60.0, 1.3, 200_000
    h = (b - a) / n
    simpson = density(a) + density(b) + sum((4 if i % 2 else 2) * density(a + i * h) for i in range(1, n))
    tail = 0.5 - t_cdf(60.0, df) + 0.5  # mass below -60
    assert t_cdf(1.3, df) == pytest.approx(simpson * h / 3 + tail, abs=2e-6)


def test_t_rejects_a_fractional_degree_of_freedom() -> None:
    with pytest.raises(ValueError):
        t_quantile(0.975, 2.5)
