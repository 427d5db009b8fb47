"""Drawn lengths against the real llama.cpp server (SmolLM2-135M): normal(128, 32) inputs and
uniform(8, 32) outputs over 200 requests. Every request's `usage` is its own drawn lengths
(input within a token, output exact), the sent mix is the asked one (mean within 2 %, a
Kolmogorov-Smirnov test does not reject at 1 %), and the rung's length summaries say so."""

from __future__ import annotations

import math
import statistics

import pytest
from fixtures.length_stats import KS_1PCT, ks_statistic, truncated_normal_cdf, uniform_cdf
from fixtures.real_runs import sweep_ladder

from llmload.analysis.run.postprocess import load_run
from llmload.core.config import parse_config
from llmload.core.files.records import read_records
from llmload.core.workload.lengths import Lengths

pytestmark = pytest.mark.real

REQUESTS = 200
INPUTS = {"dist": "normal", "mean": 128, "std": 32, "min": 16, "max": 512}
# outputs: every decoded token is real time on a one-thread server (uniform(16, 64) took 163 s); the
# checks are of shape and exactness, scale-free, so half the lengths test the same in half the time
OUTPUTS = {"dist": "uniform", "min": 8, "max": 32}
OUT_MEAN, OUT_SD = (8 + 32) / 2, (32 - 8) / math.sqrt(12)


def test_each_request_is_served_its_drawn_lengths(llama_server, tmp_path):
    ladder = (
        "rungs: [4]\nrequests_per_user: 50\nwarmup_requests: 0\nseed: 5\n"
        f"prompt_tokens: {INPUTS}\nmax_tokens: {OUTPUTS}\n".replace("'", "")
    )
    run = sweep_ladder(llama_server.url, tmp_path / "run", ladder, timeout=600)
    records, _ = read_records(run.records)
    assert len(records) == REQUESTS and all(r.ok for r in records), [r.error for r in records if not r.ok]
    asked = parse_config({"prompt_tokens": INPUTS, "max_tokens": OUTPUTS, "seed": 5}, "t")
    assert isinstance(asked.prompt_tokens, Lengths) and isinstance(asked.max_tokens, Lengths)
    expected = sorted(
        (asked.prompt_tokens.length(5, "input", i), asked.max_tokens.length(5, "output", i))
        for i in range(REQUESTS)
    )
    assert sorted((r.prompt_tokens_asked, r.max_tokens) for r in records) == expected
    off = [
        (r.prompt_tokens, r.prompt_tokens_asked)
        for r in records
        if abs(r.prompt_tokens - r.prompt_tokens_asked) > 1
    ]
    assert not off, off
    assert all(r.output_tokens == r.max_tokens and not r.tokens_estimated for r in records)
    sent_in = [r.prompt_tokens for r in records]
    sent_out = [r.output_tokens for r in records]
    # sent against asked: within 2 % (each request is exact, so this holds with room); the asked
    # sample against its distribution: within 3 standard errors (200 draws of uniform(8, 32) have
    # a mean whose standard error is 2.4 % of 20, so 2 % would reject a fair sample)
    asked_in = [r.prompt_tokens_asked for r in records]
    asked_out = [r.max_tokens for r in records]
    assert abs(sum(sent_in) - sum(asked_in)) / sum(asked_in) < 0.02
    assert abs(sum(sent_out) - sum(asked_out)) / sum(asked_out) < 0.02
    assert abs(statistics.fmean(asked_in) - 128) < 3 * 32 / math.sqrt(REQUESTS)
    assert abs(statistics.fmean(asked_out) - OUT_MEAN) < 3 * OUT_SD / math.sqrt(REQUESTS)
    assert math.sqrt(REQUESTS) * ks_statistic(sent_in, truncated_normal_cdf(128, 32, 16, 512)) < KS_1PCT
    assert math.sqrt(REQUESTS) * ks_statistic(sent_out, uniform_cdf(8, 32)) < KS_1PCT
    # the rung's summaries (table note, JSON) say the same: none off its ask, outputs by usage
    (row,) = load_run(run.prefix).rows
    assert row.output_tokens["off"] == 0 and row.output_tokens["client_counted"] == 0
    assert row.output_tokens["mean"] == pytest.approx(statistics.fmean(sent_out))
    assert row.input_tokens["off"] == 0
