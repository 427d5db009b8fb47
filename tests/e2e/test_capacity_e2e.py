"""`llmload capacity` against the simulator, whose step model gives the capacity analytically.

With one token per step (no speculative decoding) and no prefill cost, every decode step of a
probe at c users lasts the engine's `StepModel.duration_s(c, 0, 0)`, and a request's TPOT is
that step time. So the largest concurrency meeting `slo.tpot_ms` is the largest c with
duration_s(c) * 1000 <= tpot_ms. The SLO sits half-way between two step times so timer jitter
cannot move the answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.cli import capacity
from llmload.core.stats import percentile
from llmload.runner.sweep_run import run_sweep
from llmload.sim.engine import StepModel
from llmload.sim.truth import load_truth

SIM = {"accept_len": 1, "max_draft": 0, "base_ms": 10, "per_seq_ms": 4}
STEP = StepModel(base_ms=10, per_seq_ms=4, accept_len=1, max_draft=0)
TPOT_SLO_MS = 56.0  # 11 users: 54 ms steps, 12 users: 58 ms
LADDER = f"""\
mode: capacity
max_tokens: 16
slo:
  tpot_ms: {TPOT_SLO_MS}
capacity:
  percentile: 50
  requests: 8
  max_requests: 32
  max_users: 64
"""


def analytic_capacity(step: StepModel, tpot_ms: float, max_users: int = 64) -> int:
    """The largest concurrency whose decode step (the TPOT of each of its requests) meets the SLO."""
    return max(c for c in range(1, max_users + 1) if step.duration_s(c, 0, 0.0) * 1000.0 <= tpot_ms)


def search(tmp_path: Path, ladder_text: str, sim: dict, name: str):
    ladder = tmp_path / f"{name}.yaml"
    ladder.write_text(ladder_text)
    run = run_sweep(
        run_dir=tmp_path / name,
        locust_args=["--ladder", str(ladder), "--scrape-interval", "0"],
        sim=sim,
        timeout=300,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run, capacity.capacity_of_run(run.prefix)


@pytest.fixture(scope="module")
def first_search(tmp_path_factory):
    return search(tmp_path_factory.mktemp("capacity"), LADDER, SIM, "first")


def test_capacity_equals_the_step_models(first_search):
    run, result = first_search
    assert analytic_capacity(STEP, TPOT_SLO_MS) == 11
    assert result.complete and result.capacity == 11  # the search's step is one user
    assert [p.load for p in result.probes] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert result.binding is not None and result.binding.key == "tpot_ms"
    # each probe's TPOT percentile is the server's: the same percentile of the TPOTs the truth
    # log's chunk write times give for the same requests, within a millisecond of transit jitter
    truth, _ = load_truth(run.truth_log)
    for probe in result.probes:
        (tpot,) = [c for c in probe.criteria if c.key == "tpot_ms"]
        served = [truth[r.request_id] for r in probe.records]
        truth_ms = [1000 * (t["last_token"] - t["first_token"]) / (t["tokens_sent"] - 1) for t in served]
        assert tpot.point == pytest.approx(percentile(truth_ms, 50.0), abs=1.0)
        assert tpot.lower <= tpot.point <= tpot.upper
        assert tpot.point == pytest.approx(STEP.duration_s(int(probe.load), 0, 0.0) * 1000, rel=0.05)


def test_command_prints_the_answer_and_draws_the_plot(first_search, capsys, tmp_path):
    run, _ = first_search
    plot = tmp_path / "capacity.png"
    assert capacity.main(["--prefix", str(run.prefix), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("capacity: 11 users (p50 at 95 % confidence")
    assert "binding SLO: tpot_ms" in out and "at capacity:" in out
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_three_searches_give_the_same_answer(first_search, tmp_path):
    answers = [first_search[1].capacity]
    answers += [search(tmp_path, LADDER, SIM, f"again{i}")[1].capacity for i in range(2)]
    assert answers == [11, 11, 11]


def test_noisy_probes_are_extended_not_flipped(tmp_path):
    # speculative decoding with varied prompts: each request's TPOT depends on how many draft
    # tokens its prompt gets accepted, so probes near the SLO straddle it and ask for more
    noisy = LADDER.replace("max_tokens: 16", "max_tokens: 32\nprompt_tokens: 16").replace(
        "max_users: 64", "max_users: 2"
    )
    noisy = noisy.replace(f"tpot_ms: {TPOT_SLO_MS}", "tpot_ms: 4.0")
    sim = {"base_ms": 10, "per_seq_ms": 4, "accept_len": 4.5, "max_draft": 7}
    _, result = search(tmp_path, noisy, sim, "noisy")
    assert any(p.extended for p in result.probes), [p.as_dict() for p in result.probes]
