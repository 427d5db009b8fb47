"""Compare: verdicts on hand-built runs whose true difference is known, and the acceptance runs:
real locust sweeps against the simulator, the same configuration twice (within noise at every
rung) and a slower decode step (per_seq_ms +20 %: regressed where it matters, at higher conc)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.noise import assert_planted_slowdown_caught, assert_within_noise
from fixtures.paths import REPO
from fixtures.runs import make_record

from llmload.analysis.compare import IMPROVED, NOISE, REGRESSED, TOO_FEW, WITHHELD, compare_runs
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import write_records
from llmload.core.files.run_files import RunFiles
from llmload.runner.sweep_run import run_sweep

SCRIPT = REPO / "scripts" / "compare.py"
TOKENS = 128


def write_run(path: Path, rungs: list[tuple[int, float, int]], *, jitter: float = 0.02, seed: int = 1) -> str:
    """A run whose rung i has n requests at conc users, each taking about `e2e` seconds
    (TTFT a tenth of it), with multiplicative jitter; returns its prefix."""
    rng = random.Random(seed)
    records, t = [], 1000.0
    for index, (users, e2e, n) in enumerate(rungs):
        for k in range(n):
            d = e2e * (1 + rng.uniform(-jitter, jitter))
            start = t + (k // users) * e2e * 1.1
            records.append(
                make_record(
                    start,
                    start + d,
                    TOKENS,
                    d / 10,
                    request_id=f"{index}-{k}",
                    rung=index,
                    users=users,
                    max_tokens=TOKENS,
                )
            )
        t += 100.0
    prefix = path / "run"
    path.mkdir(parents=True, exist_ok=True)
    write_records(Path(f"{prefix}_records.jsonl"), records)
    return str(prefix)


def verdicts(base: str, cand: str, **kw) -> list[str]:
    return [r.verdict for r in compare_runs(load_run(base), load_run(cand), **kw).rungs]


def test_identical_runs_are_within_noise(tmp_path):
    base = write_run(tmp_path / "a", [(1, 2.0, 8), (4, 3.0, 16)])
    cmp = compare_runs(load_run(base), load_run(base))
    assert [r.verdict for r in cmp.rungs] == [NOISE, NOISE]
    assert all(c.change == 0 and c.low <= 0 <= c.high for r in cmp.rungs for c in r.changes)


def test_a_slower_candidate_regresses_and_the_reverse_improves(tmp_path):
    base = write_run(tmp_path / "a", [(4, 3.0, 16), (8, 4.0, 32)])
    slow = write_run(tmp_path / "b", [(4, 3.6, 16), (8, 4.8, 32)], seed=2)  # 20 % slower
    cmp = compare_runs(load_run(base), load_run(slow))
    assert cmp.regressed
    for rung in cmp.rungs:
        assert rung.verdict == REGRESSED
        by = {c.figure: c for c in rung.changes}
        assert by["per_req_tok_s"].change == pytest.approx(1 / 1.2 - 1, abs=0.02)
        assert by["tpot_p50_ms"].change == pytest.approx(0.2, abs=0.02)
        assert all(c.verdict == REGRESSED for c in rung.changes if c.figure != "ttft_p50_ms")
        assert by["ttft_p50_ms"].verdict == NOISE  # a TTFT verdict needs repeated rungs
    assert verdicts(slow, base) == [IMPROVED, IMPROVED]


def test_a_small_but_certain_shift_needs_the_threshold(tmp_path):
    base = write_run(tmp_path / "a", [(4, 3.0, 40)], jitter=0.002)
    cand = write_run(tmp_path / "b", [(4, 3.06, 40)], jitter=0.002, seed=2)  # 2 % slower, tiny spread
    assert verdicts(base, cand) == [NOISE]  # interval excludes 0, but |change| < 5 %
    assert verdicts(base, cand, threshold=0.01) == [REGRESSED]


def test_repeated_rungs_widen_the_interval(tmp_path):
    # within a rung the requests agree to 0.2 %, but two repeats of conc 4 differ by 6 %
    base = write_run(tmp_path / "a", [(4, 3.0, 20), (4, 3.18, 20)], jitter=0.002)
    cand = write_run(tmp_path / "b", [(4, 3.09, 20), (4, 3.27, 20)], jitter=0.002, seed=2)  # 3 % slower
    assert verdicts(base, cand, threshold=0.01) == [NOISE, NOISE]
    single_base = write_run(tmp_path / "c", [(4, 3.0, 20)], jitter=0.002)
    single_cand = write_run(tmp_path / "d", [(4, 3.09, 20)], jitter=0.002, seed=2)
    assert verdicts(single_base, single_cand, threshold=0.01) == [REGRESSED]


def test_too_few_requests_give_no_interval(tmp_path):
    base = write_run(tmp_path / "a", [(1, 2.0, 1)])
    cand = write_run(tmp_path / "b", [(1, 4.0, 1)])  # twice as slow, but one request each
    cmp = compare_runs(load_run(base), load_run(cand))
    assert cmp.rungs[0].verdict == f"{TOO_FEW} (n=1)"
    assert all(c.low is None for c in cmp.rungs[0].changes)


def test_two_request_rungs_with_a_30_pct_change_are_not_called_noise(tmp_path):
    """Two requests a side, 30 % slower: no interval can be had, and the verdict says so with the
    change, never "within noise"; --fail-on-regression does not fail on it."""
    base = write_run(tmp_path / "a", [(1, 2.0, 2), (2, 2.0, 2)], jitter=0.01)
    cand = write_run(tmp_path / "b", [(1, 2.6, 2), (2, 2.6, 2)], jitter=0.01, seed=2)
    cmp = compare_runs(load_run(base), load_run(cand))
    assert [r.verdict for r in cmp.rungs] == [f"{TOO_FEW} (n=2)"] * 2
    agg = cmp.rungs[0].changes[0]
    assert agg.change == pytest.approx(1 / 1.3 - 1, abs=0.03)
    done = compare_cli(base, cand, "--fail-on-regression")
    assert done.returncode == 0, done.stdout
    assert "too few requests to judge (n=2): agg_tok_s -2" in done.stdout
    assert "within noise" not in done.stdout
    assert max(map(len, done.stdout.splitlines()[:4])) <= 100


def busy_health(prefix: str, start: float, end: float) -> None:
    """Health samples saying the machine was busy (its cores in use, the event loop late) while
    the generator idled, every second of [start, end] (llmload.analysis.run.health)."""
    lines = [
        {"t": t + 1.0, "worker": "local", "cpu": 3.0, "rss": 1, "lag_ms": 25.0}
        | {"machine_cpu": 100.0, "steal": 0.0, "load1": 6.0, "cores": 2}
        for t in range(int(start), int(end) + 1)
    ]
    Path(f"{prefix}_health.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_machine_busy_rungs_are_withheld_and_never_fail_a_gate(tmp_path):
    """A candidate 20 % slower whose rung the sweep flagged machine-busy: named, its verdict
    withheld in text and JSON, and --fail-on-regression exits 0; the unflagged rung still fails."""
    base = write_run(tmp_path / "a", [(4, 3.0, 16), (4, 3.0, 16)])
    slow = write_run(tmp_path / "b", [(4, 3.6, 16), (4, 3.6, 16)], seed=2)
    busy_health(slow, 1000.0, 1020.0)  # the first rung only (the second starts at 1100)
    cmp = compare_runs(load_run(base), load_run(slow))
    assert [r.verdict for r in cmp.rungs] == [WITHHELD, REGRESSED]
    assert cmp.rungs[0].judged == REGRESSED and "machine busy in the candidate" in cmp.rungs[0].withheld
    text = compare_cli(base, slow)
    assert "verdict withheld (machine busy in the candidate)" in text.stdout
    doc = json.loads(compare_cli(base, slow, "--format", "json").stdout)
    assert doc["rungs"][0]["withheld"] == "machine busy in the candidate"
    assert compare_cli(base, slow, "--fail-on-regression").returncode == 1  # the second rung
    busy_health(slow, 1000.0, 1120.0)  # both rungs busy: nothing judged, nothing fails
    assert compare_cli(base, slow, "--fail-on-regression").returncode == 0


def test_unmatched_rungs_are_listed(tmp_path):
    base = write_run(tmp_path / "a", [(1, 2.0, 8), (4, 3.0, 16)])
    cand = write_run(tmp_path / "b", [(1, 2.0, 8), (8, 3.0, 16)])
    cmp = compare_runs(load_run(base), load_run(cand))
    assert [r.conc for r in cmp.rungs] == [1]
    assert cmp.unmatched == ["rung02 c4 only in base", "rung02 c8 only in candidate"]


def compare_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_script_exit_codes(tmp_path):
    base = write_run(tmp_path / "a", [(4, 3.0, 16)])
    slow = write_run(tmp_path / "b", [(4, 3.6, 16)], seed=2)
    assert compare_cli(base, slow).returncode == 0
    failing = compare_cli(base, slow, "--fail-on-regression")
    assert failing.returncode == 1 and "regressed" in failing.stdout
    assert compare_cli(base, base, "--fail-on-regression").returncode == 0
    assert compare_cli(base, str(tmp_path / "missing")).returncode == 2


# --- acceptance: real runs against the simulator ---------------------------------------------

# Cheap but statistically useful: 3 requests per user (12 and 24 requests at conc 4 and 8),
# short outputs, one token per step and steps of 25-60 ms so timer jitter is a small share.
LOCUST_ARGS = ["--rungs", "1,4,8", "--max-tokens", "20", "--requests-per-user", "3", "--warmup-requests", "1"]
SIM = {"base_ms": 20, "per_seq_ms": 5, "accept_len": 1}


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    """Base, the same configuration again, and a step 20 % slower per sequence in the batch
    (per_seq_ms 5 -> 6: the step at conc 1 / 4 / 8 is 4 / 10 / 13 % longer)."""
    out = {}
    for name, sim in (("base", SIM), ("same", SIM), ("slow", {**SIM, "per_seq_ms": 6})):
        run = run_sweep(run_dir=tmp_path_factory.mktemp(name), locust_args=LOCUST_ARGS, sim=sim, timeout=180)
        assert run.returncode == 0, run.log.read_text()[-3000:]
        out[name] = load_run(run.prefix)
    return out


@pytest.mark.slow  # three real sweeps (~70 s): in make test, not make test-fast
def test_same_config_is_within_noise_at_every_rung(sim_runs, tmp_path):
    """Within noise at every rung compare can judge (conc 1's 3 requests give no interval), unless
    the health verdict marks the rung late (tests/fixtures/noise.py): under other load a rung was
    once called improved; and the same run slowed by a planted 20 % is called regressed."""
    cmp = compare_runs(sim_runs["base"], sim_runs["same"])
    assert [r.conc for r in cmp.rungs] == [1, 4, 8]
    sized = assert_within_noise(sim_runs["base"], sim_runs["same"])
    assert [cmp.rungs[i].conc for i in sized] == [4, 8]
    same_records = RunFiles(Path(sim_runs["same"].prefix)).records
    assert_planted_slowdown_caught(sim_runs["base"], same_records, tmp_path, "agg_tok_s", sized)
    assert cmp.rungs[0].judged == f"{TOO_FEW} (n=3)"  # conc 1: too few requests for an interval


@pytest.mark.slow  # three real sweeps (~70 s): in make test, not make test-fast
def test_slower_step_regresses_where_it_matters(sim_runs):
    cmp = compare_runs(sim_runs["base"], sim_runs["slow"])
    by_conc = {r.conc: r for r in cmp.rungs}
    for conc in (4, 8):
        assert by_conc[conc].judged == REGRESSED
        agg = next(c for c in by_conc[conc].changes if c.figure == "agg_tok_s")
        assert agg.verdict == REGRESSED and agg.high < 0
