"""The batch-means interval (llmload.analysis.interval) on synthetic correlated series whose mean
is known: it covers the mean about 95 % of the time, where an interval that takes the
correlated values as independent covers it far less often; `compare` and the twin taking a
change's interval from the rungs' own, and the decision's count of the requests that would have
decided a "cannot tell"."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from fixtures.runs import make_record

from llmload.analysis import compare
from llmload.analysis.interval import SLICES, Interval, RungSlices, needed
from llmload.analysis.run.sweep_rows import Rung, SweepRow
from llmload.analysis.run.window import TokenTimeline
from llmload.analysis.twin.decision import UNDECIDED, Decision, RungDecision, decide, more_requests
from llmload.analysis.twin.replay import bootstrap_spreads

STEP_S = 0.01  # one value per step of the synthetic server


def ar1(rng: random.Random, n: int, mean: float, phi: float, sd: float) -> list[float]:
    """An AR(1) series of `n` values around `mean` (correlation `phi` from one value to the next)."""
    x, out = rng.gauss(0.0, sd / math.sqrt(1 - phi * phi)), []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, sd)
        out.append(mean + x)
    return out


def rung_of(tokens: list[float], ttfts: list[float] | None = None) -> tuple[RungSlices, TokenTimeline]:
    """A rung whose step i delivered tokens[i] (a request of one chunk then, its TTFT ttfts[i])."""
    rung, timeline = RungSlices(), TokenTimeline()
    for i, amount in enumerate(tokens):
        t = i * STEP_S + STEP_S / 2
        timeline.add(make_record(t - STEP_S / 4, t, round(amount), STEP_S / 4, chunk_times=[STEP_S / 4]))
        rung.add(t, None if ttfts is None else ttfts[i], STEP_S)
    return rung, timeline


def intervals_of(tokens: list[float], ttfts: list[float] | None, end: float) -> dict[str, Interval]:
    rung, timeline = rung_of(tokens, ttfts)
    return rung.intervals(0.0, end, timeline)


def test_covers_the_mean_rate_of_a_correlated_series_about_95_percent():
    rng = random.Random(52)
    mean_tokens, steps, runs = 40.0, 3000, 150
    covered = naive_covered = 0
    for _ in range(runs):
        tokens = ar1(rng, steps, mean_tokens, 0.95, 2.0)
        found = intervals_of(tokens, None, steps * STEP_S)["agg_tok_s"]
        truth = mean_tokens / STEP_S
        covered += found.low <= truth <= found.high
        rounded = np.round(tokens)  # what the rung was fed
        naive = 1.96 * rounded.std(ddof=1) / math.sqrt(steps) / STEP_S
        naive_covered += abs(rounded.mean() / STEP_S - truth) <= naive
    assert 0.90 <= covered / runs <= 0.99
    assert naive_covered / runs < 0.6  # the values as independent draws: far too narrow


def test_covers_the_median_ttft_of_a_correlated_series_about_95_percent():
    rng = random.Random(7)
    runs, covered = 150, 0
    for _ in range(runs):
        ttfts = ar1(rng, 2000, 80.0, 0.9, 3.0)  # symmetric around 80 ms: its median is 80
        found = intervals_of([10.0] * 2000, ttfts, 2000 * STEP_S)["ttft_p50_ms"]
        covered += found.low <= 80.0 <= found.high
    assert 0.90 <= covered / runs <= 0.99


def test_the_rate_is_the_window_s_from_the_rung_s_token_timeline():
    rung, timeline = RungSlices(), TokenTimeline()
    for i in range(10):  # ten 1-second requests, 100 tokens each in ten chunks: 100 tok/s
        rec = make_record(float(i), i + 1.0, 100, 0.05, chunk_times=[0.05 + 0.1 * k for k in range(10)])
        timeline.add(rec)
        rung.add(i + 0.05, 50.0, 1.0)
    found = rung.intervals(0.0, 10.0, timeline)
    assert found["agg_tok_s"].value == pytest.approx(timeline.between(0.0, 10.0) / 10.0)
    assert found["agg_tok_s"].pct < 1.0  # every slice about 100 tok/s
    assert found["ttft_p50_ms"].value == pytest.approx(50.0)


def test_no_interval_when_a_slice_is_shorter_than_the_rung_s_median_request():
    rung, timeline = RungSlices(), TokenTimeline()
    for user in range(4):  # four users of one 10-second request each: one event cut in ten
        timeline.add(make_record(0.0, 10.0, 500, 0.1 * user, chunk_times=[0.1 * user, 10.0]))
        rung.add(0.1 * user, 100.0, 10.0)
    assert rung.intervals(0.0, 10.0, timeline) == {}


def test_no_interval_for_a_window_without_length_or_requests():
    assert RungSlices().intervals(0.0, 10.0, TokenTimeline()) == {}
    rung = RungSlices()
    rung.add(5.0, 1.0, 0.0)
    assert rung.intervals(5.0, 5.0, TokenTimeline()) == {}


def test_the_width_scales_as_one_over_root_n():
    assert needed(100, 4.0, 2.0) == pytest.approx(400)
    assert needed(100, 2.0, 2.0) == pytest.approx(100)
    rng = random.Random(3)
    short = intervals_of(ar1(rng, 1000, 40.0, 0.5, 4.0), None, 10.0)["agg_tok_s"].pct
    long = intervals_of(ar1(rng, 16000, 40.0, 0.5, 4.0), None, 160.0)["agg_tok_s"].pct
    assert long == pytest.approx(short / 4, rel=0.6)  # 16x the time: about a quarter of the width


def _held(agg: float, pct: float | None) -> tuple[Rung, SweepRow]:
    """A rung of 20 requests whose sweep row says `agg` tok/s +- `pct` % (None: no interval)."""
    records = [make_record(1000.0 + i, 1001.0 + i, 100, 0.1) for i in range(20)]
    interval = None if pct is None else {"slices": SLICES, "agg_tok_s_pct": pct}
    row = SweepRow(0, 4, agg, 100.0, 2000, 20.0, 100.0, 20, 0, interval=interval)
    return Rung(0, 4, records), row


@pytest.mark.parametrize(("pct", "verdict"), [(1.0, compare.IMPROVED), (3.0, compare.NOISE)])
def test_compare_takes_the_change_s_interval_from_the_two_rungs_intervals(pct, verdict):
    """+3 % between two rungs known to +-1 %: the change's interval is +3 % +- 1.41 %, all of it
    above 0 (improved); known to +-3 % (+-4.2 %), it holds 0 (within noise)."""
    fig = compare.FIGURES[0]
    change = compare.compare_rung(
        fig,
        _held(100.0, pct),
        _held(103.0, pct),
        repeat_sd=0.0,
        rng=random.Random(0),
        resamples=10,
        confidence=0.95,
        threshold=0.01,
    )
    half = math.hypot(math.log1p(pct / 100), math.log1p(pct / 100))
    assert change.low == pytest.approx(math.expm1(math.log(1.03) - half))
    assert change.high == pytest.approx(math.expm1(math.log(1.03) + half))
    assert change.verdict == verdict


def test_a_cannot_tell_says_how_many_more_requests_would_decide_it():
    """A predicted +6 % [+2 %, +10 %] over 100 requests against a 5 % threshold: the interval must
    shrink to +-1 % on its low side, 4x narrower, so 16x the requests: 1500 more (1 / sqrt(n))."""
    rung = RungDecision(8, 10.0, 1.0, 0.5, gain=0.06, low=0.02, high=0.10, requests=100)
    assert more_requests(rung, 0.05) == 1500
    decision = decide([rung], 0.05)
    assert decision.verdict == UNDECIDED
    assert (
        "about 1500 more requests per rung would decide it (the width scales as 1/sqrt(n))" in decision.line
    )
    assert Decision.from_dict(decision.as_dict()).rungs[0].requests == 100
    at_threshold = RungDecision(8, 10.0, 1.0, 0.5, gain=0.05, low=0.02, high=0.08, requests=100)
    assert more_requests(at_threshold, 0.05) is None  # no count of requests moves it off


def test_the_twin_s_spread_of_a_held_rung_is_two_runs_of_its_interval():
    records = [make_record(1000.0 + i, 1001.0 + i, 100, 0.1) for i in range(20)]
    spreads = bootstrap_spreads([Rung(0, 4, records)], resamples=20, intervals={0: {"agg_tok_s_pct": 2.0}})
    half = math.hypot(math.log1p(0.02), math.log1p(0.02))
    assert spreads[0]["agg_tok_s"] == pytest.approx((-half, half))
    assert spreads[0]["per_req_tok_s"] != (-half, half)  # no interval of its own: the bootstrap's
