"""The capacity search's statistics and search logic, on synthetic records (no processes)."""

from __future__ import annotations

import math
import random

import pytest
from fixtures.runs import make_record

from llmload.analysis.capacity import (
    FAIL,
    PASS,
    CapacitySearch,
    binomial_cdf,
    judge,
    proportion_interval,
    quantile_interval,
    replay,
)
from llmload.analysis.sweep_rows import Rung
from llmload.core.config import CapacityConfig, SloConfig
from llmload.core.records import RequestRecord

TOKENS = 32


def record(rung: int, users: int, tpot_ms: float, ttft_ms: float = 20.0, ok: bool = True) -> RequestRecord:
    """A completed request whose TPOT and TTFT are exactly the given values."""
    e2el_s = (ttft_ms + tpot_ms * (TOKENS - 1)) / 1000.0
    return make_record(
        100.0,
        100.0 + e2el_s,
        TOKENS,
        ttft_ms / 1000.0,
        request_id=f"r{rung}-{random.random()}",
        rung=rung,
        users=users,
        max_tokens=TOKENS,
        outcome="ok" if ok else "http_500",
    )


def test_binomial_cdf_exact_values():
    assert binomial_cdf(0, 6, 0.5) == pytest.approx(1 / 64)
    assert binomial_cdf(3, 6, 0.5) == pytest.approx(42 / 64)
    assert binomial_cdf(2, 10, 0.3) == pytest.approx(0.3827827864)
    assert binomial_cdf(-1, 5, 0.5) == 0.0 and binomial_cdf(5, 5, 0.5) == 1.0


def test_median_interval_of_six_values_is_their_range():
    # P(Bin(6, .5) <= 0) = 1/64 <= 0.025 and P(Bin(6, .5) <= 5) = 63/64 >= 0.975: ranks 1 and 6
    assert quantile_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0], 0.5, 0.95) == (1.0, 6.0)
    # five values cannot bound the median at 95 % (1/32 > 0.025)
    assert quantile_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, 0.95) == (-math.inf, math.inf)


def test_p99_needs_enough_requests_for_an_upper_bound():
    values = [float(i) for i in range(100)]
    lower, upper = quantile_interval(values, 0.99, 0.95)
    assert upper == math.inf and lower > 90  # 100 requests bound p99 from below only


def test_quantile_interval_covers_the_true_percentile_at_its_confidence():
    rng = random.Random(7)
    true_p90 = -math.log(0.1)  # exponential(1)
    trials, covered = 2000, 0
    for _ in range(trials):
        lo, hi = quantile_interval([rng.expovariate(1.0) for _ in range(60)], 0.9, 0.9)
        covered += lo <= true_p90 <= hi
    assert covered / trials >= 0.9 - 0.02  # exact method: at least the nominal level


def test_clopper_pearson_known_values():
    lo, hi = proportion_interval(0, 10, 0.95)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)
    lo, hi = proportion_interval(5, 10, 0.95)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(0.812914, abs=1e-5)


def test_judge_pass_fail_and_undecided():
    cfg = CapacityConfig(percentile=50.0, confidence=0.95)
    slo = SloConfig(tpot_ms=30.0)
    under = [record(0, 1, 20.0 + i * 0.1) for i in range(10)]
    over = [record(0, 1, 40.0 + i * 0.1) for i in range(10)]
    straddle = [record(0, 1, 25.0 + i) for i in range(10)]
    verdicts = {c.key: c.verdict for c in judge(under, cfg, slo)}
    assert verdicts == {"tpot_ms": PASS, "failure_ratio": PASS}
    assert {c.key: c.verdict for c in judge(over, cfg, slo)}["tpot_ms"] == FAIL
    assert {c.key: c.verdict for c in judge(straddle, cfg, slo)}["tpot_ms"] == "undecided"
    failed = [*under[:9], record(0, 1, 20.0, ok=False)]
    assert {c.key: c.verdict for c in judge(failed, cfg, slo)}["failure_ratio"] == FAIL  # zero tolerance


class ModelServer:
    """Synthetic server: TPOT = base + per_seq * users, times (1 + noise * N(0, 1)) per request."""

    def __init__(self, base: float, per_seq: float, noise: float, seed: int) -> None:
        self.base, self.per_seq, self.noise = base, per_seq, noise
        self.rng = random.Random(seed)

    def run(self, rung: int, users: int, requests: int) -> list[RequestRecord]:
        mean = self.base + self.per_seq * users
        return [record(rung, users, mean * (1 + self.noise * self.rng.gauss(0, 1))) for _ in range(requests)]


def search(server: ModelServer, cfg: CapacityConfig, slo: SloConfig) -> tuple[CapacitySearch, list[Rung]]:
    s, rungs = CapacitySearch(cfg, slo), []
    while (probe := s.next_probe()) is not None:
        records = server.run(len(rungs), probe.users, probe.requests_per_user * probe.users)
        rungs.append(Rung(len(rungs), probe.users, records))
        s.observe(probe.users, len(rungs) - 1, records)
    return s, rungs


def test_search_finds_the_analytic_capacity_by_doubling_then_bisecting():
    cfg = CapacityConfig(percentile=90.0, requests=40, max_requests=160)
    slo = SloConfig(tpot_ms=10.0 + 2.0 * 11 + 1.0)  # 11 users: 32 ms, 12 users: 34 ms
    s, rungs = search(ModelServer(10.0, 2.0, 0.002, seed=1), cfg, slo)
    result = s.result()
    assert result.capacity == 11 and result.complete
    assert [p.users for p in result.probes] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert result.binding is not None and result.binding.key == "tpot_ms"
    assert "bracketed" in result.reason
    again = replay(cfg, slo, rungs)  # the report's replay reaches the same verdicts
    assert again.capacity == 11 and [p.verdict for p in again.probes] == [p.verdict for p in result.probes]


def test_noisy_probes_get_more_requests_and_the_answer_holds():
    cfg = CapacityConfig(percentile=50.0, requests=8, max_requests=256)
    slo = SloConfig(tpot_ms=10.0 + 2.0 * 11 + 1.0)
    answers = set()
    for seed in range(3):
        s, _ = search(ModelServer(10.0, 2.0, 0.05, seed=seed), cfg, slo)
        result = s.result()
        answers.add(result.capacity)
        assert any(p.extended for p in result.probes)  # straddling intervals asked for more
    assert answers == {11}


def test_search_stops_at_max_users_and_when_the_start_fails():
    slo = SloConfig(tpot_ms=1000.0)
    s, _ = search(ModelServer(10.0, 2.0, 0.0, seed=0), CapacityConfig(requests=10, max_users=6), slo)
    result = s.result()
    assert result.capacity == 6 and "max_users" in result.reason
    assert [p.users for p in result.probes] == [1, 2, 4, 6]
    s, _ = search(ModelServer(10.0, 2.0, 0.0, seed=0), CapacityConfig(requests=10), SloConfig(tpot_ms=5.0))
    assert s.result().capacity == 0 and [p.users for p in s.probes] == [1]


def test_undecided_at_max_requests_is_decided_by_the_point_estimate():
    cfg = CapacityConfig(percentile=50.0, requests=6, max_requests=12, max_users=1)
    s = CapacitySearch(cfg, SloConfig(tpot_ms=30.0))
    first = s.next_probe()
    assert first is not None and (first.users, first.requests) == (1, 6)
    probe = s.observe(1, 0, [record(0, 1, v) for v in (20, 25, 29, 31, 35, 40)])
    assert probe.verdict == "undecided"
    more = s.next_probe()
    assert more is not None and more.extends and more.requests == 6
    probe = s.observe(1, 1, [record(1, 1, v) for v in (21, 26, 28, 32, 36, 41)])
    assert probe.by_point and probe.verdict == PASS and probe.rungs == [0, 1]  # median 28.5 <= 30
    assert s.next_probe() is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--ladder: a ladder file with 'mode: capacity' is needed"),
        (["--ladder", "{ladder}"], "'mode' must be capacity, got 'concurrency'"),
        (["--prefix", "{missing}"], "_run.json: no run file"),
    ],
)
def test_capacity_command_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    from llmload.cli import capacity

    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("rungs: [1]\n")
    argv = [a.format(ladder=ladder, missing=tmp_path / "nope") for a in argv]
    assert capacity.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("llmload capacity: error: ")
