"""Locust's distributed mode gives the same sweep table as one process at the same load.

Three runs of the same ladder against fresh simulators: one process, `--processes 2`, and an
explicit `--master` with two `--worker` processes over loopback. Each is checked against the
simulator's truth log (tokens exact, rates within 1 %), against the single-process table (tokens
exact, agg tok/s within noise as `llmload compare` judges it: tests/fixtures/noise.py; a fixed
2 % failed on a loaded machine, 464.5 against 483.4 tok/s, and the same run slowed by a planted
20 % is called regressed), for the records of every worker merged into the master's one file,
and for the ladder advancing rung after rung on the master."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.fleet import RUN_TIMEOUT_S, run_master_and_workers
from fixtures.noise import assert_planted_slowdown_caught, assert_within_noise
from test_sweep_e2e import check_against_truth

from llmload.analysis.run.health import read_health
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.analysis.run.sweep_rows import group_rungs
from llmload.core.files.records import read_records
from llmload.core.files.run_files import RunFiles
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.sim.truth import load_truth

LADDER = [1, 4, 8, 10]
MAX_TOKENS = 128
ARGS = ["--max-tokens", str(MAX_TOKENS), "--requests-per-user", "1"]  # count-based: tokens comparable


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> SweepRun:
    run = run_sweep(run_dir=tmp_path_factory.mktemp("single"), locust_args=ARGS, timeout=RUN_TIMEOUT_S)
    check_against_truth(run, LADDER, MAX_TOKENS, per_user=1)
    return run


def check_same_table(run: SweepRun, single: SweepRun, planted: Path) -> None:
    """Tokens exact at every rung; agg tok/s within noise where compare can judge (rungs of at
    least 5 requests, not marked late by the health verdict), and a planted 20 % slowdown of
    this run caught there."""
    check_against_truth(run, LADDER, MAX_TOKENS, per_user=1)
    rows = sweep_rows(tally_rungs(read_records(run.records)[0]))
    reference = {r.conc: r for r in sweep_rows(tally_rungs(read_records(single.records)[0]))}
    for row in rows:
        assert row.tokens == reference[row.conc].tokens
    base = load_run(single.prefix)
    judged = assert_within_noise(base, load_run(run.prefix), figures=("agg_tok_s",))
    assert_planted_slowdown_caught(base, run.records, planted, "agg_tok_s", judged)


def check_merged_records(run: SweepRun, workers: int) -> None:
    """Every request the server saw has its record in the master's files (the ladder's from every
    worker, and the calibration file); the workers' health samples reached the master too."""
    truth, _ = load_truth(run.truth_log)
    records, skipped = read_records(run.records)
    assert not skipped
    calibration, _ = read_records(RunFiles(run.prefix).calibration)  # the master's per-chunk usage probe
    assert sorted(r.request_id for r in records + calibration) == sorted(truth)
    measured = [r for r in records if r.phase == "measure"]
    assert len({r.worker for r in measured}) == workers
    assert "local" not in {r.worker for r in measured}
    assert {s["worker"] for s in read_health(f"{run.prefix}_health.jsonl")} == {r.worker for r in records}
    # one run: every worker's records carry the master's run id, the one of its run file
    assert {r.run_id for r in records} == {json.loads(RunFiles(run.prefix).run.read_text())["run_id"]}


def check_ladder_advanced(run: SweepRun) -> None:
    """The master's run file: every rung finished, in order, each after the previous one, and
    each rung's records lie inside its own stage."""
    info = json.loads(Path(f"{run.prefix}_run.json").read_text())
    assert info["finished"] is True
    stages = [s for s in info["stages"] if s["rung"] >= 0]
    assert [s["users"] for s in stages] == LADDER
    assert [s["rung"] for s in stages] == list(range(len(LADDER)))
    for before, after in zip(stages, stages[1:], strict=False):
        assert before["finished"] <= after["started"]
    by_rung = {r.index: r for r in group_rungs(read_records(run.records)[0])}
    for s in stages:
        recs = by_rung[s["rung"]].records
        assert s["records"] == len(recs) == s["users"]
        assert min(r.t_start for r in recs) >= s["started"] - 0.05  # users start at start_at
        assert max(r.t_end for r in recs) <= s["finished"]


def test_single_process_ladder(single):
    check_ladder_advanced(single)


def test_two_local_processes_give_the_same_table(tmp_path, single):
    run = run_sweep(run_dir=tmp_path, locust_args=["--processes", "2", *ARGS], timeout=RUN_TIMEOUT_S)
    check_same_table(run, single, tmp_path / "planted")
    check_merged_records(run, workers=2)
    check_ladder_advanced(run)


def test_master_and_two_workers_give_the_same_table(tmp_path, single):
    run = run_master_and_workers(tmp_path, [None, None], ARGS)
    check_same_table(run, single, tmp_path / "planted")
    check_merged_records(run, workers=2)
    check_ladder_advanced(run)
