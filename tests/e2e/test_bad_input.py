"""Bad input, through the real command lines.

`locust`: every config mistake is one line `llmload: <file>: <what is wrong with which key>`
(exit code 2) before any user starts or any request is sent; Locust has already opened its CSV
files by then, and they stay empty. `scripts/sweep_table.py`: a missing or empty records file is
one error line (exit 2); a half-written records line, an empty, wrong-columns or truncated Locust
CSV still gives the table from every complete row, with a warning naming what was skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.runner.sweep_run import LOCUSTFILES, SweepRun, locust_command, run_sweep
from llmload.servers.process import LOOPBACK, free_port

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

KNOWN = r"\(known: rungs, .*\)"
AGENT = "endpoint: chat\ntools: weather\n"  # agent sessions' other keys


def run_locust(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    # no server: a config error must stop the run before the preflight's first connection
    host = f"http://{LOOPBACK}:{free_port()}"
    cmd = locust_command(host, tmp_path / "out" / "run", LOCUSTFILES["completions"], args)
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


def error_lines(output: str) -> list[str]:
    return re.findall(r"ERROR/llmload: llmload: (.*)", output)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], message: str, out_dir: Path) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    lines = error_lines(output)
    assert len(lines) == 1, output
    assert re.fullmatch(message, lines[0]), lines[0]
    assert "Traceback" not in output
    written = [p for p in out_dir.glob("*") if p.stat().st_size] if out_dir.exists() else []
    assert written == []  # no records, no run file; Locust's CSVs empty


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rungz: [1, 2]\n", r"unknown key 'rungz' " + KNOWN),
        ("max_tokens: many\n", r"'max_tokens' must be an integer, got 'many'"),
        ("rungs: 4\nstream: 1\n", r"'stream' must be true or false, got 1"),
        ("rungs: [1, 0]\n", r"'rungs\[1\]' must be an integer >= 1, got 0"),
        ("rungs: [-2]\n", r"'rungs\[0\]' must be an integer >= 1, got -2"),
        ("rungs: []\n", r"'rungs' is empty; give at least one user count, e.g. \[1, 4, 8, 10\]"),
        ("max_tokens: 0\n", r"'max_tokens' must be an integer >= 1, got 0"),
        (
            "rungs: [1, 4\nmax_tokens: 8\n",
            r"line 2, column 11: YAML syntax error: expected ',' or ']', but got ':'",
        ),
        ("timeouts: {first_token: fast}\n", r"'timeouts.first_token' must be a number, got 'fast'"),
        ("retries: {max: 2, on_status: [200]}\n", r"'retries.on_status' must be a list of HTTP status .*"),
        (
            AGENT + "sessions: {agent: true, fan_out: 0}\n",
            r"'sessions.fan_out' must be an integer in \[1, 16\], got 0",
        ),
        (
            AGENT + "sessions: {agent: true, fan_out: 17}\n",
            r"'sessions.fan_out' must be an integer in \[1, 16\], got 17",
        ),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "wrong-type-bool",
        "rung-0",
        "rung-negative",
        "empty-ladder",
        "max-tokens-0",
        "yaml-syntax",
        "timeout-type",
        "retry-status",
        "fan-out-0",
        "fan-out-over-the-cap",
    ],
)
def test_bad_ladder_file(tmp_path, text, message):
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(text)
    proc = run_locust(tmp_path, ["--ladder", str(ladder)])
    assert_one_line_error(proc, re.escape(f"{ladder}: ") + message, tmp_path / "out")


def test_missing_ladder_file(tmp_path):
    proc = run_locust(tmp_path, ["--ladder", "nope.yaml"])
    assert_one_line_error(proc, r"nope\.yaml: no such config file", tmp_path / "out")


def test_bad_option_value(tmp_path):
    proc = run_locust(tmp_path, ["--max-tokens", "0", "--rungs", "1"])
    assert_one_line_error(
        proc,
        r"--max-tokens: 'max_tokens' must be an integer >= 1, got 0",
        tmp_path / "out",
    )
    proc = run_locust(tmp_path, ["--rungs", "1,x"])
    assert_one_line_error(
        proc, r"--rungs: expected comma-separated \w+ like 1,4,8,10, got '1,x'", tmp_path / "out"
    )


@pytest.mark.parametrize(
    ("prompts", "value", "message"),
    [
        (
            "one prompt\nanother\n",
            "true",
            r"'max_tokens\.replies' '.*p\.txt' holds no reply \(format lines: .*\)",
        ),
        ('{"prompt": "a"}\n', "true", r"'max_tokens\.replies' '.*' holds no reply \(format jsonl: .*\)"),
        (
            '[{"conversations": [{"from": "human", "value": 1}',
            "true",
            r"'max_tokens\.replies' '.*' is not valid sharegpt: .*",
        ),
        (None, "true", r"'max_tokens\.replies' true takes the replies of 'prompt_file', which is not set .*"),
        (None, "nope.json", r"'max_tokens\.replies' cannot read '.*nope\.json': No such file or directory"),
    ],
    ids=["lines-file", "jsonl-without-replies", "garbage", "no-prompt-file", "missing-file"],
)
def test_outputs_from_a_prompt_file_without_replies(tmp_path, prompts, value, message):
    """`max_tokens: {dist: empirical, replies: ...}` is checked with the config: one line naming
    the key, exit 2, before the preflight (no server here)."""
    ladder = tmp_path / "ladder.yaml"
    text = f"rungs: [1]\nmax_tokens: {{dist: empirical, replies: {value}}}\n"
    if prompts is not None:
        (tmp_path / "p.txt").write_text(prompts)
        text += "prompt_file: p.txt\n"
    ladder.write_text(text)
    proc = run_locust(tmp_path, ["--ladder", str(ladder)])
    assert_one_line_error(proc, re.escape(f"{ladder}: ") + message, tmp_path / "out")


@pytest.mark.parametrize("case", ["missing", "directory", "not-utf8"])
def test_unreadable_prompt_file(tmp_path, sim_start, case):
    """Checked after the preflight (the workload is prepared then), still before any request."""
    prompts = tmp_path / "prompts.txt"
    if case == "directory":
        prompts.mkdir()
    elif case == "not-utf8":
        prompts.write_bytes(b"\xff\xfe\x00bad")
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(f"prompt_file: {prompts}\nrungs: [1]\n")
    sim = sim_start()
    run = run_sweep(host=sim.url, run_dir=tmp_path / "run", locust_args=["--ladder", str(ladder)], timeout=60)
    log = run.log.read_text()
    assert run.returncode == 2, log[-2000:]
    (line,) = error_lines(log)
    assert re.fullmatch(re.escape(f"{prompts}: 'prompt_file' cannot be read: ") + r".+", line), line
    assert log.strip().splitlines()[-1] == f"llmload: error: {line}"
    assert not run.records.exists() or not run.records.read_text()


# --- the post-processor ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> SweepRun:
    """A small real run with failures, so the records and both Locust CSVs have rows."""
    run = run_sweep(
        run_dir=tmp_path_factory.mktemp("run"),
        locust_args=[
            "--rungs",
            "2,2",
            "--requests-per-user",
            "3",
            "--max-tokens",
            "8",
            "--warmup-requests",
            "0",
        ],
        sim={"accept_len": 1, "base_ms": 2, "faults": {"http_500": 0.3}, "fault_seed": 2},
        timeout=120,
    )
    assert run.returncode == 1  # Locust's exit code when some requests failed
    return run


def copy_run(run: SweepRun, dest: Path) -> Path:
    for path in run.prefix.parent.glob(run.prefix.name + "_*"):
        shutil.copy(path, dest / path.name)
    return dest / run.prefix.name


def sweep_table(prefix: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/sweep_table.py", str(prefix), "--wide", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def table_requests(stdout: str) -> list[int]:
    """The `requests` column of the --wide table (one line per rung: 'rungNN cN  requests ...')."""
    return [int(m) for m in re.findall(r"rung\d+ c\d+\s+(\d+)\s+\d+\s", stdout)]  # requests, partial_tokens


def test_intact_run_has_no_warnings(finished_run, tmp_path):
    proc = sweep_table(copy_run(finished_run, tmp_path))
    assert proc.returncode == 0 and "warning" not in proc.stdout
    assert table_requests(proc.stdout) == [6, 6]


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such records file"), ("", "no measured records")],
    ids=["missing", "empty"],
)
def test_records_missing_or_empty(finished_run, tmp_path, content, message):
    prefix = copy_run(finished_run, tmp_path)
    records = Path(f"{prefix}_records.jsonl")
    if content is None:
        records.unlink()
    else:
        records.write_text(content)
    proc = sweep_table(prefix)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"llmload table: error: {records}: {message}\n"


def test_records_half_written_last_line(finished_run, tmp_path):
    prefix = copy_run(finished_run, tmp_path)
    records = Path(f"{prefix}_records.jsonl")
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    proc = sweep_table(prefix)
    assert proc.returncode == 0, proc.stderr
    assert sum(table_requests(proc.stdout)) == len(lines) - 1  # every complete record
    assert f"warning: {records}: skipped 1 unreadable lines: {len(lines)}" in proc.stdout


def test_stats_csv_missing_still_gives_the_table(finished_run, tmp_path):
    prefix = copy_run(finished_run, tmp_path)
    Path(f"{prefix}_stats.csv").unlink()
    Path(f"{prefix}_failures.csv").unlink()
    proc = sweep_table(prefix)
    assert proc.returncode == 0 and table_requests(proc.stdout) == [6, 6]


@pytest.mark.parametrize("name", ["stats", "failures"])
def test_empty_csv(finished_run, tmp_path, name):
    prefix = copy_run(finished_run, tmp_path)
    csv = Path(f"{prefix}_{name}.csv")
    csv.write_text("")
    proc = sweep_table(prefix)
    assert proc.returncode == 0 and table_requests(proc.stdout) == [6, 6]
    assert f"warning: cross-check skipped: {csv}: empty file (no header row)" in proc.stdout


def test_wrong_columns_csv(finished_run, tmp_path):
    prefix = copy_run(finished_run, tmp_path)
    csv = Path(f"{prefix}_stats.csv")
    csv.write_text(csv.read_text().replace("Failure Count", "Failures", 1))
    proc = sweep_table(prefix)
    assert proc.returncode == 0 and table_requests(proc.stdout) == [6, 6]
    assert f"warning: cross-check skipped: {csv}: missing column 'Failure Count'" in proc.stdout


def test_truncated_csv(finished_run, tmp_path):
    prefix = copy_run(finished_run, tmp_path)
    csv = Path(f"{prefix}_stats.csv")
    lines = csv.read_text().splitlines(keepends=True)
    rung2 = next(i for i, line in enumerate(lines) if line.startswith("POST,rung02"))
    csv.write_text("".join(lines[:rung2]) + lines[rung2][:30])  # killed while writing rung02's row
    proc = sweep_table(prefix)
    assert proc.returncode == 0 and table_requests(proc.stdout) == [6, 6]
    assert f"warning: {csv}: skipped incomplete rows (truncated file?) at lines {rung2 + 1}" in proc.stdout
    assert f"rung02 c2: 6 records but no entry in {csv}" in proc.stdout  # rung01 was cross-checked
    assert "rung01 c2:" not in proc.stdout.split("warning", 1)[1]


@pytest.mark.parametrize(
    ("key", "content", "message"),
    [
        ("tools", '{"type": "function"}', r"'tools': expected a non-empty list of function tools, got .*"),
        ("tools", '[{"function": {"description": "x"}}]', r"'tools': tool 1 is not a function tool .*"),
        ("response_schema", '{"required": "title"}', r"'response_schema': the schema is not JSON Schema: .*"),
    ],
    ids=["tools-not-a-list", "tool-without-name", "schema-not-json-schema"],
)
def test_a_bad_tools_file_or_schema(tmp_path, key, content, message):
    """A tools file that is not a list of functions, a schema that is not JSON Schema: one line
    naming the key (and the file), exit 2, before the preflight (no server here)."""
    (tmp_path / "f.json").write_text(content)
    ladder = tmp_path / "ladder.yaml"
    shape = "tools: f.json\n" if key == "tools" else "response_format: json_schema\nresponse_schema: f.json\n"
    ladder.write_text("rungs: [1]\nendpoint: chat\n" + shape)
    proc = run_locust(tmp_path, ["--ladder", str(ladder)])
    assert_one_line_error(proc, re.escape(f"{ladder}: ") + message, tmp_path / "out")
