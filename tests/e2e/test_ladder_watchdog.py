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


def test_a_dead_worker_does_not_hang_the_run(tmp_path):
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(
        "rungs: [2, 4]\nrequests_per_user: 1\nmax_tokens: 200\nwarmup_requests: 0\ntimeouts: {total: 5}\n"
    )
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
            assert wait_for(lambda: stage_started(run_file, "rung02 c4"), 60), "rung02 never started"
            time.sleep(1.0)  # the rung's requests (200 tokens at ~20 ms a token) are in flight
            workers = psutil.Process(proc.pid).children()
            assert len(workers) == 2
            os.kill(workers[0].pid, signal.SIGKILL)
            returncode = proc.wait(timeout=120)  # timeouts.total + the stall margin + shutdown
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    result = load_run(prefix)
    first, second = result.rows
    assert (first.conc, first.requests, first.tokens, first.partial) == (2, 2, 400, False)
    assert second.conc == 4 and second.partial  # the interrupted rung is marked, not passed off as whole
    assert returncode != 0
