"""Quiet when right (issue 40): the README's first command, `make sweep` (`llmload sweep --ladder
config/sweep.yaml` against the simulator), prints the table and no note about late times or a
saturated generator, and that silence is true: against the simulator's truth log every chunk of
every request was timed within 1 ms of its write unless the record marks it, and then within its
mark. (The last token is read with the closing messages the server writes with it: its lateness
counts from when they were written, the truth log's `closed`.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures.paths import REPO

from llmload.core.files.records import read_records
from llmload.sim.truth import load_truth

EXACT_MS = 1.0  # the latency bar of the metrics tests
QUIET = ("may be late", "saturated")  # the notes a healthy run must not print


def test_make_sweep_prints_the_table_alone_and_its_times_are_true(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "llmload",
        "sweep",
        "--ladder",
        "config/sweep.yaml",
        "--run-dir",
        str(run_dir),
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [
        "conc",
        "agg_tok/s",
        "per_req_tok/s",
        "tokens",
        "wall_s",
        "ttft_p50_ms",
        "failures",
    ]
    assert [line.split()[0] for line in lines[1:5]] == ["1", "4", "8", "10"]
    notes = lines[5:]
    assert not [n for n in notes if any(word in n for word in QUIET)], proc.stdout
    busy = [n for n in notes if n.startswith("the machine was busy")]
    assert len(notes) == len(busy), proc.stdout  # nothing else to say (a busy machine is the machine's)

    truth, _ = load_truth(run_dir / "sim_truth.jsonl")
    records, _ = read_records(run_dir / "run_records.jsonl")
    checked = 0
    for rec in records:
        true = truth[rec.request_id]
        written = list(true["chunk_times"])
        assert rec.ok and rec.output_tokens == 256 and len(written) == len(rec.chunk_times)
        seen = [rec.t_start + c for c in rec.chunk_times]
        if seen[-1] > written[-1]:  # timed by the closing messages: late only after they were written
            written[-1] = min(seen[-1], true["closed"])
        marks = dict(zip(rec.uncertain_chunks or (), rec.uncertain_ms or (), strict=True))
        for i, (s, w) in enumerate(zip(seen, written, strict=True)):
            late_ms = (s - w) * 1000.0
            assert late_ms <= marks.get(i, EXACT_MS), (rec.request_id, i, late_ms, marks)
            checked += 1
    assert len(records) == 1 + 1 + 4 + 8 + 10 and checked > len(records)  # the warm-up's request too
    data = json.loads((run_dir / "run_run.json").read_text())
    assert not data["errors"]
