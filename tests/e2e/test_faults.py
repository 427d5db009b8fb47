"""Fault matrix: real `locust` runs against the simulator with each fault kind at 15-25 % of the
requests. Every request the simulator saw has exactly one record, each record's outcome is what
the simulator's truth log says it injected (mapped once, in `llmload.sim.faults.CLIENT_OUTCOME`),
completed requests carry exactly the tokens the server sent, failed requests' tokens are only
reported as partial, Locust's stats and failures CSVs agree, and every rung runs to the end.

Several kinds share one run: the truth log names each request's fault, so they stay separable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.analysis.run.locust_csv import cross_check, failure_kind, read_failures_csv
from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.analysis.run.sweep_rows import group_rungs
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.sim.faults import CLIENT_OUTCOME, FAULT_KINDS
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

MAX_TOKENS = 16
RUNGS = [3, 3]
REQUESTS_PER_USER = 8
FIRST_TOKEN_TIMEOUT_S = 0.6
SIM_DROP_AFTER = 8  # the simulator's default --drop-after
# fast steps, one token per chunk (so a broken stream's chunk count is its token count)
SIM = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.5, "stall_s": 3, "slow_headers_s": 0.2, "fault_seed": 7}
GROUPS = {
    "http": ({"http_500": 0.15, "http_503": 0.15, "http_429": 0.15}, True),
    "connection": ({"reset": 0.2, "drop": 0.2, "malformed": 0.2}, True),
    "protocol": ({"wrong_content_type": 0.2, "no_done": 0.2, "no_usage": 0.2}, True),
    "slow": ({"stall": 0.25, "slow_headers": 0.25, "bunched": 0.25}, True),
    "not-streamed": ({"drop": 0.2, "malformed": 0.2, "stall": 0.2, "http_503": 0.2}, False),
}


def test_the_matrix_covers_every_fault_kind():
    covered = {kind for faults, _ in GROUPS.values() for kind in faults}
    assert covered == set(FAULT_KINDS) == set(CLIENT_OUTCOME)


def fault_run(tmp_path: Path, faults: dict[str, float], stream: bool) -> SweepRun:
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(
        f"rungs: {RUNGS}\nrequests_per_user: {REQUESTS_PER_USER}\nwarmup_requests: 0\n"
        f"max_tokens: {MAX_TOKENS}\nstream: {str(stream).lower()}\n"
        f"timeouts: {{connect: 2, first_token: {FIRST_TOKEN_TIMEOUT_S}, total: 20}}\n"
    )
    return run_sweep(
        run_dir=tmp_path / "run",
        locust_args=["--ladder", str(ladder)],
        sim={**SIM, "faults": faults},
        timeout=120,
    )


@pytest.mark.parametrize("group", list(GROUPS))
def test_faults_are_counted_by_kind_and_tokens_stay_exact(tmp_path, group):
    faults, stream = GROUPS[group]
    run = fault_run(tmp_path, faults, stream)
    truth, _ = load_truth(run.truth_log)
    records, skipped = read_records(run.records)
    assert not skipped

    # no lost and no extra record; no retries (one request per record), the run went to the end
    assert sorted(r.request_id for r in records) == sorted(
        k for k in truth if not k.startswith("calibration-")
    )
    assert len(records) == sum(RUNGS) * REQUESTS_PER_USER
    # the per-chunk usage probe before the ladder drew a fault too: it is no rung's request
    injected = Counter(
        t["fault"] for k, t in truth.items() if t["fault"] and not k.startswith("calibration-")
    )
    assert set(injected) == set(faults) and min(injected.values()) >= 3, injected
    expected_failures = Counter(
        CLIENT_OUTCOME[f] for f, n in injected.items() for _ in range(n) if CLIENT_OUTCOME[f] != "ok"
    )
    assert run.returncode == (1 if expected_failures else 0), run.log.read_text()[-2000:]
    info = json.loads(Path(f"{run.prefix}_run.json").read_text())
    assert info["finished"] and all(s["finished"] for s in info["stages"])

    for rec in records:
        t = truth[rec.request_id]
        assert rec.outcome == (CLIENT_OUTCOME[t["fault"]] if t["fault"] else "ok"), (rec, t)
        if rec.ok:  # exactly the tokens the server generated and sent
            assert rec.output_tokens == t["completion_tokens"] == t["tokens_sent"] == MAX_TOKENS
            assert rec.tokens_estimated == (t["fault"] == "no_usage")
        else:  # what arrived before the failure, never more than was sent
            assert rec.output_tokens <= t["tokens_sent"]
            if t["fault"] == "drop" and stream:
                assert rec.output_tokens == t["tokens_sent"] == SIM_DROP_AFTER

    rungs = group_rungs(records)
    rows = sweep_rows(tally_rungs(records))
    assert sum((Counter(r.failures_by_kind) for r in rows), Counter()) == expected_failures
    for rung, row in zip(rungs, rows, strict=True):
        ok = [truth[r.request_id] for r in rung.records if r.ok]
        assert row.tokens == sum(t["completion_tokens"] for t in ok)
        assert row.partial_tokens == sum(r.output_tokens for r in rung.failed)
        # completed requests only: the tokens of the rung's window (its steady part, docs/window.md)
        # over its seconds, and the window's ramp, inside and drain tokens are the row's tokens
        window = row.window or {}
        assert row.wall_s == pytest.approx(window["seconds"])
        assert row.agg_tok_s == pytest.approx(window["tokens"] / row.wall_s)
        split = window["ramp_tokens"] + window["tokens"] + window["drain_tokens"]
        assert split == pytest.approx(row.tokens, abs=1e-6 * row.tokens)

    # Locust's own CSVs: the same requests, failures by kind and tokens
    assert cross_check(run.prefix, tally_rungs(records)) == []
    kinds = set(expected_failures)
    locust_failures = Counter()
    for f in read_failures_csv(Path(f"{run.prefix}_failures.csv")).rows:
        locust_failures[failure_kind(f.error, kinds)] += f.occurrences
    assert locust_failures == expected_failures

    # the default table says what failed and that the partial tokens are not counted
    table = subprocess.run(
        [sys.executable, "scripts/sweep_table.py", str(run.prefix)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for row in rows:
        if row.failures:
            assert f"{row.failures} of {row.requests} requests failed" in table
            assert f"their {row.partial_tokens} partial tokens are not counted" in table
    assert "warning" not in table


def test_configured_retries_in_a_real_run(tmp_path):
    """retries: {max: 2, on_status: [429]}: every attempt is a record (and a Locust request), the rung
    waits for the retries, and the completed requests' tokens still equal the truth."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(
        "rungs: [2]\nrequests_per_user: 4\nwarmup_requests: 0\nmax_tokens: 16\n"
        "retries: {max: 2, on_status: [429], backoff_s: 0.1}\n"
    )
    run = run_sweep(
        run_dir=tmp_path / "run",
        locust_args=["--ladder", str(ladder)],
        sim={**SIM, "faults": {"http_429": 0.3}},
        timeout=120,
    )
    truth, _ = load_truth(run.truth_log)
    records, _ = read_records(run.records)
    assert sorted(r.request_id for r in records) == sorted(
        k for k in truth if not k.startswith("calibration-")
    )
    retried = [r for r in records if "-retry" in r.request_id]
    assert retried and len(records) == 8 + len(retried)
    first_attempts = [r for r in records if "-retry" not in r.request_id]
    assert len(first_attempts) == 8
    for rec in records:
        t = truth[rec.request_id]
        assert rec.outcome == ("http_429" if t["fault"] else "ok")
        if rec.ok:
            assert rec.output_tokens == t["completion_tokens"] == 16
    assert cross_check(run.prefix, tally_rungs(records)) == []
    assert json.loads(Path(f"{run.prefix}_run.json").read_text())["finished"]
