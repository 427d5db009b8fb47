"""The knee of the ladder (llmload.analysis.knee) against simulators whose knee is known by
construction: steps flat in batch (per_seq_ms 0, one token a step), so below the batch limit
every added user adds one user's rate, and past it none. With `max_num_seqs 6` and rungs 1-16 the
sweep states the knee at 6 +-1, beside the batch limit it measured, which the truth log's steps
hold (never more than 6 sequences a step), and runs every rung (a plateau is no fall); without a
limit in the range it says there is none. A simulator whose throughput falls past its limit
(`--waiting-ms`: over-saturation) stops the ladder early, in one line naming the rungs not run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures.paths import REPO

from llmload.sim.truth import load_truth

RUNGS = list(range(1, 17))
LADDER = "endpoint: completions\nrungs: {}\nrequests_per_user: 4\nmax_tokens: 16\nwarmup_requests: 0\n"
FLAT = {"base_ms": 10, "per_seq_ms": 0, "accept_len": 1, "max_draft": 0}


def sweep(tmp: Path, sim: dict[str, float], rungs: list[int] = RUNGS) -> tuple[list[str], list[dict], Path]:
    """`llmload sweep` on the ladder of `rungs` against a simulator of `sim`: the table's lines,
    the json rows (`llmload table --format json`) and the run folder."""
    tmp.mkdir()
    (tmp / "ladder.yaml").write_text(LADDER.format(rungs))
    flags = [arg for k, v in sim.items() for arg in ("--sim", f"{k}={v}")]
    run_dir = tmp / "run"
    cmd = [sys.executable, "-m", "llmload", "sweep", "--ladder", str(tmp / "ladder.yaml")]
    cmd += ["--run-dir", str(run_dir), *flags]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(run_dir / "run"), "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return proc.stdout.splitlines(), json.loads(table.stdout), run_dir


def test_a_batch_limit_of_6_is_the_knee(tmp_path):
    lines, rows, run_dir = sweep(tmp_path / "limited", FLAT | {"max_num_seqs": 6})
    _, steps = load_truth(run_dir / "sim_truth.jsonl")
    assert max(s["batch"] for s in steps) == 6  # the server's limit, as it ran
    knees = [line for line in lines if line.startswith("knee:")]
    assert len(knees) == 1, lines
    shown = "\n".join(lines)  # what the sweep printed, for a failure's message
    assert [r["conc"] for r in rows] == RUNGS and not [n for n in lines if "stopped early" in n], shown
    knee = rows[0]["knee"]
    assert 5 <= knee["conc"] <= 7, shown
    assert knee["low"] <= knee["conc"] <= knee["high"]
    assert knees[0].startswith(f"knee: conc {knee['conc']} [{knee['low']}, {knee['high']}] (95 %)")
    assert knee["batch_limit"] == 6 and "batch limit 6" in knees[0], shown
    assert knee["range"] == [1, 16]
    assert [r["knee"]["past"] for r in rows] == [r["conc"] > knee["conc"] for r in rows]


def test_a_server_that_scales_to_the_top_rung_has_no_knee(tmp_path):
    lines, rows, run_dir = sweep(tmp_path / "linear", FLAT)
    _, steps = load_truth(run_dir / "sim_truth.jsonl")
    assert max(s["batch"] for s in steps) == 16  # every user in one batch: the curve is a line
    knees = [line for line in lines if line.startswith("knee:")]
    assert knees == [knees[0]] and knees[0].startswith("knee: none in the range conc 1-16"), lines
    assert rows[0]["knee"]["conc"] is None and not any(r["knee"]["past"] for r in rows)


OVER = FLAT | {"max_num_seqs": 4, "waiting_ms": 8}  # each waiting request slows every step 8 ms
OVER_RUNGS = [2, 4, 6, 8, 10, 12]


def test_an_over_saturated_server_stops_the_ladder_early(tmp_path):
    """Past 4 users each step carries the waiting requests (the truth log's steps last base_ms +
    waiting_ms x waiting): the server's own rate falls rung after rung, the sweep stops after two
    falls, says so in one line naming the rungs not run, and marks them not run."""
    lines, rows, run_dir = sweep(tmp_path / "over", OVER, OVER_RUNGS)
    _, steps = load_truth(run_dir / "sim_truth.jsonl")
    for s in steps:  # the mode as the simulator ran it
        expected = (OVER["base_ms"] + OVER["waiting_ms"] * s.get("waiting", 0)) / 1000.0
        assert abs((s["t_end"] - s["t_start"]) - expected) < 1e-6
    run = [r for r in rows if not r.get("not_run")]
    assert [r["conc"] for r in run] == [2, 4, 6, 8]
    assert [r["conc"] for r in rows if r.get("not_run")] == [10, 12]
    # the truth's rate over each rung's window falls past 4 users, beyond the rule's 10 % each rung
    truth = []
    for r in run:
        start, end = r["window"]["start"], r["window"]["end"]
        tokens = sum(s["tokens"] for s in steps if start <= s["t_end"] <= end)
        truth.append(tokens / (end - start))
    assert truth[2] < 0.9 * truth[1] and truth[3] < 0.9 * truth[2], truth
    stopped = [line for line in lines if line.startswith("the ladder stopped early")]
    assert len(stopped) == 1, lines
    assert "over-saturated" in stopped[0] and stopped[0].count("not run: rung05 c10, rung06 c12") == 1
    info = json.loads((run_dir / "run_run.json").read_text())
    assert info["stopped_early"] == stopped[0] and info["finished"] is True
