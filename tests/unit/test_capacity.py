"""The capacity search's statistics and search logic, on synthetic records (no processes)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from fixtures.runs import make_record

from llmload.analysis.capacity import (
    FAIL,
    PASS,
    CapacitySearch,
    binomial_cdf,
    client_limited,
    judge,
    proportion_interval,
    quantile_interval,
    replay,
)
from llmload.analysis.run.sweep_rows import Rung
from llmload.core.config import CapacityConfig, ConfigError, SloConfig, parse_config
from llmload.core.files.records import RequestRecord
from llmload.core.stats import percentile

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
        records = server.run(len(rungs), int(probe.load), probe.requests_per_user * int(probe.load))
        rungs.append(Rung(len(rungs), int(probe.load), records))
        s.observe(probe.load, len(rungs) - 1, records)
    return s, rungs


def test_search_finds_the_analytic_capacity_by_doubling_then_bisecting():
    cfg = CapacityConfig(percentile=90.0, requests=40, max_requests=160)
    slo = SloConfig(tpot_ms=10.0 + 2.0 * 11 + 1.0)  # 11 users: 32 ms, 12 users: 34 ms
    s, rungs = search(ModelServer(10.0, 2.0, 0.002, seed=1), cfg, slo)
    result = s.result()
    assert result.capacity == 11 and result.complete
    assert [p.load for p in result.probes] == [1, 2, 4, 8, 16, 12, 10, 11]
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
    assert [p.load for p in result.probes] == [1, 2, 4, 6]
    s, _ = search(ModelServer(10.0, 2.0, 0.0, seed=0), CapacityConfig(requests=10), SloConfig(tpot_ms=5.0))
    assert s.result().capacity == 0 and [p.load for p in s.probes] == [1]


def test_undecided_at_max_requests_is_decided_by_the_point_estimate():
    cfg = CapacityConfig(percentile=50.0, requests=6, max_requests=12, max_users=1)
    s = CapacitySearch(cfg, SloConfig(tpot_ms=30.0))
    first = s.next_probe()
    assert first is not None and (first.load, first.requests) == (1, 6)
    probe = s.observe(1, 0, [record(0, 1, v) for v in (20, 25, 29, 31, 35, 40)])
    assert probe.verdict == "undecided"
    more = s.next_probe()
    assert more is not None and more.extends and more.requests == 6
    probe = s.observe(1, 1, [record(1, 1, v) for v in (21, 26, 28, 32, 36, 41)])
    assert probe.by_point and probe.verdict == PASS and probe.rungs == [0, 1]  # median 28.5 <= 30
    assert s.next_probe() is None


# --- variable: rate ---------------------------------------------------------------------------
RATE_CFG = CapacityConfig(variable="rate", percentile=50.0, requests=40, max_requests=160, start=1.0)


def rate_record(
    rung: int, rate: float, t_scheduled: float, wait_s: float, tpot: float, slots: int = 64
) -> RequestRecord:
    """A rate probe's request scheduled at t_scheduled that waited wait_s for a client slot."""
    rec = record(rung, slots, tpot)
    shift = t_scheduled + wait_s - rec.t_start
    assert rec.t_first is not None
    return dataclasses.replace(
        rec,
        t_start=rec.t_start + shift,
        t_end=rec.t_end + shift,
        t_first=rec.t_first + shift,
        t_scheduled=t_scheduled,
        rate=rate,
    )


def open_loop_tpot_ms(rate: float, base: float, per_seq: float, tokens: int) -> float:
    """Steady TPOT at `rate` of a server whose step is base + per_seq * batch (one token a step):
    the batch is rate * tokens * step (Little's law over the decode time), so step = base /
    (1 - rate * tokens * per_seq); inf past saturation."""
    load = rate * tokens * per_seq / 1000.0
    return base / (1.0 - load) if load < 1.0 else math.inf


def rate_search(
    cfg: CapacityConfig, slo: SloConfig, noise: float, seed: int
) -> tuple[CapacitySearch, list[Rung]]:
    rng, s, rungs = random.Random(seed), CapacitySearch(cfg, slo), []
    while (probe := s.next_probe()) is not None:
        assert probe.extends or probe.requests == cfg.requests  # a fixed count per new probe
        tpot = min(open_loop_tpot_ms(probe.load, 10.0, 2.0, TOKENS), 10_000.0)  # saturated: 10 s
        records = [
            rate_record(len(rungs), probe.load, i / probe.load, 0.0, tpot * (1 + noise * rng.gauss(0, 1)))
            for i in range(probe.requests)
        ]
        rungs.append(Rung(len(rungs), 64, records))
        s.observe(probe.load, len(rungs) - 1, records)
    return s, rungs


def test_rate_search_brackets_the_analytic_rate_within_its_resolution():
    slo = SloConfig(tpot_ms=29.0)
    analytic = (1 - 10.0 / 29.0) / (TOKENS * 2.0 / 1000.0)  # solves open_loop_tpot_ms(rate) == 29
    assert open_loop_tpot_ms(analytic, 10.0, 2.0, TOKENS) == pytest.approx(29.0)
    s, rungs = rate_search(RATE_CFG, slo, noise=0.002, seed=3)
    result = s.result()
    failing = min(p.load for p in result.probes if p.verdict == FAIL)
    assert result.complete and result.variable == "rate" and "bracketed" in result.reason
    assert result.capacity <= analytic < failing <= result.capacity * (1 + RATE_CFG.rate_resolution)
    assert [p.load for p in result.probes][:5] == [1, 2, 4, 8, 16]  # doubling from start
    assert result.unit == "requests/s" and result.binding is not None and result.binding.key == "tpot_ms"
    again = replay(RATE_CFG, slo, rungs)  # the rate is read back from the records
    assert again.capacity == result.capacity and again.variable == "rate"


def test_rate_search_stops_when_the_start_fails_and_at_max_rate():
    s, _ = rate_search(RATE_CFG, SloConfig(tpot_ms=5.0), noise=0.0, seed=0)
    assert s.result().capacity == 0 and "1 requests/s fail" in s.reason
    cfg = CapacityConfig(variable="rate", percentile=50.0, requests=10, max_rate=3.0)
    s, _ = rate_search(cfg, SloConfig(tpot_ms=1000.0), noise=0.0, seed=0)
    assert [p.load for p in s.probes] == [1, 2, 3] and "max_rate (3)" in s.reason


def test_an_undecided_rate_probe_is_extended_at_the_same_rate():
    cfg = CapacityConfig(variable="rate", percentile=50.0, requests=6, max_requests=12, start=4.0)
    s = CapacitySearch(cfg, SloConfig(tpot_ms=30.0))
    first = s.next_probe()
    assert first is not None and (first.load, first.requests, first.extends) == (4.0, 6, False)
    s.observe(4.0, 0, [rate_record(0, 4.0, i / 4, 0.0, v) for i, v in enumerate((20, 25, 29, 31, 35, 40))])
    more = s.next_probe()
    assert more is not None and (more.load, more.requests, more.extends) == (4.0, 6, True)
    probe = s.observe(
        4.0, 1, [rate_record(1, 4.0, i / 4, 0.0, v) for i, v in enumerate((21, 26, 28, 32, 36, 41))]
    )
    assert probe.rungs == [0, 1] and probe.by_point and probe.verdict == PASS  # median 28.5 <= 30
    nxt = s.next_probe()
    assert nxt is not None and (nxt.load, nxt.extends) == (8.0, False)  # doubling resumes


def test_rate_probe_ttft_and_e2el_count_the_wait_for_a_client_slot():
    cfg, slo = RATE_CFG, SloConfig(ttft_ms=100.0, tpot_ms=1000.0, e2el_ms=10_000.0)
    waited = [rate_record(0, 1.0, float(i), 0.2, 10.0) for i in range(10)]  # 200 ms in the queue
    by_key = {c.key: c for c in judge(waited, cfg, slo)}
    assert by_key["ttft_ms"].point == pytest.approx(220.0) and by_key["ttft_ms"].verdict == FAIL
    assert by_key["tpot_ms"].point == pytest.approx(10.0)  # decode time: no queue in it
    assert by_key["e2el_ms"].point == pytest.approx(200.0 + 20.0 + 10.0 * (TOKENS - 1))


def test_client_limited_when_an_arrival_finds_every_slot_busy():
    # each request lasts 330 ms; arrivals 100 ms apart: 4 in flight at once
    spaced = [rate_record(0, 10.0, i * 0.1, 0.0, 10.0, slots=8) for i in range(10)]
    assert not client_limited(spaced)
    tight = [rate_record(0, 10.0, i * 0.1, 0.0, 10.0, slots=3) for i in range(10)]
    assert client_limited(tight)
    s = CapacitySearch(RATE_CFG, SloConfig(ttft_ms=1.0))
    s.next_probe()
    probe = s.observe(1.0, 0, tight)
    assert probe.client_limited and probe.verdict == FAIL
    assert s.next_probe() is None and "raise max_concurrency" in s.reason
    result = s.result()
    assert not result.complete and result.binding is None  # the client's failure binds no SLO


def test_itl_slo_judges_the_pooled_inter_token_latencies():
    recs = []
    for i in range(20):
        rec = dataclasses.replace(
            record(0, 4, 10.0), chunk_times=[0.02 + 0.001 * sum(range(k + 1)) * (1 + i % 2) for k in range(5)]
        )
        recs.append(rec)
    pooled = sorted(
        g
        for r in recs
        for g in ((b - a) * 1000 for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False))
    )
    (itl,) = [
        c for c in judge(recs, CapacityConfig(percentile=90.0), SloConfig(itl_ms=5.0)) if c.key == "itl_ms"
    ]
    assert itl.point == pytest.approx(percentile(pooled, 90.0)) and len(pooled) == 80
    assert itl.lower <= itl.point <= itl.upper and itl.verdict == FAIL  # p90 is 8 ms


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"capacity": {"variable": "users"}}, "'capacity.variable' must be one of"),
        ({"capacity": {"start": 1.5}}, "'capacity.start' must be a whole user count"),
        (
            {"capacity": {"variable": "rate", "start": 8, "max_rate": 4}},
            "'capacity.max_rate' >= 'capacity.start'",
        ),
        ({"capacity": {"rate_resolution": 0}}, "'capacity.rate_resolution' must be a number > 0"),
        ({"slo": {"itl_ms": -1}}, "'slo.itl_ms' must be a number in (0, 86400000]"),
    ],
)
def test_bad_rate_capacity_keys(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, source="x.yaml")
    assert str(err.value).startswith("x.yaml: ") and message in str(err.value)
    assert parse_config({"mode": "capacity", "slo": {"itl_ms": 5}}, source="x").slo.itl_ms == 5.0


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
