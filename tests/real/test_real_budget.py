"""`llmload budget`'s step on the real llama.cpp server (SmolLM2-135M, CPU): at conc 1 the
measured step is the median gap between the stream's consecutive chunks (one token a chunk, one
chunk a step), within 10 %: the ground truth is the records' own chunk times, read here without
the code under test."""

from __future__ import annotations

from statistics import median

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.analysis.budget import CostModel, budget_rows, load_points
from llmload.analysis.run.postprocess import load_run

pytestmark = pytest.mark.real


def test_budget_step_is_the_median_chunk_gap_at_conc_1(llama_server, tmp_path):
    run = sweep_ladder(
        llama_server.url,
        tmp_path / "run",
        "rungs: [1]\nmax_tokens: 32\nprompt_tokens: 32\nrequests_per_user: 3\n",
    )
    gaps = [
        (b - a) * 1000.0
        for rec in load_run(run.prefix).iter_records()
        if rec.ok and rec.phase != "warmup"
        for a, b in zip(rec.chunk_times, rec.chunk_times[1:], strict=False)
    ]
    (row,) = budget_rows(load_points(str(run.prefix)), CostModel("c", constant_ms=0.1), None, None)
    print(f"\nc1: budget's step {row.step_ms:.2f} ms, median chunk gap {median(gaps):.2f} ms")
    assert row.measured and row.batch == 1
    assert row.step_ms == pytest.approx(median(gaps), rel=0.10)
