"""`llmload capacity` over request rate against the simulator, whose step model gives the answer.

With one token per step and no prefill cost, a sequence runs `max_tokens` steps from admission to
its last token, each lasting the engine's `StepModel.duration_s(batch)`. At an arrival rate λ the
mean batch is λ · max_tokens · step (Little's law over the running time), so in steady state
step = duration_s(λ · max_tokens · step) and a request's TPOT is that step. The rate at which TPOT
reaches the SLO S is therefore λ* = c* / (max_tokens · S), with c* the (fractional) batch whose
step lasts S. Arrivals are nearly regular (gamma, shape 100): under Poisson arrivals a request
meets on average one sequence more than the time average (M/G/∞), which moves TPOT by per_seq_ms.
The SLO is judged at p90 so that the first and last requests of a probe, which see the server
filling and draining, do not pull the percentile below the steady value.
"""

from __future__ import annotations

import pytest
from test_capacity_e2e import search  # the same search run (pytest puts tests/e2e on the path)

from llmload.analysis.capacity import FAIL
from llmload.analysis.run.metrics import itl_ms
from llmload.cli import capacity
from llmload.core.stats import percentile
from llmload.sim.engine import StepModel
from llmload.sim.truth import load_truth

SIM = {"accept_len": 1, "max_draft": 0, "base_ms": 10, "per_seq_ms": 2}
STEP = StepModel(base_ms=10, per_seq_ms=2, accept_len=1, max_draft=0)
TOKENS = 16
TPOT_SLO_MS = 29.0
ITL_SLO_MS = 40.0
RESOLUTION = 0.05
LADDER = f"""\
mode: capacity
max_tokens: {TOKENS}
arrival: gamma
burstiness: 100
slo:
  tpot_ms: {TPOT_SLO_MS}
  itl_ms: {ITL_SLO_MS}
capacity:
  variable: rate
  start: 16
  percentile: 90
  requests: 80
  max_requests: 160
  rate_resolution: {RESOLUTION}
"""


def analytic_rate(step: StepModel, tokens: int, tpot_ms: float) -> float:
    """λ* = c* / (tokens · S): c* the batch whose step lasts S (bisected on duration_s)."""
    lo, hi = 0.0, 10_000.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step.duration_s(mid, 0, 0.0) * 1000.0 <= tpot_ms else (lo, mid)
    return lo / (tokens * tpot_ms / 1000.0)


@pytest.fixture(scope="module")
def rate_search(tmp_path_factory):
    return search(tmp_path_factory.mktemp("capacity-rate"), LADDER, SIM, "first")


def test_rate_capacity_brackets_the_analytic_rate(rate_search):
    _, result = rate_search
    analytic = analytic_rate(STEP, TOKENS, TPOT_SLO_MS)
    assert analytic == pytest.approx(20.47, abs=0.01)
    failing = min(p.load for p in result.probes if p.verdict == FAIL)
    table = [(p.load, p.verdict, [(c.key, c.point) for c in p.criteria]) for p in result.probes]
    assert result.complete and result.variable == "rate", table
    assert result.capacity <= analytic < failing <= result.capacity * (1 + RESOLUTION) + 1e-9, table
    assert result.binding is not None and result.binding.key == "tpot_ms"
    assert not any(p.client_limited for p in result.probes)  # 64 client slots: never all busy


def test_rate_probes_itl_verdict_is_the_truth_logs(rate_search):
    # the ITL criterion pools the client's inter-token gaps; the truth log's chunk write times
    # give the server's own gaps for the same requests: the same p90 within transit jitter
    run, result = rate_search
    truth, _ = load_truth(run.truth_log)
    for probe in result.probes:
        (itl,) = [c for c in probe.criteria if c.key == "itl_ms"]
        served = [truth[r.request_id]["chunk_times"] for r in probe.records if r.ok]
        gaps = [1000 * (b - a) for times in served for a, b in zip(times, times[1:], strict=False)]
        assert len(gaps) == sum(len(itl_ms(r)) for r in probe.records if r.ok)
        assert itl.point == pytest.approx(percentile(gaps, 90.0), abs=1.0)
        truth_verdict = "pass" if percentile(gaps, 90.0) <= ITL_SLO_MS else "fail"
        if abs(percentile(gaps, 90.0) - ITL_SLO_MS) > 1.0:  # not within transit jitter of the limit
            assert itl.verdict in (truth_verdict, "undecided")


def test_rate_command_prints_the_rate_answer(rate_search, capsys, tmp_path):
    run, result = rate_search
    assert capacity.main(["--prefix", str(run.prefix), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"capacity: {result.capacity:.4g} requests/s (p90 at 95 % confidence")
    assert "rate (req/s)" in out and "itl_ms p90 [CI]" in out


@pytest.mark.slow
def test_three_rate_searches_give_the_same_answer(rate_search, tmp_path):
    answers = [rate_search[1].capacity]
    answers += [search(tmp_path, LADDER, SIM, f"again{i}")[1].capacity for i in range(2)]
    assert answers == [answers[0]] * 3 and answers[0] <= analytic_rate(STEP, TOKENS, TPOT_SLO_MS)


def test_too_few_client_slots_is_no_verdict_on_the_server(tmp_path):
    # 2 client slots for 8 requests/s of ~0.2 s requests: arrivals wait for a slot, the wait is in
    # TTFT (measured from the scheduled arrival), and the failing probe stops the search unjudged
    ladder = (
        LADDER.replace("arrival: gamma\nburstiness: 100\n", "max_concurrency: 2\n")
        .replace(f"tpot_ms: {TPOT_SLO_MS}\n  itl_ms: {ITL_SLO_MS}", "ttft_ms: 100")
        .replace("start: 16", "start: 8")
        .replace("requests: 80", "requests: 40")
    )
    run, result = search(tmp_path, ladder, SIM, "slots")
    (probe,) = result.probes
    assert probe.client_limited and probe.verdict == FAIL and not result.complete
    assert result.capacity == 0 and "raise max_concurrency" in result.reason and result.binding is None
    (ttft,) = [c for c in probe.criteria if c.key == "ttft_ms"]
    truth, _ = load_truth(run.truth_log)
    from_arrival = [1000 * (r.t_first - r.t_scheduled) for r in probe.records if r.ok]
    server = [
        1000 * (truth[r.request_id]["first_token"] - truth[r.request_id]["arrival"]) for r in probe.records
    ]
    assert ttft.point == pytest.approx(percentile(from_arrival, 90.0))
    assert percentile(server, 90.0) < ttft.limit < ttft.point  # the server alone would have passed


def test_sweep_table_goodput_leaves_the_itl_slo_out(rate_search, capsys):
    # goodput is per request (vLLM's keys): the run's slo.itl_ms is for the capacity verdict only
    from llmload.cli import table

    run, _ = rate_search
    assert table.main([str(run.prefix), "--metrics"]) == 0
    out = capsys.readouterr().out
    assert f"goodput SLO: tpot_ms <= {TPOT_SLO_MS:g}" in out and "itl_ms <=" not in out
