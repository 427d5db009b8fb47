"""The step and batch measured per rung (llmload.analysis.run.steps) against an engine whose every
step is known: a continuous batch of at most `limit` sequences, steps of base + per_seq x batch
ms (plus prefill), each sequence 1 + Binomial(7, p) tokens a step drawn per step, closed-loop
users; the ground truth is the engine's own list of steps (as the simulator's truth log), never
the code under test. Also what `llmload budget` and the twin's decision make of them."""

from __future__ import annotations

import math
import random
import re
import subprocess
import sys
from dataclasses import replace
from statistics import median

import pytest
from fixtures.paths import REPO

from llmload.analysis import compare
from llmload.analysis.budget import CostModel, SweepPoint, budget_rows
from llmload.analysis.run.rung_tally import tally_records
from llmload.analysis.run.steps import RungSteps, measure_rung, stepped
from llmload.analysis.run.sweep_rows import Rung
from llmload.analysis.twin.decision import NOT_WORTH, UNDECIDED, WORTH, RungDecision, decide
from llmload.analysis.twin.fit import TwinParams
from llmload.analysis.twin.gains import run_decision
from llmload.analysis.twin.replay import (
    INTERVAL_SPREADS,
    Change,
    TwinRow,
    bootstrap_spreads,
    prediction_intervals,
    step_at,
)
from llmload.cli.twin_args import EXITS
from llmload.core.config import ConfigError, parse_rungs, rungs_flag
from llmload.core.exit_codes import NOT_WORTH_IT
from llmload.core.exit_codes import UNDECIDED as UNDECIDED_EXIT
from llmload.core.files.records import RequestRecord
from llmload.core.files.run_files import names_a_table


def engine(
    users: int,
    *,
    base: float = 12.0,
    per_seq: float = 3.0,
    accept_len: float = 2.0,
    limit: int = 6,
    tokens: int = 48,
    requests_per_user: int = 2,
    prefill_ms: float = 2.0,
    seed: int = 3,
) -> tuple[list[RequestRecord], list[float]]:
    """(records of one rung, every step's duration ms): users send again as soon as their
    request ends; FIFO admission at a step's start."""
    rng = random.Random(seed)
    p = (accept_len - 1) / 7
    now = 1000.0
    queue = [(u, now) for u in range(users)]
    left = {u: requests_per_user for u in range(users)}
    running: dict[int, dict] = {}
    records, steps = [], []
    while queue or running:
        admitted = 0
        while queue and len(running) < limit:
            u, sent = queue.pop(0)
            running[u] = {"sent": sent, "times": [], "tokens": 0}
            admitted += 1
        ms = base + per_seq * len(running) + prefill_ms * admitted
        steps.append(ms)
        now += ms / 1000.0
        for u in list(running):
            r = running[u]
            r["tokens"] += min(1 + sum(rng.random() < p for _ in range(7)), tokens - r["tokens"])
            r["times"].append(now)
            if r["tokens"] >= tokens:
                del running[u]
                records.append(
                    RequestRecord(
                        request_id=f"{u}-{left[u]}",
                        rung=0,
                        users=users,
                        phase="measure",
                        endpoint="completions",
                        stream=True,
                        max_tokens=tokens,
                        t_start=r["sent"],
                        t_end=now,
                        t_first=r["times"][0],
                        output_tokens=tokens,
                        chunks=len(r["times"]),
                        chunk_times=[t - r["sent"] for t in r["times"]],
                    )
                )
                left[u] -= 1
                if left[u]:
                    queue.append((u, now + 0.0005))
    return records, steps


@pytest.mark.parametrize("users", [1, 4, 6, 8, 12])
def test_the_step_batch_and_queue_are_the_engines(users):
    """Within 10 % of the engine's median step at every rung, past its batch limit (6) too; the
    batch it ran; requests waited only past the limit; tokens a step per sequence near the
    acceptance (the capped last step reads a little low)."""
    records, truth = engine(users)
    s = measure_rung(0, users, records)
    assert s.step_ms == pytest.approx(median(truth), rel=0.10)
    assert s.batch == min(users, 6) and s.decoding_max == min(users, 6)
    assert (s.waited > 0) == (users > 6)
    assert 1.7 <= s.tokens_per_step <= 2.05
    tally = tally_records(0, users, records)
    assert tally.row().waited == s.waited


def test_several_chunks_a_step_are_one_step():
    """A server that sends each speculative token in its own chunk (llama.cpp, TGI): the step is
    still the engine's, the tokens a step still the acceptance's."""
    records, truth = engine(4, accept_len=3.0, limit=8)
    split = []
    for rec in records:
        times = [t + k * 0.0002 for t in rec.chunk_times for k in range(3)]
        split.append(RequestRecord(**{**rec.to_dict(), "chunk_times": times, "chunks": len(times)}))
    whole, parts = measure_rung(0, 4, records), measure_rung(0, 4, split)
    assert parts.step_ms == pytest.approx(whole.step_ms, rel=0.02)
    assert parts.chunks_per_step == pytest.approx(3.0)
    assert parts.tokens_per_step == pytest.approx(whole.tokens_per_step)


def test_budget_uses_the_measured_step_past_the_limit():
    """conc 12 over a limit of 6: the step is batch 6's, not 12 x acceptance / agg tok/s."""
    records, truth = engine(12)
    steps = measure_rung(0, 12, records)
    (row,) = budget_rows([SweepPoint(12, 500.0, 2.6, steps)], CostModel("c", constant_ms=5.0), None, None)
    assert row.measured and row.batch == 6
    assert row.step_ms == pytest.approx(median(truth), rel=0.10)
    assert row.gain_free == pytest.approx(row.step_ms / (row.step_ms - 5.0) - 1.0)


def test_a_component_larger_than_the_step_is_refused():
    records, _ = engine(4)
    point = SweepPoint(4, 300.0, None, measure_rung(0, 4, records))
    with pytest.raises(ConfigError, match="--saves-ms: 100 ms is not part of a"):
        budget_rows([point], CostModel("c", constant_ms=100.0), None, None, "--saves-ms")


SEED_CSV = "conc,agg_tok/s\n1,135.7\n4,318.0\n8,479.6\n10,516.2\n"


def llmload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmload", *args], capture_output=True, text=True, check=False, cwd=REPO
    )


def test_the_seeds_story_is_not_worth_it(tmp_path):
    """0.8 ms of an 87 ms step, 470x faster, at conc 10: not worth it, at most +0.92 % (exit 8)."""
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    done = llmload(
        "twin", str(seed), "--accept-len", "4.5", "--component-ms", "0.8", "--speedup", "470", "--at", "10"
    )
    assert done.returncode == NOT_WORTH_IT, done.stderr
    assert "not worth it: at most +0.92 % at conc 10" in done.stdout
    assert "0.92 % of a 87.2 ms step" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines() if not line.startswith("decision:")) <= 100
    table = llmload("twin", str(seed), "--accept-len", "4.5", "--saves-ms", "10")
    assert table.returncode == UNDECIDED_EXIT and "a table holds no records" in table.stdout


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["budget", "SEED", "--accept-len", "4.5", "--component-ms", "200", "--speedup", "2"],
            "--component-ms",
        ),
        (["budget", "SEED", "--accept-len", "4.5", "--saves-ms", "-1"], "--saves-ms"),
        (["budget", "SEED", "--accept-len", "4.5", "--saves-ms", "nan"], "--saves-ms"),
        (["budget", "SEED", "--accept-len", "4.5", "--component-ms", "1", "--speedup", "nan"], "--speedup"),
        (["twin", "SEED", "--accept-len", "4.5", "--saves-ms", "1", "--worth", "inf"], "--worth"),
        (["twin", "SEED", "--accept-len", "4.5", "--saves-ms", "1", "--at", "16"], "--at 16"),
        (["twin", "SEED", "--fit-only", "--step-scale", "0.76"], "--fit-only"),
    ],
)
def test_bad_decision_input_is_one_line_exit_2(tmp_path, argv, named):
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    done = llmload(*[str(seed) if a == "SEED" else a for a in argv])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and named in errors[0], done.stderr


def test_speedup_inf_is_the_component_free(tmp_path):
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    done = llmload("budget", str(seed), "--accept-len", "4.5", "--component-ms", "0.8", "--speedup", "inf")
    assert done.returncode == 0, done.stderr
    assert "gain_free_%" in done.stdout and "0.93" in done.stdout


def test_the_decision_against_the_threshold():
    worth = decide([RungDecision(8, 36.0, 10.0, 0.385, 0.36, 0.33, 0.39)], 0.1)
    assert worth.verdict == WORTH and worth.line.startswith("worth it at conc 8: +36.0 % [+33.0, +39.0]")
    straddle = decide([RungDecision(8, 36.0, 10.0, 0.385, 0.11, 0.08, 0.14)], 0.1)
    assert straddle.verdict == UNDECIDED and "holds the threshold" in straddle.line
    bounded = decide([RungDecision(10, 87.2, 0.8, 0.0092)], 0.05)
    assert bounded.verdict == NOT_WORTH and "at most +0.92 %" in bounded.line


@pytest.mark.parametrize(("users", "requests_per_user"), [(4, 4), (8, 2), (12, 2)])
def test_the_bootstrap_interval_holds_another_run(users, requests_per_user):
    """The bootstrap over a run's requests (`bootstrap_spreads`) against the truth of other runs:
    20 runs of the engine (acceptance 3 drawn per step, other seeds; limit 6, so 8 and 12 users
    queue), each figure of every other run inside each run's 95 % interval at least 75 % of the
    time. Measured (docs/measurements.md): 90-98 % at 4 users, 81-100 % at 8, 78-93 % at 12
    (past the limit the waiting and the others are resampled apart, and how many wait varies a
    little from run to run here); the twin's interval is never narrower than the replay's."""
    figures = {f.name: f for f in compare.FIGURES}
    runs = [engine(users, requests_per_user=requests_per_user, accept_len=3.0, seed=s)[0] for s in range(20)]
    values = [{k: figures[k].resampled(recs) for k in figures} for recs in runs]
    spreads = [
        bootstrap_spreads([Rung(0, users, recs)], resamples=300, seed=i)[0] for i, recs in enumerate(runs)
    ]
    for key in figures:
        inside = [
            spreads[a][key][0] <= math.log(values[b][key] / values[a][key]) <= spreads[a][key][1]
            for a in range(len(runs))
            for b in range(len(runs))
            if a != b
        ]
        assert sum(inside) / len(inside) >= 0.75, (key, sum(inside) / len(inside))


def test_a_rung_of_few_requests_has_no_bootstrap_and_the_wider_interval_is_kept():
    """Under MIN_REQUESTS completed requests, no bootstrap; the interval is the wider, each side,
    of the replay's and the bootstrap's."""
    few, _ = engine(2, requests_per_user=2)
    many, _ = engine(8, requests_per_user=2)
    spreads = bootstrap_spreads([Rung(0, 2, few), Rung(1, 8, many)], resamples=200)
    assert 0 not in spreads and set(spreads[1]) == {
        "agg_tok_s",
        "per_req_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
    }
    figures = {"agg_tok_s": 100.0, "per_req_tok_s": 50.0, "ttft_p50_ms": 400.0, "tpot_p50_ms": 20.0}
    assert 0 not in spreads and set(spreads[1]) == set(figures)
    replay = [TwinRow(0, 8, {k: v * 1.02 for k, v in figures.items()}, dict(figures))]  # 2 % off
    prediction = [TwinRow(0, 8, None, dict(figures)), TwinRow(1, 8, None, dict(figures))]
    boot = {1: {"agg_tok_s": (-0.30, 0.01), "tpot_p50_ms": (-0.001, 0.001)}}
    got = prediction_intervals(replay, prediction, TwinParams(10, 3, 0, 1, None), boot)
    replay_factor = math.exp(INTERVAL_SPREADS * math.log(1.02))
    assert got[0]["agg_tok_s"] == pytest.approx((100.0, 100.0 / replay_factor, 100.0 * replay_factor))
    assert got[1]["agg_tok_s"] == pytest.approx((100.0, 100.0 * math.exp(-0.30), 100.0 * replay_factor))
    assert got[1]["tpot_p50_ms"] == got[0]["tpot_p50_ms"]  # the replay's is wider on both sides


def test_one_record_filter_for_every_step_figure():
    """The step figures and the twin's fit read the same records (`stepped`): measured, completed,
    streamed, with a chunk time or more; a one-chunk request was in one step's batch."""
    records, _ = engine(4, tokens=1)  # one token, one chunk each
    one_chunk = records[0]
    assert len(one_chunk.chunk_times) == 1 and stepped(one_chunk)
    assert measure_rung(0, 4, records).streams == len(records)
    assert not stepped(replace(one_chunk, chunk_times=[], chunks=0))
    assert not stepped(replace(one_chunk, stream=False))
    assert not stepped(replace(one_chunk, phase="warmup"))


def test_twin_help_names_the_exit_codes_the_code_defines():
    """--help's exit codes are written from llmload.core.exit_codes (8 not worth it, 9 cannot tell)."""
    done = llmload("twin", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    for code, what in EXITS:
        assert f"{code} {what}" in text
    assert f"{NOT_WORTH_IT} with a change, not worth it" in text
    assert f"{UNDECIDED_EXIT} with a change, cannot tell" in text


def test_twin_and_sweep_read_rungs_with_one_parser(tmp_path):
    """--rungs of the twin is the sweep's parse and check, in the sweep's words."""
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    assert rungs_flag("8, 16,0.5") == [8, 16, 0.5] == parse_rungs("8, 16,0.5")
    for text, says in [("1,x", "expected comma-separated numbers like 1,4,8,10, got '1,x'"),
                       ("4,,8", "an empty item in '4,,8'"), ("0,4", "'rungs[0]'")]:  # fmt: skip
        with pytest.raises(ConfigError, match="--rungs: " + re.escape(says)):
            rungs_flag(text)
        done = llmload("twin", str(seed), "--rungs", text)
        assert done.returncode == 2 and f"argument --rungs: {says}" in done.stderr.replace("\n", " ")


def _steps(rung: int, conc: int, step_ms: float) -> RungSteps:
    return RungSteps(rung, conc, 10, step_ms, 1.0, float(conc), "streams", conc, 1.0, 0, step_mean_ms=step_ms)


def test_two_rungs_of_one_concurrency_keep_their_own_steps():
    """Steps are keyed by rung index: rungs 1 and 2 both at conc 4 do not collide; the decision at
    conc 4 reads its first measured rung's step, as the table's bound does."""
    steps = {0: _steps(0, 1, 20.0), 1: _steps(1, 4, 30.0), 2: _steps(2, 4, 40.0)}
    assert step_at(steps, 4) is steps[1] and step_at(steps, 8) is None
    change = Change(cost=CostModel(constant_ms=3.0), speedup=math.inf)
    measured = [TwinRow(i, s.conc, None, {}) for i, s in steps.items()]
    decision = run_decision(change, measured, None, {}, steps, True, [4], 0.05)  # type: ignore[arg-type]
    (rung,) = decision.rungs
    assert (rung.conc, rung.step_ms, rung.bound) == (4, 30.0, pytest.approx(30.0 / 27.0 - 1.0))


def test_one_decision_of_what_is_a_typed_in_table(tmp_path):
    """A file that is no .jsonl is a table (budget and twin alike); any .jsonl is a run's records."""
    table, records, named = tmp_path / "seed.csv", tmp_path / "run_records.jsonl", tmp_path / "other.jsonl"
    for path in (table, records, named):
        path.write_text(SEED_CSV)
    assert names_a_table(table) and names_a_table(str(table))
    assert not names_a_table(records) and not names_a_table(named)  # a records file named otherwise
    assert not names_a_table(tmp_path) and not names_a_table(tmp_path / "run")  # a folder, a prefix
    for command in (["budget", str(named), "--saves-ms", "1"], ["twin", str(named), "--saves-ms", "1"]):
        done = llmload(*command)  # read as a run's records, not parsed as a table
        assert done.returncode == 2 and "records" in done.stderr, done.stderr
        assert "conc" not in done.stderr and "sweep table" not in done.stderr  # no table's complaint
