"""What a user types never ends in a traceback, a leaked key or a silently wrong table: every
case of issue 13, through the real command lines (`python -m llmload sweep|table`, `locust -f`),
checking the exit code (`llmload.core.exit_codes`), the one line on stderr that names the input,
no traceback, and that the files of finished rungs are intact. Figures are checked against the
simulator's truth log where there are figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.runs import make_record

from llmload.core import exit_codes
from llmload.core.files.records import read_records, write_records
from llmload.runner.sweep_run import LOCUSTFILES, locust_command
from llmload.servers.process import LOOPBACK, free_port
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SMALL = ["--rungs", "1,2", "--requests-per-user", "2", "--max-tokens", "8", "--warmup-requests", "0"]
FAST = ["--sim", "accept_len=1", "--sim", "base_ms=2", "--sim", "per_seq_ms=0"]


def llmload(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env)


def one_line_error(proc: subprocess.CompletedProcess[str], prefix: str, pattern: str) -> str:
    """Exit 2, no traceback, and exactly one `<prefix>: error: ...` line on stderr, matching."""
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{prefix}: error: ")]
    assert len(lines) == 1, proc.stderr
    message = lines[0].removeprefix(f"{prefix}: error: ")
    assert re.fullmatch(pattern, message), message
    return message


def no_host() -> str:
    return f"http://{LOOPBACK}:{free_port()}"  # nothing listens: a bad option stops it before


# --- the sweep command: bad input is one line before anything starts ----------------------------
@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--host", "localhost"], r"--host 'localhost': expected http://HOST\[:PORT\] .*"),
        (["--host", "http://127.0.0.1:abc"], r"--host 'http://127.0.0.1:abc': Port could not be cast .*"),
        (["--host", "http://127.0.0.1:99999"], r"--host 'http://127.0.0.1:99999': Port out of range .*"),
        (["--sim", "bogus_flag=1"], r"--sim: unrecognized arguments: --bogus-flag 1"),
        (["--sim", "accept_len=x"],
         r"--sim: argument --accept-len: 'accept_len' must be a number in \[1, 65\], got 'x'"),
        (["--sim", "base_ms=1", "--sim", "base_ms=2"], r"--sim 'base_ms=2': base_ms given twice \(also .*"),
        (["--sim", "port=80"], r"--sim 'port=80': the sweep chooses the simulator's port itself"),
        (["--host", "http://127.0.0.1:1", "--sim", "base_ms=1"], r"--sim base_ms: with --host no .*"),
        (["--run-dir", "afile/run"], r"--run-dir afile/run: afile is a file, not a folder"),
        (["--", "--csv", "afile/x/run"],
         r"locust: argument --csv: afile/x/run: afile is a file, not a folder"),
    ],
    ids=["no-scheme", "port-text", "port-range", "sim-unknown", "sim-type", "sim-twice", "sim-port",
         "sim-and-host", "run-dir-under-file", "csv-under-file"],
)  # fmt: skip
def test_sweep_bad_input_is_one_line(tmp_path, args, pattern):
    (tmp_path / "afile").write_text("a file, not a folder\n")
    proc = llmload(tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), *args)
    one_line_error(proc, "llmload sweep", pattern)
    assert "sweeping" not in proc.stderr  # nothing was started


@pytest.mark.parametrize("flag", ["--csv", "--html"])
def test_locust_output_under_a_file_is_one_line(tmp_path, flag):
    """Plain `locust`: Locust creates these folders before any plugin event; checked while parsing."""
    (tmp_path / "afile").write_text("a file, not a folder\n")
    cmd = locust_command(no_host(), tmp_path / "out" / "run", LOCUSTFILES["completions"], ["--rungs", "1"])
    cmd += [flag, "afile/x/run"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == exit_codes.BAD_INPUT and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(
        f"error: argument {flag}: afile/x/run: afile is a file, not a folder"
    )


def test_sweep_repeated_fault_flags_add_up(tmp_path):
    """--sim fault=... is the one repeatable simulator flag; the rates are checked together."""
    proc = llmload(tmp_path, "sweep", "--sim", "fault=drop=0.6", "--sim", "fault=reset=0.6")
    one_line_error(proc, "llmload sweep", r"--sim: fault rates sum to 1.2 > 1 .*")


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("rungs: [1]\nmax_tokens: 8\nrungs: [2]\n", r"line 3, column 1: YAML .*: duplicate key 'rungs'.*"),
        ("timeouts: {total: 5, total: 9}\n", r"line 1, column 22: YAML .*: duplicate key 'total'.*"),
        ("", r"the file holds no keys \(an empty file is not the built-in ladder\)"),
        ("# only a comment\n", r"the file holds no keys .*"),
        ("timeouts: {first_token: .nan}\n", r"'timeouts.first_token' must be .*, got nan"),
        ("timeouts: {total: .inf}\n", r"'timeouts.total' must be .*, got inf"),
        ("temperature: -.inf\n", r"'temperature' must be .*, got -inf"),
        ("seed: 2024-02-30\n", r"YAML value cannot be read: day is out of range for month"),
    ],
    ids=["duplicate-key", "duplicate-nested", "empty", "comment-only", "nan", "inf", "minus-inf", "bad-date"],
)  # fmt: skip
def test_ladder_file_that_would_run_something_else(tmp_path, text, pattern):
    """Through `llmload sweep --ladder` (checked before anything starts) and through `locust`."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(text)
    proc = llmload(tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), "--ladder", str(ladder))
    one_line_error(proc, "llmload sweep", re.escape(f"{ladder}: ") + pattern)
    cmd = locust_command(
        no_host(), tmp_path / "out" / "run", LOCUSTFILES["completions"], ["--ladder", str(ladder)]
    )
    locust = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert locust.returncode == exit_codes.BAD_INPUT and "Traceback" not in locust.stderr
    (line,) = re.findall(r"ERROR/llmload: llmload: (.*)", locust.stderr)
    assert re.fullmatch(re.escape(f"{ladder}: ") + pattern, line)


@pytest.mark.parametrize("key", ["sk-\u201czebra\u201d", "sk-\nzebra"], ids=["quotes", "newline"])
def test_api_key_a_header_cannot_carry(tmp_path, key):
    """One line naming the variable and the character, never the key; before any request."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["LOCUST_API_KEY"] = key
    proc = llmload(tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), *FAST, *SMALL, env=env)
    message = one_line_error(
        proc,
        "llmload sweep",
        r"--api-key / LOCUST_API_KEY / OPENAI_API_KEY: character 4 of the API key is U\+.*",
    )
    assert "zebra" not in proc.stderr + proc.stdout + message
    assert "sweeping" not in proc.stderr  # found before anything started
    assert (
        not (tmp_path / "run" / "run_records.jsonl").exists()
        or not read_records(tmp_path / "run" / "run_records.jsonl")[0]
    )


def test_preflight_error_is_the_last_line(tmp_path):
    """Unreachable host: the sweep ends with Locust's preflight reason, not 'no such records file'."""
    host = no_host()
    proc = llmload(tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), "--host", host, *SMALL)
    one_line_error(proc, "llmload sweep", re.escape(f"{host}/v1/models: cannot reach the server: ") + ".*")
    assert proc.stderr.splitlines()[-1].startswith("llmload sweep: error: ")
    assert "records file" not in proc.stderr


def test_max_tokens_beyond_the_context_stops_at_preflight(tmp_path):
    proc = llmload(
        tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), "--sim", "max_model_len=100",
        "--rungs", "1", "--max-tokens", "100",
    )  # fmt: skip
    one_line_error(
        proc,
        "llmload sweep",
        r"max_tokens 100 \+ the prompt exceed the context of model 'sim-model': "
        r"http://127.0.0.1:\d+/v1/models says max_model_len 100; lower --max-tokens / 'max_tokens'",
    )


def test_the_servers_first_400_reason_is_printed_once(tmp_path):
    """max_tokens fits the context alone, not with the prompt: every request gets HTTP 400; the
    server's own reason is printed once (the records hold every one)."""
    proc = llmload(
        tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), *FAST, "--sim", "max_model_len=100",
        "--rungs", "1,2", "--requests-per-user", "2", "--max-tokens", "95", "--warmup-requests", "0",
    )  # fmt: skip
    assert proc.returncode == exit_codes.REQUEST_FAILURES, proc.stderr
    reasons = [line for line in proc.stderr.splitlines() if "HTTP 400" in line]
    assert len(reasons) == 1, proc.stderr
    assert "maximum context length is 100 tokens" in reasons[0]
    records, _ = read_records(tmp_path / "run" / "run_records.jsonl")
    assert len(records) == 6 and {r.outcome for r in records} == {"http_400"}


# --- numbers that were silently wrong ----------------------------------------------------------
def test_server_without_usage_is_estimated_not_failed(tmp_path):
    """4 tokens per chunk and no usage: the table shows the real 32 tokens per request, marked
    estimated (finish_reason 'length' means max_tokens were generated), and the run exits 0: no
    usage is not a reconciliation failure."""
    proc = llmload(
        tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), "--sim", "accept_len=4",
        "--sim", "max_draft=3",
        "--sim", "fault=no_usage=1", "--rungs", "2", "--requests-per-user", "2", "--max-tokens", "32",
        "--warmup-requests", "0", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == exit_codes.OK, proc.stderr
    (row,) = json.loads(proc.stdout)
    truth, _ = load_truth(tmp_path / "run" / "sim_truth.jsonl")
    records, _ = read_records(tmp_path / "run" / "run_records.jsonl")
    # the truth of the measured requests (the per-chunk usage probe sent 2 more, not in any rung)
    assert row["tokens"] == sum(truth[r.request_id]["tokens_sent"] for r in records) == 4 * 32
    assert row["estimated"] is True
    assert all(r.tokens_estimated and r.output_tokens == 32 and r.chunks < 32 for r in records)


def test_stream_false_shows_no_ttft(tmp_path):
    proc = llmload(tmp_path, "sweep", "--run-dir", str(tmp_path / "run"), *FAST, *SMALL, "--stream", "false")
    assert proc.returncode == exit_codes.OK, proc.stderr
    header, *rows = proc.stdout.splitlines()[:3]
    ttft = header.split().index("ttft_p50_ms")
    assert [r.split()[ttft] for r in rows] == ["-", "-"]
    metrics = llmload(tmp_path, "table", str(tmp_path / "run"), "--metrics")
    assert re.search(r"rung01 c1\s+ttft\s+0\s+-", metrics.stdout), metrics.stdout
    assert re.search(r"rung01 c1\s+e2el\s+2\s+\d", metrics.stdout)  # the end time stays E2EL


# --- the table command --------------------------------------------------------------------------
def write_run(tmp_path: Path, lines: list[str], stages: list[dict], rungs: list[int]) -> Path:
    prefix = tmp_path / "run"
    write_records(Path(f"{prefix}_records.jsonl"), [])
    Path(f"{prefix}_records.jsonl").write_text("".join(line + "\n" for line in lines))
    info = {"finished": False, "config": {"rungs": rungs, "mode": "concurrency"}, "stages": stages}
    Path(f"{prefix}_run.json").write_text(json.dumps(info))
    return prefix


def test_table_skips_lines_that_are_not_records(tmp_path):
    good = [make_record(1000.0 + i, 1001.0 + i, 8, 0.1, max_tokens=8).to_json() for i in range(2)]
    junk = ["[1, 2]", '"a string"', "42", "null", json.dumps({**json.loads(good[0]), "rung": None}),
            json.dumps({**json.loads(good[0]), "t_end": "late"}), '{"rung": 0}']  # fmt: skip
    prefix = write_run(tmp_path, [good[0], *junk, good[1]], [], [1])
    proc = llmload(tmp_path, "table", str(prefix))
    assert proc.returncode == exit_codes.OK and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines()[1].split()[3] == "16"
    assert "skipped 7 unreadable lines: 2, 3, 4, 5, 6, 7, 8" in proc.stdout
    only_junk = write_run(tmp_path, junk, [], [1])
    one_line_error(llmload(tmp_path, "table", str(only_junk)), "llmload table", r".*: no measured records")


def test_table_accepts_the_folder_and_marks_rungs_without_records(tmp_path):
    """A run killed (SIGKILL) in its second rung before any request of it ended, out of three:
    the second is marked started-but-empty, the third not run; both named in notes."""
    rec = make_record(1000.0, 1001.0, 8, 0.1, max_tokens=8, users=2)
    stages = [{"rung": 0, "users": 2, "finished": 1001.5}, {"rung": 1, "users": 4, "finished": None}]
    write_run(tmp_path, [rec.to_json(), rec.to_json()], stages, [2, 4, 8])
    by_prefix = llmload(tmp_path, "table", str(tmp_path / "run"))
    by_folder = llmload(tmp_path, "table", str(tmp_path))
    by_records = llmload(tmp_path, "table", str(tmp_path / "run_records.jsonl"))
    assert by_prefix.returncode == by_folder.returncode == by_records.returncode == exit_codes.OK
    assert by_prefix.stdout == by_folder.stdout == by_records.stdout
    rows = [line.split() for line in by_prefix.stdout.splitlines()[1:4]]
    assert [r[0] for r in rows] == ["2", "4!", "8~"]
    assert rows[1][1:] == rows[2][1:] == ["-", "-", "-", "-", "-", "0"]
    assert "! rung stopped before its first request ended (no record): rung02 c4" in by_prefix.stdout
    assert "~ rung not run (the run stopped, or has not reached it yet): rung03 c8" in by_prefix.stdout
    as_json = json.loads(llmload(tmp_path, "table", str(tmp_path), "--format", "json").stdout)
    assert [(r["conc"], r.get("not_run", False), r["partial"]) for r in as_json] == [
        (2, False, False), (4, False, True), (8, True, False)
    ]  # fmt: skip
