"""A run whose users are lost mid-rung (a worker process dies) still stops by itself, keeps the
finished rungs and marks the interrupted one partial, instead of waiting for them forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from fixtures.paths import REPO

from llmload.analysis.run.postprocess import load_run
from llmload.core import exit_codes
from llmload.runner.sweep_run import LOCUSTFILES, locust_command
from llmload.servers.simulator import SimulatorProcess

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def stage_started(run_file: Path, name: str) -> bool:
    try:
        stages = json.loads(run_file.read_text())["stages"]
    except (OSError, ValueError):
        return False
    return any(s["name"] == name and s["started"] <= time.time() for s in stages)


def kill_a_worker_during(tmp_path: Path, ladder_text: str, stage: str) -> tuple[int, float, Path]:
    """A run of `ladder_text` with `--processes 2` against the simulator (200-token requests of
    about 4 s) whose first worker is killed (SIGKILL) a second into `stage`: its exit code, the
    seconds from the kill to its exit, and its prefix."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(ladder_text)
    prefix = tmp_path / "run"
    with SimulatorProcess(log_path=tmp_path / "sim.log", accept_len=1, base_ms=20, per_seq_ms=1) as sim:
        extra = ["--ladder", str(ladder), "--processes", "2"]  # locust_command picks a free master port
        cmd = locust_command(sim.url, prefix, LOCUSTFILES["completions"], extra)
        with (tmp_path / "locust.log").open("wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            run_file = Path(f"{prefix}_run.json")
            assert wait_for(lambda: stage_started(run_file, stage), 60), f"{stage} never started"
            time.sleep(1.0)  # the rung's requests (200 tokens at ~20 ms a token) are in flight
            workers = psutil.Process(proc.pid).children()
            assert len(workers) == 2
            os.kill(workers[0].pid, signal.SIGKILL)
            killed = time.monotonic()
            returncode = proc.wait(timeout=120)  # timeouts.total + the stall margin + shutdown
            took = time.monotonic() - killed
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return returncode, took, prefix


def test_a_dead_worker_does_not_hang_the_run(tmp_path):
    """A count-based rung: the dead worker's users never report, the rung stalls."""
    ladder = (
        "rungs: [2, 4]\nrequests_per_user: 1\nmax_tokens: 200\nwarmup_requests: 0\ntimeouts: {total: 5}\n"
    )
    returncode, _, prefix = kill_a_worker_during(tmp_path, ladder, "rung02 c4")
    result = load_run(prefix)
    first, second = result.rows
    assert (first.conc, first.requests, first.tokens, first.partial) == (2, 2, 400, False)
    assert second.conc == 4 and second.partial  # the interrupted rung is marked, not passed off as whole
    assert returncode != 0


def test_a_dead_worker_stops_a_held_rung_at_once(tmp_path):
    """A held rung (the default): the other worker's users would keep it going until its
    precision, measuring half its users under its name; Locust's master marks the dead worker
    missing (no heartbeat for 3 s) and the run stops there, the rung partial, exit 4."""
    ladder = "rungs: [4]\nmax_tokens: 200\nwarmup_requests: 0\ntimeouts: {total: 5}\n"
    returncode, took, prefix = kill_a_worker_during(tmp_path, ladder, "rung01 c4")
    assert returncode == exit_codes.INTERRUPTED
    assert took < 30  # the heartbeat's few seconds and the shutdown, not the rung's 120 s cap
    result = load_run(prefix)
    (row,) = result.rows
    assert row.conc == 4 and row.partial
    errors = json.loads(Path(f"{prefix}_run.json").read_text())["errors"]
    assert [e["kind"] for e in errors if e["kind"] == "lost_worker"] == ["lost_worker"]
