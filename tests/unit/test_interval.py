"""The batch-means interval (llmload.analysis.interval) on synthetic correlated series whose mean
is known: it covers the mean about 95 % of the time, where an interval that takes the
correlated values as independent covers it far less often."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from llmload.analysis.interval import SLICES, T_975, RungSlices, batch_means, needed

STEP_S = 0.01  # one value per step of the synthetic server


def ar1(rng: random.Random, n: int, mean: float, phi: float, sd: float) -> list[float]:
    """An AR(1) series of `n` values around `mean` (correlation `phi` from one value to the next)."""
    x, out = rng.gauss(0.0, sd / math.sqrt(1 - phi * phi)), []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, sd)
        out.append(mean + x)
    return out


def rung_of(tokens: list[float], ttfts: list[float] | None = None) -> RungSlices:
    """A rung whose step i delivered tokens[i] (a request ending then, its TTFT ttfts[i])."""
    rung = RungSlices()
    for i, amount in enumerate(tokens):
        t = i * STEP_S
        rung.add(t, 0.0, 0.0, round(amount), None if ttfts is None else ttfts[i], STEP_S)
    return rung


def test_covers_the_mean_rate_of_a_correlated_series_about_95_percent():
    rng = random.Random(52)
    mean_tokens, steps, runs = 40.0, 3000, 300
    covered = naive_covered = 0
    for _ in range(runs):
        tokens = ar1(rng, steps, mean_tokens, 0.95, 2.0)
        found = rung_of(tokens).intervals(0.0, steps * STEP_S)["agg_tok_s"]
        truth = mean_tokens / STEP_S
        covered += found.low <= truth <= found.high
        rounded = np.round(tokens)  # what the rung was fed
        naive = 1.96 * rounded.std(ddof=1) / math.sqrt(steps) / STEP_S
        naive_covered += abs(rounded.mean() / STEP_S - truth) <= naive
    assert 0.90 <= covered / runs <= 0.99
    assert naive_covered / runs < 0.6  # the values as independent draws: far too narrow


def test_covers_the_median_ttft_of_a_correlated_series_about_95_percent():
    rng = random.Random(7)
    runs, covered = 300, 0
    for _ in range(runs):
        ttfts = ar1(rng, 2000, 80.0, 0.9, 3.0)  # symmetric around 80 ms: its median is 80
        found = rung_of([10.0] * 2000, ttfts).intervals(0.0, 2000 * STEP_S)["ttft_p50_ms"]
        covered += found.low <= 80.0 <= found.high
    assert 0.90 <= covered / runs <= 0.99


def test_the_rate_is_the_window_s_and_a_span_is_shared_by_the_slices_it_crosses():
    rung = RungSlices()
    for i in range(10):  # ten requests of 1 s, 100 tokens each spread evenly: slices of 1 s
        rung.add(float(i), 0.0, 1.0, 100, 5.0, 1.0)
    rung.add(0.5, 0.0, 0.0, 10, None, 1.0)  # 10 more tokens at 0.5 s: in the first slice
    found = rung.intervals(0.0, 10.0)
    assert found["agg_tok_s"].value == pytest.approx(101.0)
    slices = np.array([110.0] + [100.0] * 9)
    assert found["agg_tok_s"].pct == pytest.approx(100 * T_975 * slices.std(ddof=1) / math.sqrt(10) / 101)
    assert found["ttft_p50_ms"].value == pytest.approx(5.0)


def test_no_interval_when_a_slice_is_shorter_than_the_rung_s_median_request():
    rung = RungSlices()
    for user in range(4):  # four users of one 10-second request each: one event cut in ten
        rung.add(0.0, 0.1 * user, 10.0, 500, 100.0, 10.0)
    assert rung.intervals(0.0, 10.0) == {}


def test_half_width_is_t_times_the_standard_error_of_the_slices():
    values = np.arange(1.0, SLICES + 1.0)
    found = batch_means(values)
    assert found is not None
    assert found.value == pytest.approx(5.5)
    assert found.pct == pytest.approx(100 * T_975 * values.std(ddof=1) / math.sqrt(SLICES) / 5.5)
    assert batch_means(values[:-1]) is None  # not SLICES values: no interval


def test_no_interval_for_a_window_without_length_or_requests():
    assert RungSlices().intervals(0.0, 10.0) == {}
    rung = RungSlices()
    rung.add(5.0, 0.0, 0.0, 10, 1.0, 0.0)
    assert rung.intervals(5.0, 5.0) == {}


def test_the_width_scales_as_one_over_root_n():
    assert needed(100, 4.0, 2.0) == pytest.approx(400)
    assert needed(100, 2.0, 2.0) == pytest.approx(100)
    rng = random.Random(3)
    short = rung_of(ar1(rng, 1000, 40.0, 0.5, 4.0)).intervals(0.0, 10.0)["agg_tok_s"].pct
    long = rung_of(ar1(rng, 16000, 40.0, 0.5, 4.0)).intervals(0.0, 160.0)["agg_tok_s"].pct
    assert long == pytest.approx(short / 4, rel=0.6)  # 16x the time: about a quarter of the width
