"""End to end: `precision: 2` against the simulator, held to its truth log.

- 20 reruns of a rung of 4 users: two sweeps at once (seeds 1 and 2, each its own simulator),
  each one Locust process driving 10 rungs of 4 users one after the other (each rung draws its
  own prompts; its interval is its own). Each rung runs until the master finds its agg tok/s
  known to +-2 %, each one's line in Locust's log says how many requests it took, and the
  interval the table states (`±%` of `agg_tok/s`) must contain the truth's steady rate in at
  least 17 of the 20: the tokens of the simulator's steps that ended inside the rungs' windows
  over the windows' seconds, pooled over the 20 (the long-run rate of 4 held users, which a
  rerun's 95 % interval claims to hold). That counts the steps at batch 3 while a user turns
  around between two requests (about two steps a request): they are part of holding 4 users,
  and the rate of the steps at batch 4 alone, 1333.3 tok/s here, is 1-2 % above any rung a
  closed-loop client runs (docs/measurements.md).
- `--processes 2`: the master ends a rung whose users run in two processes.

Fast settings: steps of 2-3 ms, 128-token outputs, no speculation (one token per sequence per
step), no warm-up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.twin_runs import sweep

from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SWEEPS, RUNGS, USERS, PCT = 2, 10, 4, 2.0
LADDER: dict[str, Any] = {
    "rungs": [USERS] * RUNGS,
    "prompt_tokens": 16,
    "max_tokens": 128,
    "precision": PCT,
    "precision_max_s": 20,
    "warmup_requests": 0,
}
SIM = {"base_ms": 2.0, "per_seq_ms": 0.25, "accept_len": 1}
ENDED = re.compile(
    r"rung\d+ c4: (?:agg_tok_s \+-[\d.]+ % after \d+ requests: it ends|capped at .*? \d+ requests)"
)


def reruns(folder: Path, seed: int) -> list[tuple[float, float | None, float, float]]:
    """One sweep's rungs: each one's agg tok/s and +- %, the tokens of the truth's steps that ended
    inside its window and the window's seconds."""
    run = sweep(folder, SIM, {**LADDER, "seed": seed})
    assert len(ENDED.findall(run.log.read_text())) == RUNGS, run.log.read_text()[-3000:]  # how many requests
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(run.prefix), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.truth_log is not None
    _, steps = load_truth(run.truth_log)
    out = []
    for row in json.loads(table.stdout):
        start, end = row["window"]["start"], row["window"]["end"]
        tokens = sum(s["tokens"] for s in steps if start <= s["t_end"] <= end)
        pct = (row["interval"] or {}).get("agg_tok_s_pct")
        out.append((row["agg_tok_s"], pct, tokens, end - start))
    return out


def test_precision_2_contains_the_truths_steady_rate_in_17_of_20_reruns(tmp_path: Path) -> None:
    with ThreadPoolExecutor(SWEEPS) as pool:
        runs = list(pool.map(lambda seed: reruns(tmp_path / f"seed{seed}", seed), range(1, SWEEPS + 1)))
    rungs = [rung for run in runs for rung in run]
    assert len(rungs) == SWEEPS * RUNGS
    steady = sum(r[2] for r in rungs) / sum(r[3] for r in rungs)
    inside = [pct is not None and abs(agg - steady) <= agg * pct / 100.0 for agg, pct, _, _ in rungs]
    assert sum(inside) >= 17, (steady, [(agg, pct) for agg, pct, _, _ in rungs])


def test_the_master_ends_a_rung_whose_users_run_in_two_processes(tmp_path: Path) -> None:
    """`--processes 2`: the records reach the master from both workers, the master ends the rung,
    and every user of both stops: the rung ends with at most one request in flight a user past
    the count the log gives, far under its caps."""
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump({**LADDER, "rungs": [USERS]}))
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
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(run.prefix)],
        capture_output=True,
        text=True,
        check=True,
    )
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:3] == ["conc", "agg_tok/s", "±%"] and float(row.split()[2]) <= PCT
    assert "not reached" not in table.stdout  # every rung reached it: no note
    workers = {json.loads(line)["worker"] for line in (run.prefix.parent / "run_records.jsonl").open()}
    assert len(workers) == 2  # both processes' users sent, and both stopped


def test_a_rung_with_no_count_and_no_duration_is_held_to_the_default_precision(tmp_path: Path) -> None:
    """Held concurrency is the default: a ladder without `requests_per_user`, `duration` or
    `precision` holds its users until agg tok/s is known to +-5 % (DEFAULT_PRECISION), each user
    sending again as soon as its request ends; with `requests_per_user` the rung is the seed's
    count-based one."""
    held = {k: v for k, v in LADDER.items() if k != "precision"} | {"rungs": [USERS]}
    run = sweep(tmp_path / "held", SIM, held)
    log = run.log.read_text()
    ends = r"rung01 c4: agg_tok_s \+-([\d.]+) % after (\d+) requests: it ends \(precision \+-5 %"
    ended = re.search(ends, log)
    assert ended is not None and float(ended.group(1)) <= 5.0, log[-3000:]
    assert int(ended.group(2)) >= 10 * USERS  # ten slices, each at least a request long
    counted = sweep(tmp_path / "counted", SIM, held | {"requests_per_user": 3})
    records = [json.loads(line) for line in (counted.prefix.parent / "run_records.jsonl").open()]
    assert len([r for r in records if r["phase"] == "measure"]) == 3 * USERS
    assert "it ends" not in counted.log.read_text()
