"""The steady window (llmload.analysis.run.window) against the simulator's truth log: one rung of
8 users, 4 requests each, output lengths lognormal (mean 200, std 150, 8-1024), whose users end
apart. The row's agg tok/s is the server's own decode rate while it held 8 sequences (the truth
log's steps at batch 8: their tokens over their seconds) within 2 %, its achieved concurrency over
the window at least 7.6, the window's edges the truth's first and last step at batch 8, and the
ramp's, window's and drain's tokens add up to the rung's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.runs import held_span

from llmload.analysis.run.postprocess import load_run
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import SweepRun, run_sweep

LADDER = (
    "rungs: [8]\nrequests_per_user: 4\nwarmup_requests: 0\nseed: 5\n"
    "max_tokens: {dist: lognormal, mean: 200, std: 150, min: 8, max: 1024}\n"
)


@pytest.fixture(scope="module")
def lognormal_run(tmp_path_factory: pytest.TempPathFactory) -> SweepRun:
    run_dir = tmp_path_factory.mktemp("steady")
    config = run_dir / "ladder.yaml"
    config.write_text(LADDER)
    run = run_sweep(run_dir=run_dir, locust_args=["--ladder", str(config)], timeout=180)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run


def _steps(run: SweepRun) -> list[dict]:
    lines = (json.loads(line) for line in Path(run.truth_log).read_text().splitlines())
    return [s for s in lines if s["type"] == "step"]


def _held_by_the_server(run: SweepRun) -> tuple[float, float]:
    """From the first instant the server had 8 requests (arrived, last token not yet sent) to the
    last instant it had, by the truth log's request lines."""
    lines = (json.loads(line) for line in Path(run.truth_log).read_text().splitlines())
    held = held_span([(r["arrival"], r["last_token"]) for r in lines if r["type"] == "request"], 8)
    assert held is not None
    return held


def test_the_row_is_the_servers_rate_at_full_batch(lognormal_run):
    full = [s for s in _steps(lognormal_run) if s["batch"] == 8]
    truth_rate = sum(s["tokens"] for s in full) / sum(s["t_end"] - s["t_start"] for s in full)
    result = load_run(lognormal_run.prefix, with_metrics=True)
    (row,) = result.rows
    (metrics,) = result.metrics
    assert row.window is not None and row.window["rule"] == "steady"
    assert row.agg_tok_s == pytest.approx(truth_rate, rel=0.02)
    assert metrics.achieved_concurrency >= 7.6
    # the window's edges: where the server held 8 requests, from their arrivals to their last tokens
    start, end = _held_by_the_server(lognormal_run)
    assert row.window["start"] == pytest.approx(start, abs=0.02)
    assert row.window["end"] == pytest.approx(end, abs=0.02)
    window = row.window
    assert window["ramp_tokens"] + window["tokens"] + window["drain_tokens"] == pytest.approx(row.tokens)
    assert window["drain_s"] > 1.0 and window["drain_tokens"] > 0  # the users ended apart


def test_the_json_and_the_table_show_the_steady_figure(lognormal_run):
    result = load_run(lognormal_run.prefix)
    (row,) = json.loads(render_run(result, "json"))
    assert row["window"]["rule"] == "steady" and row["wall_s"] == pytest.approx(row["window"]["seconds"])
    assert f"{row['agg_tok_s']:.1f}" in render_run(result)
