"""Crash safety: a real `locust` process stopped by SIGINT or SIGTERM in the middle of its second
rung still leaves the records, Locust's CSVs and the run file, from which `sweep_table.py` prints
the finished rung in full and the interrupted one marked partial. Requests in flight when the
process stops have no record (their users are stopped first, so Locust does not count them either);
every request finished before has one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.analysis.run.locust_csv import read_stats_csv
from llmload.core import exit_codes
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import LOCUSTFILES, locust_command
from llmload.servers.simulator import SimulatorProcess
from llmload.sim.truth import load_truth

RUNGS = (2, 3)
REQUESTS_PER_USER = 3
WAIT_S = 60.0


def wait_for(condition, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert proc.poll() is None, f"locust exited early ({proc.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def second_rung_has_records(path: Path) -> bool:
    return path.exists() and any(r.rung == 1 for r in read_records(path)[0])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_killed_mid_rung_keeps_the_finished_rungs(tmp_path, sig):
    prefix = tmp_path / "run"
    records = Path(f"{prefix}_records.jsonl")
    args = ["--rungs", ",".join(map(str, RUNGS)), "--requests-per-user", str(REQUESTS_PER_USER)]
    args += ["--max-tokens", "40", "--warmup-requests", "0"]
    # one token per 20 ms step: each request ~0.8 s, so a rung lasts ~2.4 s
    sim = SimulatorProcess(
        truth_log=tmp_path / "truth.jsonl",
        log_path=tmp_path / "sim.log",
        accept_len=1,
        base_ms=20,
        per_seq_ms=0,
    )
    with sim, (tmp_path / "locust.log").open("wb") as log:
        cmd = locust_command(sim.url, prefix, LOCUSTFILES["completions"], args)
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: second_rung_has_records(records), "a record of the second rung", proc)
            t_signal = time.time()
            proc.send_signal(sig)
            proc.wait(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = (tmp_path / "locust.log").read_text()
    assert "Traceback" not in output, output[-3000:]
    assert proc.returncode == exit_codes.INTERRUPTED  # a stopped run never looks like a success

    recs, skipped = read_records(records)
    assert not skipped
    truth, _ = load_truth(tmp_path / "truth.jsonl")
    assert {r.request_id for r in recs} <= set(truth)
    calibration, _ = read_records(Path(f"{prefix}_calibration.jsonl"))  # the per-chunk usage probe
    recorded = {r.request_id for r in recs + calibration}
    unrecorded = [t for tid, t in truth.items() if tid not in recorded]
    # only requests in flight when the signal came lack a record (even one whose last bytes the
    # server had sent, but the client had not read yet)
    assert all(t["last_token"] is None or t["last_token"] > t_signal - 1.0 for t in unrecorded)
    by_rung = {i: [r for r in recs if r.rung == i] for i in range(len(RUNGS))}
    assert len(by_rung[0]) == RUNGS[0] * REQUESTS_PER_USER
    assert 0 < len(by_rung[1]) < RUNGS[1] * REQUESTS_PER_USER
    assert all(r.ok for r in recs)

    info = json.loads(Path(f"{prefix}_run.json").read_text())
    assert not info["finished"]
    assert [s["finished"] is not None for s in info["stages"]] == [True, False]

    # Locust wrote its CSVs on the way out, with both rungs' entries
    stats = read_stats_csv(Path(f"{prefix}_stats.csv"))
    assert {e.rung: e.request_count for e in stats.rows} == {i: len(by_rung[i]) for i in by_rung}

    def sweep_table(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "scripts/sweep_table.py", str(prefix), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    rows = json.loads(sweep_table("--format", "json"))
    assert [(r["conc"], r["requests"], r["partial"]) for r in rows] == [
        (RUNGS[0], len(by_rung[0]), False),
        (RUNGS[1], len(by_rung[1]), True),
    ]
    assert rows[0]["tokens"] == 40 * len(by_rung[0])
    table = sweep_table()
    assert "! rung did not finish (partial): rung02 c3" in table
    assert "warning" not in table
