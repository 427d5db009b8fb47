"""End to end: `precision: 2` against the simulator: the master ends a rung whose users run in two
processes. Fast settings: steps of 2-3 ms, 128-token outputs, no speculation (one token per
sequence per step), no warm-up."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmload.runner.sweep_run import run_sweep

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

USERS, PCT = 4, 2.0
LADDER: dict[str, Any] = {
    "rungs": [USERS],
    "prompt_tokens": 16,
    "max_tokens": 128,
    "precision": PCT,
    "precision_max_s": 20,
    "warmup_requests": 0,
}
SIM = {"base_ms": 2.0, "per_seq_ms": 0.25, "accept_len": 1}


def test_the_master_ends_a_rung_whose_users_run_in_two_processes(tmp_path: Path) -> None:
    """`--processes 2`: the records reach the master from both workers, the master ends the rung,
    and every user of both stops: the rung ends with at most one request in flight a user past
    the count the log gives, far under its caps."""
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(LADDER))
    run = run_sweep(
        run_dir=tmp_path / "run",
        locust_args=["--processes", "2", "--ladder", str(path)],
        sim=SIM,
        timeout=120,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    log = run.log.read_text()
    ended = re.search(r"rung01 c4: agg_tok_s \+-([\d.]+) % after (\d+) requests: it ends", log)
    assert ended is not None, log[-3000:]
    finished = re.search(r"rung01 c4 done: (\d+) requests", log)
    assert finished is not None, log[-3000:]
    done = int(finished.group(1))
    assert int(ended.group(2)) <= done <= int(ended.group(2)) + USERS + 2 * USERS  # in flight, then a tick
    assert done < 2000  # precision_max_requests
    workers = {json.loads(line)["worker"] for line in (run.prefix.parent / "run_records.jsonl").open()}
    assert len(workers) == 2  # both processes' users sent, and both stopped
