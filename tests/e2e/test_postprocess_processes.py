"""A records file read by two processes (`llmload.analysis.run.records_pass`: a child process,
started by `llmload.servers.python_child`, reads the first half) gives the table, metrics and
warnings one process gives, unreadable lines named by their numbers in the whole file, also when
the child fails; and `llmload table` on a file past the size threshold takes that path by itself."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.analysis.run import records_pass
from llmload.analysis.run.postprocess import load_run
from llmload.output.run_table import render_run
from llmload.servers.python_child import PythonChild

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


def write_run(prefix: Path, n: int) -> Path:
    """n records over 3 rungs (as the ladder writes them: json's spaced separators), a warm-up
    record, failures, rate-mode fields, and two unreadable lines (one in each half)."""
    rnd = random.Random(7)
    path = Path(f"{prefix}_records.jsonl")
    lines = []
    for i in range(n):
        rung = i * 3 // n
        ok = rnd.random() > 0.05
        times = [round(0.05 + 0.01 * k + rnd.random() * 0.005, 6) for k in range(rnd.randint(1, 40))]
        t0 = 1000.0 + i * 0.01
        lines.append(
            {
                "request_id": f"r{i}",
                "rung": -1 if i == 5 else rung,
                "users": 2**rung,
                "phase": "warmup" if i == 5 else "measure",
                "endpoint": "chat",
                "stream": True,
                "max_tokens": 40,
                "t_start": t0,
                "t_end": t0 + times[-1] + 0.001,
                "t_first": t0 + times[0],
                "t_first_content": t0 + times[0],
                "prompt_tokens": 16,
                "output_tokens": len(times),
                "chunks": len(times),
                "finish_reason": "length" if ok else None,
                "outcome": "ok" if ok else "timeout",
                "chunk_times": times,
                "t_scheduled": t0 - rnd.random() * 0.01,
                "rate": 4.0,
            }
        )
    text = [json.dumps(x) for x in lines]
    text.insert(n // 4, '{"rung": 0, "half-written')
    text.insert(3 * n // 4, "not a record")
    path.write_text("\n".join(text) + "\n")
    return path


def test_two_processes_give_one_process_figures(tmp_path):
    prefix = tmp_path / "run"
    write_run(prefix, 3000)
    one = load_run(prefix, with_metrics=True, processes=1)
    two = load_run(prefix, with_metrics=True, processes=2, start_child=PythonChild)
    assert two.rows == one.rows
    assert two.metrics == one.metrics
    assert two.warnings == one.warnings
    assert "skipped 2 unreadable lines: 751, 2251" in one.warnings[0]
    assert render_run(two, "csv") == render_run(one, "csv")


def test_a_failed_child_leaves_the_first_part_to_this_process(tmp_path, monkeypatch, caplog):
    prefix = tmp_path / "run"
    write_run(prefix, 1000)
    one = load_run(prefix, with_metrics=True, processes=1)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the child exits 1 at once
    two = load_run(prefix, with_metrics=True, processes=2, start_child=PythonChild)
    assert (two.rows, two.metrics, two.warnings) == (one.rows, one.metrics, one.warnings)
    assert "the child reading the first part failed (exit 1: no message)" in caplog.text  # not silently


def test_the_table_command_reads_a_large_file_in_two_processes(tmp_path):
    prefix = tmp_path / "big"
    path = write_run(prefix, 2000)
    assert path.stat().st_size < records_pass.TWO_PROCESS_BYTES  # one process by default ...
    probe = (  # past the size threshold; says which parts this process reads
        "import sys, llmload.analysis.run.records_pass as p\n"
        "p.TWO_PROCESS_BYTES = 1\n"
        "real = p.tally_part\n"
        "def part(*args, **kw):\n"
        "    print('this process reads', args[3:], kw, file=sys.stderr)\n"
        "    return real(*args, **kw)\n"
        "p.tally_part = part\n"
        "from llmload.cli import main\n"
        "sys.exit(main(['table', sys.argv[1], '--format', 'csv', '--metrics']))\n"
    )
    two = subprocess.run(
        [sys.executable, "-c", probe, str(prefix)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    one = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(prefix), "--format", "csv", "--metrics"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert two.returncode == one.returncode == 0, two.stderr
    parts = [line for line in two.stderr.splitlines() if line.startswith("this process reads")]
    assert len(parts) == 1 and parts[0].endswith("{}")  # from a start byte on; the child read the first half
    assert two.stdout == one.stdout
