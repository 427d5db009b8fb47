"""The analyses on a run of mixed output lengths (uniform(8, 40) max_tokens, small simulator runs):
the sweep table's and metrics' figures follow their definitions request by request (TPOT per
request = (E2EL - TTFT) / (output tokens - 1), averaged; agg tok/s = every real token over the
wall time; goodput the requests meeting the SLOs), checked against the simulator's truth log;
and the capacity search, `llmload budget` and `llmload compare` give well-defined figures (no
crash, no NaN) on such runs."""

from __future__ import annotations

import math

import pytest
from fixtures.runs import held_span

from llmload.analysis.budget import CostModel, budget_rows, load_points
from llmload.analysis.compare import IMPROVED, NOISE, REGRESSED, compare_runs
from llmload.analysis.run.metrics import tpot_ms
from llmload.analysis.run.postprocess import load_run
from llmload.cli import budget, capacity, compare
from llmload.core.files.records import read_records
from llmload.core.stats import mean
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

MIXED = "max_tokens: {dist: uniform, min: 8, max: 40}\nseed: 5\n"
LADDER = "rungs: [1, 4]\nrequests_per_user: 6\nwarmup_requests: 0\nslo: {tpot_ms: 30}\n" + MIXED
SIM = {"base_ms": 10, "per_seq_ms": 4, "accept_len": 1, "max_draft": 0}


def finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


@pytest.fixture(scope="module")
def mixed_runs(tmp_path_factory):
    """The same mixed-length configuration twice."""
    runs = []
    for name in ("base", "same"):
        tmp = tmp_path_factory.mktemp(name)
        (tmp / "ladder.yaml").write_text(LADDER)
        run = run_sweep(
            run_dir=tmp / "run",
            locust_args=["--ladder", str(tmp / "ladder.yaml"), "--scrape-interval", "0"],
            sim=SIM,
            timeout=180,
        )
        assert run.returncode == 0, run.log.read_text()[-3000:]
        runs.append(run)
    return runs


def _arrived_between(rec, start: float, end: float) -> float:
    """A request's tokens that arrived from `start` to `end`: its first chunk's share at its time,
    each later chunk's spread over the gap since the one before (docs/window.md)."""
    times = [rec.t_start + at for at in rec.chunk_times]
    share = rec.output_tokens / len(times)
    total = share if start < times[0] <= end else 0.0
    for before, at in zip(times, times[1:], strict=False):
        total += share * max(0.0, min(at, end) - max(before, start)) / (at - before)
    return total


def test_the_figures_follow_their_definitions_request_by_request(mixed_runs):
    run = mixed_runs[0]
    records, _ = read_records(run.records)
    truth, _ = load_truth(run.truth_log)
    assert len({r.max_tokens for r in records}) > 5  # the lengths really are mixed
    result = load_run(run.prefix, with_metrics=True, slo={"tpot_ms": 30})
    for row, m in zip(result.rows, result.metrics, strict=True):
        rung = [r for r in records if r.rung == row.rung]
        assert row.tokens == sum(truth[r.request_id]["completion_tokens"] for r in rung)
        # the steady window (docs/window.md): its tokens by the chunks' times (each chunk a share of
        # its request's tokens, spread over the gap since the previous chunk), per request the
        # ones that overlap it
        held = held_span([(r.t_start, r.t_end) for r in rung], math.ceil(0.95 * row.conc))
        assert held is not None and (row.window["start"], row.window["end"]) == held
        start, end = held
        inside = sum(_arrived_between(r, start, end) for r in rung)
        assert row.agg_tok_s * (end - start) == pytest.approx(inside, rel=1e-3)  # to the millisecond
        overlapping = [r for r in rung if r.t_start < end and r.t_end > start]
        assert row.per_req_tok_s == pytest.approx(mean([r.output_tokens / r.e2e_s for r in overlapping]))
        tpots = [tpot_ms(r) for r in overlapping]
        assert m.latencies["tpot"].mean == pytest.approx(mean(tpots))  # each request's own, averaged
        served = [truth[r.request_id] for r in overlapping]
        truth_ms = [1000 * (t["last_token"] - t["first_token"]) / (t["tokens_sent"] - 1) for t in served]
        assert m.latencies["tpot"].mean == pytest.approx(mean(truth_ms), abs=1.0)
        assert m.latencies["itl"].count == sum(r.output_tokens - 1 for r in rung)  # every gap, pooled
        assert m.good_requests == sum(v <= 30 for v in map(tpot_ms, rung))  # of the whole rung
        assert finite(m.output_tok_s, m.total_tok_s, m.goodput_request_s, m.achieved_concurrency)
        assert all(s is None or finite(s.mean, s.std, *s.percentiles.values()) for s in m.latencies.values())
        assert row.output_tokens["off"] == 0


def test_compare_gives_finite_figures_on_mixed_lengths(mixed_runs, capsys):
    base, same = (load_run(r.prefix, keep_records=True) for r in mixed_runs)
    # the same seed and distribution: the same requests, so the two runs compare like for like
    for a, b in zip(base.record_rungs(), same.record_rungs(), strict=True):
        assert sorted(r.max_tokens for r in a.records) == sorted(r.max_tokens for r in b.records)
    cmp = compare_runs(base, same, resamples=200)
    assert [r.conc for r in cmp.rungs] == [1, 4]
    for rung in cmp.rungs:
        assert rung.verdict in (IMPROVED, REGRESSED, NOISE)
        for change in rung.changes:
            if change.figure == "ttft_p50_ms":
                continue  # judged only with repeated rungs (analysis.compare)
            assert finite(change.base, change.cand, change.change, change.low, change.high), change
    assert compare.main([str(r.prefix) for r in mixed_runs] + ["--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower() and "rung02" in out


def test_budget_gives_finite_figures_on_mixed_lengths(mixed_runs, capsys):
    points = load_points(mixed_runs[0].prefix)
    rows = budget_rows(points, CostModel(constant_ms=1.0), accept_len=1.0, speedup=2.0)
    assert [r.conc for r in rows] == [1, 4]
    for r in rows:
        assert finite(r.agg_tok_s, r.step_ms, r.share, r.gain_speedup, r.gain_free) and r.step_ms > 0
    code = budget.main(
        [str(mixed_runs[0].prefix), "--accept-len", "1", "--component-ms", "1", "--speedup", "2"]
    )
    assert code == 0
    assert "nan" not in capsys.readouterr().out.lower()


def test_the_capacity_search_on_mixed_lengths(tmp_path, capsys):
    ladder = tmp_path / "capacity.yaml"
    ladder.write_text(
        "mode: capacity\nslo: {tpot_ms: 36}\ncapacity: {percentile: 50, requests: 8, max_requests: 32, "
        "max_users: 16}\n" + MIXED
    )
    run = run_sweep(
        run_dir=tmp_path / "run",
        locust_args=["--ladder", str(ladder), "--scrape-interval", "0"],
        sim=SIM,
        timeout=300,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    assert len({r.max_tokens for r in records}) > 5
    result = capacity.capacity_of_run(run.prefix)
    assert result.complete and 1 <= result.capacity <= 16
    for probe in result.probes:
        for c in probe.criteria:
            assert finite(c.point, c.lower, c.upper), (probe.load, c)
    assert capacity.main(["--prefix", str(run.prefix)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("capacity: ") and "nan" not in out.lower()
