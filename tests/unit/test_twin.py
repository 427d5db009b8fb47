"""The twin's fit and verdict on records made by a small engine of known steps (a step function
of batch and time, the simulator's acceptance draws), and its arithmetic (llmload.analysis.twin.replay,
llmload.analysis.twin.fit). The end-to-end tests (tests/e2e/test_twin_e2e.py) run the real simulator."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from statistics import median

import pytest

from llmload.analysis.budget import CostModel
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.twin.fit import TwinFitError, TwinParams, expected_steps, fit_accept_len, fit_twin
from llmload.analysis.twin.replay import (
    Change,
    RungFigures,
    apply_change,
    judge,
    median_reach_ms,
    prediction_rows,
    replay_rows,
    run_figures,
    ttft_tolerance_ms,
)
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, WRITE_FAILED
from llmload.core.files.records import RequestRecord
from llmload.runner.twin_replays import SWEEP_LOG, ReplayEnded, replayed


def engine_records(
    rungs: list[int],
    step_ms: Callable[[int, float], float],
    *,
    tokens: int = 64,
    accept_len: float = 1.0,
    prompt_tokens: int = 100,
    prefill_ms_per_token: float = 0.0,
    limit: int = 1000,
    seed: int = 1,
) -> list[RequestRecord]:
    """What the simulator's engine gives a ladder of `rungs` (all users of a rung send at once,
    one request each): steps of `step_ms(batch, seconds since start)` plus the prefill of what
    they admit, k = 1 + Binomial(7, p) tokens a step, at most `limit` running."""
    rng = random.Random(seed)
    p = (accept_len - 1) / 7
    out: list[RequestRecord] = []
    now = 1000.0
    for index, users in enumerate(rungs):
        waiting = list(range(users))
        running: dict[int, int] = {}  # user -> tokens so far
        chunks: dict[int, list[float]] = {u: [] for u in waiting}
        sent = now
        while waiting or running:
            admitted = []
            while waiting and len(running) < limit:
                u = waiting.pop(0)
                running[u] = 0
                admitted.append(u)
            now += (
                step_ms(len(running), now - 1000.0) + prefill_ms_per_token * prompt_tokens * len(admitted)
            ) / 1000
            for u in list(running):
                k = min(1 + sum(rng.random() < p for _ in range(7)), tokens - running[u])
                running[u] += k
                chunks[u].append(now)
                if running[u] >= tokens:
                    del running[u]
        for u, times in chunks.items():
            out.append(
                RequestRecord(
                    request_id=f"{index}-{u}",
                    rung=index,
                    users=users,
                    phase="measure",
                    endpoint="completions",
                    stream=True,
                    max_tokens=tokens,
                    t_start=sent,
                    t_end=times[-1],
                    t_first=times[0],
                    prompt_tokens=prompt_tokens,
                    output_tokens=tokens,
                    chunks=len(times),
                    chunk_times=[t - sent for t in times],
                )
            )
        now += 1.0
    return out


def linear(base: float, per_seq: float) -> Callable[[int, float], float]:
    return lambda batch, _t: base + per_seq * batch


def test_a_linear_engine_is_fitted_exactly_and_fits():
    fit = fit_twin(engine_records([1, 2, 4, 8], linear(10, 3), prefill_ms_per_token=0.05, limit=1000))
    p = fit.params
    assert (p.base_ms, p.per_seq_ms) == (pytest.approx(10), pytest.approx(3))
    assert p.accept_len == 1.0 and p.max_num_seqs is None
    assert fit.fits, fit.problems


def test_the_prefill_of_requests_joining_a_running_batch_is_recovered():
    # the batch limit makes requests join a running batch (when one of unequal length ends)
    records = engine_records([1, 2, 6], linear(10, 3), accept_len=2, prefill_ms_per_token=0.05, limit=2)
    fit = fit_twin(records)
    assert fit.params.prefill_ms_per_token == pytest.approx(0.05, rel=1e-6)
    assert fit.params.max_num_seqs == 2 and fit.queued_requests > 0


def test_a_long_wait_with_a_few_chunks_read_late_is_still_a_wait():
    """512 tokens one a step past a limit of 3: the fourth user waits 512 steps; 2 % of the
    running streams' chunks read 3 ms late (past the cluster window of a 10.5 ms step: a late
    read splits a step into two clusters, as on the loaded machine) do not hide the limit."""
    records = engine_records([1, 2, 4], linear(10, 0.5), tokens=512, limit=3)
    rng = random.Random(7)
    late = []
    for rec in records:
        times = [t + (0.003 if rec.users == 4 and rng.random() < 0.02 else 0.0) for t in rec.chunk_times]
        late.append(RequestRecord(**{**rec.to_dict(), "chunk_times": times}))
    for records_read in (records, late):
        fit = fit_twin(records_read)
        assert fit.params.max_num_seqs == 3 and fit.queued_requests == 1, fit.as_dict()


def test_with_no_request_joining_a_running_batch_the_idle_starts_give_the_prefill():
    """Every user sends at once and all outputs are one token a step of equal length: no step
    admits into a running batch; the first step of each rung starts an idle server, and its time
    from the sends beyond the line is the prefill of the prompts it admitted."""
    records = engine_records([1, 2, 4], linear(10, 3), prefill_ms_per_token=0.05)
    fit = fit_twin(records)
    assert fit.admit_steps == 0 and fit.idle_steps == 3
    assert fit.params.prefill_ms_per_token == pytest.approx(0.05, rel=1e-6)
    assert any("started an idle server" in n for n in fit.notes), fit.notes
    # one start that waited 200 ms for something else (the machine, the server's other work)
    first = records[0]
    records[0] = replace(first, t_start=first.t_start - 0.2, chunk_times=[t + 0.2 for t in first.chunk_times])
    assert fit_twin(records).params.prefill_ms_per_token == pytest.approx(0.05, rel=1e-6)


def test_a_step_cost_not_linear_in_batch_does_not_fit():
    fit = fit_twin(engine_records([1, 2, 4, 8, 16], lambda b, _t: 10 + 0.5 * b * b))
    assert not fit.fits
    assert any("not linear in batch" in p for p in fit.problems), fit.problems


def test_a_step_time_that_drifts_does_not_fit():
    fit = fit_twin(engine_records([1, 2, 4, 8], lambda b, t: (10 + 3 * b) * (1 + t / 60)))
    assert any("drifts" in p for p in fit.problems), fit.problems


def test_a_line_whose_base_falls_below_zero_is_fitted_through_the_origin():
    """Steps of 11.5 ms at batch 1 and 24 ms at batch 2: the free line is -1 + 12.5 x batch; the
    simulator needs base >= 0, and the least squares with base held at 0 is sum(b d) / sum(b b)."""
    from llmload.analysis.step_fit import step_line

    (base, per_seq), _, bound = step_line([1, 1, 2, 2], [11.0, 12.0, 23.5, 24.5])
    assert base == 0.0 and per_seq == pytest.approx((11 + 12 + 2 * 23.5 + 2 * 24.5) / 10)
    assert bound.startswith("base_ms (free fit -1.00")


def test_one_batch_size_is_not_enough():
    with pytest.raises(TwinFitError, match="two"):
        fit_twin(engine_records([1], linear(10, 3)))


@pytest.mark.parametrize("accept", [1.5, 2.0, 4.5, 7.0])
def test_the_accept_length_inverts_the_capped_steps(accept):
    """Tokens per chunk read low (the last chunk is capped); the expected steps do not."""
    records = engine_records([1, 2, 4, 8, 16, 32], linear(10, 3), tokens=40, accept_len=accept, seed=3)
    pairs = [(r.output_tokens, r.chunks) for r in records]
    assert fit_accept_len(pairs) == pytest.approx(accept, rel=0.03)
    assert sum(t for t, _ in pairs) / sum(n for _, n in pairs) < accept  # the naive reading


def test_expected_steps_of_the_plain_cases():
    assert expected_steps(5, 1.0) == [0, 1, 2, 3, 4, 5]
    assert expected_steps(16, 8.0)[16] == pytest.approx(2.0)  # every draft accepted: 8 a step


def figures(agg: float, ttft: float, conc: int = 4, rung: int = 0) -> RungFigures:
    return RungFigures(rung, conc, {"agg_tok_s": agg, "per_req_tok_s": agg / conc, "ttft_p50_ms": ttft})


def test_the_verdict_names_each_figure_that_breaks_it():
    fit = fit_twin(engine_records([1, 2, 4, 8], linear(10, 3)))
    measured = [figures(100, 50, 1, 0), figures(300, 200, 8, 1)]
    good = replay_rows(measured, [figures(102, 53, 1, 0), figures(295, 230, 8, 1)])
    assert judge(fit, good).fits  # 2 %, +3 ms at c1 (the 5 ms floor), +30 ms at c8 (one step: 34 ms)
    bad = replay_rows(measured, [figures(104, 50, 1, 0), figures(300, 250, 8, 1)])
    verdict = judge(fit, bad)
    assert not verdict.fits
    assert verdict.breaks == [
        "rung01 c1 agg_tok/s off by +4.0 % (tolerance 3 %)",
        "rung02 c8 ttft_p50 off by +50.0 ms (+25.0 %; tolerance one step at batch 8, 34.0 ms)",
    ]
    assert verdict.line().startswith("verdict: does not fit: rung01 c1 agg_tok/s")


def test_a_prediction_beyond_two_checked_batch_sizes_is_not_made():
    """A line through batch 1 and 2 has not been tested for linearity: predicting batch 4 from it
    breaks the verdict; from batches 1, 2 and 4, batch 8 is predicted, and batch 2 is never a
    break (it was measured)."""
    two = fit_twin(engine_records([1, 2], linear(10, 3)))
    replay = replay_rows(
        [figures(100, 50, 1, 0), figures(180, 60, 2, 1)], [figures(100, 50, 1, 0), figures(180, 60, 2, 1)]
    )
    ahead = prediction_rows([], [figures(300, 70, 4, 0)])
    verdict = judge(two, replay, ahead)
    assert not verdict.fits
    assert verdict.breaks == [
        "c4 beyond the batch sizes the line was checked on (1, 2): extrapolating needs three or more "
        "to test that the step cost is linear in batch"
    ]
    assert judge(two, replay, prediction_rows([], [figures(180, 60, 2, 0)])).fits
    three = fit_twin(engine_records([1, 2, 4], linear(10, 3)))
    assert judge(three, replay, prediction_rows([], [figures(400, 90, 8, 0)])).fits


def test_ttft_tolerance():
    params = TwinParams(10, 3, 0, 1, None)
    assert ttft_tolerance_ms(200, 1, params) == (20, "10 %")
    assert ttft_tolerance_ms(30, 1, params)[0] == 5.0
    assert ttft_tolerance_ms(100, 4, params) == (22, "one step at batch 4, 22.0 ms")
    assert ttft_tolerance_ms(100, 4, TwinParams(10, 3, 0, 1, 2))[0] == 16  # the batch limit's batch
    queued = ttft_tolerance_ms(800, 8, TwinParams(27.2, 6, 0, 4.5, 3), step_spread=5)  # requests waited
    assert queued[0] == pytest.approx(6 * 45.2) and queued[1].startswith("6 steps at batch 3")


def test_median_reach_is_what_one_value_moves_the_median():
    assert median_reach_ms([]) == median_reach_ms([24.6]) == 0.0
    assert median_reach_ms([24.6, 35.6]) == pytest.approx(5.5)  # a median of two is their mean
    assert median_reach_ms([10, 11, 12, 100]) == pytest.approx(0.5)  # an outlier among four: half a gap
    assert median_reach_ms([5, 5, 5]) == 0.0
    values = [3.0, 9.0, 4.0, 4.5, 20.0, 7.0]  # brute force: leave each one out
    middle = sorted(values)[2:4]
    assert median_reach_ms(values) == pytest.approx(
        max(abs(median(values[:i] + values[i + 1 :]) - sum(middle) / 2) for i in range(len(values)))
    )


def test_run_figures_reach_is_of_the_ttfts_the_rungs_median_is_of(tmp_path):
    records = engine_records([1, 2, 6], linear(10, 3), limit=3)  # 6 users over a limit of 3: 3 wait
    (tmp_path / "run_records.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    rungs = run_figures(load_run(tmp_path / "run", with_metrics=True))
    for rung in rungs:
        ttfts = [(r.t_first - r.t_start) * 1000 for r in records if r.rung == rung.rung]
        assert rung.figures["ttft_p50_ms"] == pytest.approx(median(ttfts))
        assert rung.ttft_reach_ms == pytest.approx(median_reach_ms(ttfts))
    assert rungs[0].ttft_reach_ms == 0.0 and rungs[2].ttft_reach_ms > 0


def test_one_stalled_request_of_two_does_not_break_the_fit_a_wrong_model_does():
    """CI's case: a c1 rung of two requests, one read 11 ms late in the replay, moved the replay's
    median 5.5 ms, over the 5 ms floor; the same shift in both requests is a wrong model."""
    fit = fit_twin(engine_records([1, 2, 4, 8], linear(10, 3)))
    measured = [figures(100, 24.6, 1, 0)]
    stalled = [24.6, 35.6]
    replay = [RungFigures(0, 1, figures(100, 30.1, 1).figures, ttft_reach_ms=median_reach_ms(stalled))]
    verdict = judge(fit, replay_rows(measured, replay))
    assert verdict.fits, verdict.breaks
    wrong = [RungFigures(0, 1, figures(100, 30.1, 1).figures, ttft_reach_ms=median_reach_ms([30.1, 30.1]))]
    assert judge(fit, replay_rows(measured, wrong)).breaks == [
        "rung01 c1 ttft_p50 off by +5.5 ms (+22.4 %; tolerance 5 ms (10 % is less))"
    ]
    assert ttft_tolerance_ms(24.6, 1, fit.params, reach_ms=5.5) == (
        10.5,
        "5 ms (10 % is less) + 5.5 ms one request's reach of the medians",
    )


def test_prediction_rows_mark_the_rungs_not_measured():
    rows = prediction_rows(
        [figures(100, 50, 1), figures(200, 60, 2, 1)], [figures(210, 55, 2), figures(380, 70, 4, 1)]
    )
    assert [(r.conc, r.extrapolated) for r in rows] == [(2, False), (4, True)]
    assert rows[0].errors()["agg_tok_s"] == pytest.approx(5.0)


def test_a_change_removes_the_component_from_every_step():
    params = TwinParams(27.2, 6.0, 0.01, 4.5, None, sim_accept_len=4.6)
    faster = apply_change(params, Change(cost=CostModel(constant_ms=0.8), speedup=470))
    assert faster.base_ms == pytest.approx(27.2 - 0.8 * (1 - 1 / 470)) and faster.per_seq_ms == 6.0
    lin = apply_change(params, Change(cost=CostModel(linear=(1.0, 0.5)), speedup=2))
    assert (lin.base_ms, lin.per_seq_ms) == (pytest.approx(26.7), pytest.approx(5.75))
    scaled = apply_change(params, Change(step_scale=0.5, accept_len=5.5))
    assert (scaled.base_ms, scaled.per_seq_ms, scaled.prefill_ms_per_token) == (13.6, 3.0, 0.005)
    assert scaled.accept_len == 5.5 and scaled.sim_accept_len == pytest.approx(1 + 4.5 * 3.6 / 3.5)
    with pytest.raises(ConfigError, match="more than the fitted step"):
        apply_change(params, Change(cost=CostModel(constant_ms=30), speedup=1e9))
    with pytest.raises(ConfigError, match="table"):
        apply_change(params, Change(cost=CostModel(table=((1, 1.0), (8, 2.0))), speedup=2))


def test_the_fits_defaults_are_the_simulators():
    """analysis/ imports only core/: the two simulator defaults the fit writes are copies, kept equal here."""
    from llmload.analysis.twin.fit import MAX_DRAFT, SIM_DEFAULT_MAX_NUM_SEQS
    from llmload.sim.config import SimConfig
    from llmload.sim.engine import StepModel

    assert (StepModel().max_draft, SimConfig().max_num_seqs) == (MAX_DRAFT, SIM_DEFAULT_MAX_NUM_SEQS)


@pytest.mark.parametrize(
    ("code", "taken"),
    [
        (BAD_INPUT, BAD_INPUT),
        (WRITE_FAILED, WRITE_FAILED),
        (INTERRUPTED, INTERRUPTED),
        (1, INTERRUPTED),
        (-9, INTERRUPTED),
    ],
)
def test_a_replay_that_did_not_finish_cleanly_ends_the_twin_with_the_sweeps_own_line(tmp_path, code, taken):
    """The twin judges its replays by how their `llmload sweep` ended (run_outcome's line, the last
    of the replay's log), not by whether they left records: a stopped or refused replay is said."""
    (tmp_path / SWEEP_LOG).write_text(
        "starting\nllmload sweep: error: stopped by SIGTERM: Locust was stopped\n\n"
    )
    with pytest.raises(
        ReplayEnded, match="did not finish: llmload sweep: error: stopped by SIGTERM"
    ) as raised:
        replayed(tmp_path, code)
    assert raised.value.code == taken
    (tmp_path / SWEEP_LOG).unlink()  # no log: its exit code is what is said
    with pytest.raises(ReplayEnded, match=f"exit code {code}"):
        replayed(tmp_path, code)
