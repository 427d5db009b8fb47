"""Percentiles and per-rung latency metrics against values computed by hand."""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fixtures.fuzzing import examples
from fixtures.paths import REPO
from fixtures.runs import make_record, run_records
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.analysis.run.metrics import itl_gaps_us, itl_is_per_chunk, itl_ms, meets_slo, tpot_ms
from llmload.analysis.run.rung_tally import (
    GapHistogram,
    summarize_array,
    tally_records,
    tally_rungs,
)
from llmload.core.stats import Summary, percentile, percentiles_of_array, pstdev, summarize, summarize_counts


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 90, 3.7),  # h = 3 * 0.9 = 2.7 -> 3 + 0.7 * (4 - 3)
        ([4, 1, 3, 2], 90, 3.7),  # unsorted input
        ([10, 7, 4, 3, 2, 1], 50, 3.5),  # numpy docs: np.percentile([[10, 7, 4], [3, 2, 1]], 50)
        ([15, 20, 35, 40, 50], 40, 29.0),  # h = 1.6 -> 20 + 0.6 * 15
        ([15, 20, 35, 40, 50], 0, 15.0),
        ([15, 20, 35, 40, 50], 100, 50.0),
        ([7.5], 99, 7.5),
    ],
)
def test_percentile_linear_interpolation(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_uses_population_std():
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9], [25, 75])
    assert (s.count, s.mean, s.median, s.std) == (8, 5.0, 4.5, 2.0)
    assert pstdev([1.0, 1.0]) == 0.0
    assert s.percentiles == {25: pytest.approx(4.0), 75: pytest.approx(5.5)}
    assert summarize([]) is None


def multi_token_request(**kw):
    """8 tokens in 4 chunks of 1, 2, 4, 1 tokens at 0.2, 0.3, 0.5, 0.6 s after t_start = 100."""
    kw.setdefault("chunk_tokens", [1, 2, 4, 1])
    return make_record(100.0, 100.6, 8, 0.2, chunks=4, chunk_times=[0.2, 0.3, 0.5, 0.6], **kw)


def test_itl_per_token_with_multi_token_chunks():
    rec = multi_token_request()
    # gaps 100 ms before the 2-token chunk, 200 ms before the 4-token one, 100 ms before the last
    assert itl_ms(rec) == pytest.approx([50, 50, 50, 50, 50, 50, 100])
    assert not itl_is_per_chunk(rec)
    assert tpot_ms(rec) == pytest.approx(400 / 7)  # (600 - 200) / (8 - 1)


def test_itl_zero_token_chunk_carries_its_gap():
    rec = make_record(0.0, 0.4, 3, 0.2, chunks=3, chunk_times=[0.2, 0.3, 0.4], chunk_tokens=[1, 0, 2])
    assert itl_ms(rec) == pytest.approx([100, 100])  # 200 ms since the last token, over 2 tokens


def test_itl_per_chunk_without_chunk_tokens():
    rec = multi_token_request(chunk_tokens=None)
    assert itl_ms(rec) == pytest.approx([100, 200, 100])
    assert itl_is_per_chunk(rec)


def test_rung_latencies_itl_pooled():
    plain = make_record(100.0, 100.5, 4, 0.2, chunk_times=[0.2, 0.3, 0.4, 0.5])
    m = tally_records(0, 2, [multi_token_request(), plain]).metrics(percentiles=[50, 90, 99])
    itl = m.latencies["itl"]
    # pooled: 50 x 6, 100 x 4 -> sorted, h(p90) = 9 * 0.9 = 8.1 -> 100
    assert itl.count == 10
    assert itl.mean == pytest.approx(70.0)
    assert itl.median == pytest.approx(50.0)  # h = 4.5 -> between the 5th and 6th 50
    assert itl.percentiles[90] == pytest.approx(100.0)
    assert m.latencies["ttft"].mean == pytest.approx(200.0)
    assert m.latencies["e2el"].percentiles[50] == pytest.approx(550.0)
    assert m.latencies["tpot"].mean == pytest.approx((400 / 7 + 100.0) / 2)
    assert not m.itl_per_chunk


def test_rung_metrics_rates_and_reconciliation():
    m = tally_rungs(run_records(), slo={"ttft_ms": 450})[1].metrics()
    wall = 3.0  # the steady window: 4 in flight (the failure too) from 1011 to 1014
    assert m.completed == 3
    # in it one request ended (1010-1014): its tokens (no chunk times: at its end) and prompt
    assert m.output_tok_s == pytest.approx(256 / wall)
    assert m.total_tok_s == pytest.approx((256 + 64) / wall)
    assert m.request_s == pytest.approx(1 / wall)
    assert m.achieved_concurrency == pytest.approx(4.0)  # each of the 4 in flight the whole window
    assert m.good_requests == 2  # TTFT 200 and 400 ms; the 600 ms one and the failure are not good
    assert m.goodput_request_s == pytest.approx(1 / wall)  # 1010-1014 (TTFT 200 ms) ended in it
    assert (m.stopped_early, m.chunks_over_tokens) == (0, 0)
    assert m.latencies["ttft"].std == pytest.approx(163.299316)  # sqrt(80000 / 3)


def test_token_reconciliation_counts():
    recs = [
        make_record(0.0, 1.0, 256, 0.1),
        make_record(0.0, 1.0, 200, 0.1, finish_reason="stop"),  # stopped early
        make_record(0.0, 1.0, 200, 0.1, finish_reason="length"),  # max_tokens honoured differently
        make_record(0.0, 1.0, 8, 0.1, max_tokens=8, chunks=10),  # more chunks than tokens
        make_record(0.0, 1.0, 10, 0.1, finish_reason="stop", outcome="timeout"),  # failed: ignored
    ]
    m = tally_records(0, 5, recs).metrics()
    assert (m.stopped_early, m.chunks_over_tokens) == (1, 1)


def test_goodput_checks_only_given_slos():
    fast = make_record(0.0, 1.0, 11, 0.1)  # TTFT 100 ms, TPOT 90 ms, E2EL 1000 ms
    one_token = make_record(0.0, 0.3, 1, 0.3)  # TPOT 0 by definition (vLLM)
    assert meets_slo(fast, {})
    assert meets_slo(fast, {"ttft_ms": 100, "tpot_ms": 90, "e2el_ms": 1000})  # limits inclusive
    assert not meets_slo(fast, {"tpot_ms": 89})
    assert meets_slo(one_token, {"tpot_ms": 1})
    with pytest.raises(ValueError, match="unknown SLO keys"):
        meets_slo(fast, {"itl_ms": 5})
    m = tally_records(0, 2, [fast, one_token], slo={"tpot_ms": 50}).metrics()
    # both in flight from 0 to 0.3 s (the steady window), in which the good one ended
    assert (m.good_requests, m.goodput_request_s) == (1, pytest.approx(1 / 0.3))


def test_missing_prompt_tokens_leave_total_throughput_unknown():
    m = tally_records(0, 1, [make_record(0.0, 1.0, 10, 0.1, prompt_tokens=None)]).metrics()
    assert m.total_tok_s is None
    assert m.latencies["itl"] is None


@given(
    st.lists(st.sampled_from([0.001, 1.5, 2.0, 3.25, 7.0, 1e6]) | st.floats(0, 1e4), min_size=1, max_size=60),
    st.lists(st.floats(0, 100), max_size=5),
)
def test_histogram_summary_equals_the_raw_values_summary(values, qs):
    """ITL is pooled as a histogram (value -> count): its percentiles are those of the raw values,
    exactly; mean and std up to rounding."""
    raw, counted = summarize(values, qs), summarize_counts(Counter(values), qs)
    assert counted.count == raw.count
    assert counted.median == raw.median and counted.percentiles == raw.percentiles
    assert counted.mean == pytest.approx(raw.mean, rel=1e-12)
    assert counted.std == pytest.approx(raw.std, rel=1e-9, abs=1e-9)


@given(
    st.lists(
        st.lists(st.integers(0, 3_000_000).map(lambda us: round(us / 1e6, 6)), max_size=8).map(sorted)
        | st.lists(st.floats(0, 5).map(lambda t: round(t, 6)), max_size=8)  # unordered: negative gaps
        | st.lists(st.sampled_from([0.5, 1e13, -1e13, 1e300, 9.2e12, 1.7e308]), max_size=4),  # huge
        max_size=12,
    ),
    st.sampled_from([1, 3, 1 << 18]),
)
def test_gap_histogram_counts_the_per_chunk_itl_gaps(requests, batch):
    """The numpy batches count exactly the gaps `itl_gaps_us` gives request by request: none
    across two requests, empty and one-chunk requests included, long and negative gaps too, and
    times whose microseconds do not fit in int64 (a hand-made file), without a numpy warning."""
    hist = GapHistogram()
    hist.BATCH = batch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for times in requests:
            hist.add(times)
        counts = hist.counts()
    expected = Counter(
        g
        for times in requests
        if all(math.isfinite(t * 1e6) for t in times)  # else no microseconds: no gaps counted
        for g in itl_gaps_us(make_record(0.0, 9.0, 1, 0.1, chunk_times=times))
    )
    assert counts == expected


FLOATS = st.floats(-1e9, 1e9, allow_nan=False) | st.sampled_from(
    [0.0, 0.1, 0.2, 0.3, 24.0, 1e-300, 3.7e8, 1.7e308, -1.7e308, math.inf, -math.inf, math.nan]
)
INTS = st.integers(-(2**63), 2**63 - 1) | st.integers(0, 300)


@settings(max_examples=examples(500), deadline=None, derandomize=True, database=None)
@given(
    st.lists(FLOATS, max_size=80) | st.lists(INTS, max_size=80),
    st.lists(st.floats(0, 100) | st.sampled_from([0.0, 50.0, 99.9, 100.0]), max_size=6),
)
def test_numpy_summary_is_the_summary_bit_for_bit(values, qs):
    """`summarize_array` (np.partition, fsum of the same values and of pow's squares) gives the
    very figures `summarize` gives: equal floats, not approximately equal ones."""
    ints = bool(values) and all(type(v) is int for v in values)
    array = np.array(values, dtype=np.int64 if ints else np.float64)
    before = values if ints else np.sort(array).tolist()  # what the tally gave summarize: numpy-sorted floats
    assert outcome(summarize_array, array, qs) == outcome(summarize, before, qs)


def outcome(summary: Callable[..., Summary | None], *args: Any) -> Any:
    """The summary, or the error it raises (fsum of inf and -inf, Python's `**` on a huge
    square), with nan made comparable."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns where Python does not: a difference
        try:
            found = summary(*args)
        except OverflowError:  # its message depends on the order fsum meets the huge values in
            return "OverflowError"
        except ValueError as e:
            return repr(e)
    return repr(found)


def test_numpy_summary_rejects_what_summarize_rejects():
    with pytest.raises(ValueError, match="outside"):
        summarize([1.0, 2.0], [101.0])
    with pytest.raises(ValueError, match="outside"):
        summarize_array(np.array([1.0, 2.0]), [101.0])


def test_input_token_summary_of_ints_beyond_int64():
    values = [2**70, 1, 128]  # the input lengths are a histogram (reconcile.LengthTally)
    assert summarize_counts(Counter(values), [90.0]) == summarize(values, [90.0])


@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60),
    st.lists(
        st.floats(0, 100) | st.sampled_from([0.0, 10.0, 50.0, 90.0, 99.0, 100.0]), min_size=1, max_size=6
    ),
)
def test_the_one_percentile_is_numpys_linear_in_each_of_its_forms(values, qs):
    """llmload's one percentile (docs/metrics.md) of a list, an array and a histogram against
    numpy's `np.percentile` (method "linear", vLLM bench serve's): the reference, not our code."""
    counted = summarize_counts(Counter(values), qs)
    array = percentiles_of_array(np.array(values), qs)
    for q in qs:
        truth = float(np.percentile(values, q))
        assert percentile(values, q) == pytest.approx(truth, rel=1e-12, abs=1e-9)
        assert array[q] == pytest.approx(truth, rel=1e-12, abs=1e-9)
        assert counted is not None and counted.percentiles[q] == pytest.approx(truth, rel=1e-12, abs=1e-9)


def test_no_module_computes_a_percentile_of_its_own():
    """One percentile, one home: numpy's percentile, quantile and partition, the statistics
    module's quantiles and a rank read off a sorted list appear in llmload.core.stats alone."""
    own = re.compile(
        r"np\.(percentile|quantile|nanpercentile|partition)\(|statistics\.quantiles|\[len\(\w+\) // \d+\]"
    )
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "llmload").rglob("*.py"))
        if path != REPO / "llmload/core/stats.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if own.search(line)
    ]
    assert found == []
