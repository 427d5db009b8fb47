"""Token reconciliation: a server that ignores `ignore_eos` is detected, reported per rung and
fails the run, checked against the simulator's truth (which requests it stopped early)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.reconcile import issues, tally
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core.files.records import read_records
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

MAX_TOKENS = 600  # above the simulator's longest natural answer (511): every request stops early


def ok(**kw):
    rec = {"outcome": "ok", "output_tokens": 8, "max_tokens": 8, "chunks": 8, "finish_reason": "length"}
    return rec | kw


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        (ok(), []),
        (ok(output_tokens=5, chunks=5, finish_reason="stop"), ["stopped_early"]),
        (ok(output_tokens=9, chunks=9), ["over_max_tokens"]),
        (ok(output_tokens=5, chunks=5), ["length_short"]),
        (ok(output_tokens=6), ["length_short", "chunks_over_tokens"]),
        (ok(tokens_estimated=True), ["no_usage"]),
        (ok(outcome="drop", output_tokens=2, chunks=2), []),
    ],
)
def test_issues(rec, expected):
    assert issues(rec) == expected


def test_no_usage_is_shown_but_is_not_a_disagreement():
    t = tally([ok(tokens_estimated=True), ok(output_tokens=9, chunks=9), ok()])
    assert (t.completed, t.disagree, t.kinds) == (3, 1, {"no_usage": 1, "over_max_tokens": 1})


def eos_run(tmp: Path, extra: str = "") -> SweepRun:
    config = tmp / "eos.yaml"
    config.write_text(
        f"rungs: [1, 2]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: {MAX_TOKENS}\n{extra}"
    )
    return run_sweep(
        run_dir=tmp,
        locust_args=["--ladder", str(config)],
        sim={"ignore_eos_unsupported": True, "accept_len": 4, "base_ms": 1, "per_seq_ms": 0.1},
        timeout=120,
    )


def truth_stopped_by_rung(run: SweepRun) -> dict[int, int]:
    truth, _ = load_truth(run.truth_log)
    records, _ = read_records(run.records)
    out: dict[int, int] = {}
    for rec in records:
        t = truth[rec.request_id]
        out[rec.rung] = out.get(rec.rung, 0) + (
            t["finish_reason"] == "stop" and t["completion_tokens"] < MAX_TOKENS
        )
    return out


def test_ignored_ignore_eos_fails_the_run(tmp_path):
    run = eos_run(tmp_path)
    log = run.log.read_text()
    assert run.returncode == 3, log[-3000:]
    assert truth_stopped_by_rung(run) == {0: 2, 1: 4}
    assert "rung01 c1: 2 of 2 requests stopped before max_tokens although ignore_eos was sent" in log
    assert "rung02 c2: 4 of 4 requests stopped before max_tokens" in log
    records, _ = read_records(run.records)
    assert [r.metrics().stopped_early for r in tally_rungs(records)] == [2, 4]


def test_threshold_lets_a_run_pass_and_still_reports(tmp_path):
    run = eos_run(tmp_path, "reconcile: {max_stopped_early_ratio: 1.0}\n")
    assert run.returncode == 0, run.log.read_text()[-3000:]
    assert "token reconciliation failed" not in run.log.read_text()
    records, _ = read_records(run.records)
    assert [r.metrics().stopped_early for r in tally_rungs(records)] == list(
        truth_stopped_by_rung(run).values()
    )


def test_drawn_outputs_off_their_ask_are_the_ones_the_check_fails(tmp_path):
    """Drawn max_tokens on a server that ignores ignore_eos: the requests whose draw is above the
    simulator's natural answer stop early. The rung's output summary counts as `off` exactly the
    requests the truth log says stopped short of their own draw, and the failure message names the
    same number: the summary and the check that fails the run agree."""
    config = tmp_path / "drawn.yaml"
    config.write_text(
        "rungs: [2]\nrequests_per_user: 8\nwarmup_requests: 0\nseed: 4\n"
        "max_tokens: {dist: uniform, min: 16, max: 600}\n"
    )
    run = run_sweep(
        run_dir=tmp_path,
        locust_args=["--ladder", str(config)],
        sim={"ignore_eos_unsupported": True, "accept_len": 4, "base_ms": 1, "per_seq_ms": 0.1},
        timeout=120,
    )
    log = run.log.read_text()
    assert run.returncode == 3, log[-3000:]
    truth, _ = load_truth(run.truth_log)
    records, _ = read_records(run.records)
    short = sum(truth[r.request_id]["completion_tokens"] < r.max_tokens for r in records)
    assert 0 < short < len(records) == 16  # some draws are below the natural answer, some above
    (row,) = load_run(run.prefix).rows
    assert row.output_tokens["off"] == short
    assert row.output_tokens["mean"] == sum(truth[r.request_id]["completion_tokens"] for r in records) / 16
    assert f"rung01 c2: {short} of 16 requests stopped before max_tokens although ignore_eos was sent" in log
    assert f"({short} off their ask)" in render_run(load_run(run.prefix))
