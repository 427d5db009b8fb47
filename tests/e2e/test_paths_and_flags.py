"""Paths and flags a user names are checked before anything starts, and the answer is found where
the user asked for it: through the real command lines (`python -m llmload ...`, `locust -f`), the
real simulator where a run is made, and a real socket server for the HTTP-level preflight failures.

Each case checks the exit code (`llmload.core.exit_codes`), the one `<command>: error:` line that
names the flag (and the path, never credentials), that nothing was started, and no traceback.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fixtures.runs import make_record

from llmload.core import exit_codes
from llmload.core.config import ConfigError, load_config
from llmload.core.files.records import read_records, write_records
from llmload.runner.sweep_run import LOCUSTFILES, locust_command, run_sweep
from llmload.servers.process import LOOPBACK, free_port

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SMALL = ["--rungs", "1", "--requests-per-user", "2", "--max-tokens", "8", "--warmup-requests", "0"]
FAST = ["--sim", "accept_len=1", "--sim", "base_ms=2", "--sim", "per_seq_ms=0"]
NOWHERE = "/proc/llmload-no-such-folder"  # a folder no user, root included, can create


def llmload(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def one_line_error(proc: subprocess.CompletedProcess[str], prefix: str, pattern: str) -> str:
    """Exit 2, no traceback, and exactly one `<prefix>: error: ...` line on stderr, matching."""
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{prefix}: error: ")]
    assert len(lines) == 1, proc.stderr
    message = lines[0].removeprefix(f"{prefix}: error: ")
    assert re.fullmatch(pattern, message), message
    return message


def nothing_started(proc: subprocess.CompletedProcess[str], run_dir: Path) -> None:
    assert "sweeping" not in proc.stderr, proc.stderr
    assert not (run_dir / "sim.log").exists() and not (run_dir / "locust.log").exists()


# --- outputs written where the user asked are read back from there ------------------------------
@pytest.mark.parametrize(
    ("args", "records"),
    [
        (["--records", "{out}/y.jsonl"], "{out}/y.jsonl"),
        (["--records", "{out}/y_records.jsonl"], "{out}/y_records.jsonl"),
        (["--", "--csv", "{out}/run"], "{out}/run_records.jsonl"),
    ],
    ids=["records-any-name", "records-prefix-name", "csv-elsewhere"],
)
def test_the_sweep_tabulates_the_records_where_it_asked_locust_to_write_them(tmp_path, args, records):
    out = tmp_path / "elsewhere"
    run_dir = tmp_path / "run"
    proc = llmload(tmp_path, "sweep", "--run-dir", str(run_dir), *FAST, *SMALL, "--format", "json",
                   *[a.format(out=out) for a in args])  # fmt: skip
    assert proc.returncode == exit_codes.OK, proc.stderr
    assert "no measured request" not in proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["conc"] == 1 and row["tokens"] == 2 * 8
    written, _ = read_records(Path(records.format(out=out)))
    assert len(written) == 2
    assert not (run_dir / "run_records.jsonl").exists()  # the answer came from where it was written


# --- output paths that cannot be written: one line, before anything starts ----------------------
@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--records", f"{NOWHERE}/x.jsonl"],
         rf"locust: argument --records: {NOWHERE}/x.jsonl: cannot create {NOWHERE}: .+"),
        (["--records", "adir"], r"locust: argument --records: adir: adir is a folder, not a file"),
        (["--", "--csv", f"{NOWHERE}/run"],
         rf"locust: argument --csv: {NOWHERE}/run: cannot create {NOWHERE}: .+"),
        (["--", "--csv", "/proc/run"], r"locust: argument --csv: /proc/run: cannot write in /proc: .+"),
        (["--", "--html", f"{NOWHERE}/r.html"],
         rf"locust: argument --html: {NOWHERE}/r.html: cannot create {NOWHERE}: .+"),
        (["--", "--json-file", "/proc/r"],
         r"locust: argument --json-file: /proc/r: cannot write in /proc: .+"),
        (["--run-dir", NOWHERE], rf"--run-dir {NOWHERE}: cannot create {NOWHERE}: .+"),
    ],
    ids=["records-uncreatable", "records-is-folder", "csv-uncreatable", "csv-read-only", "html",
         "json-file", "run-dir"],
)  # fmt: skip
def test_an_output_that_cannot_be_written_is_one_line_before_anything_starts(tmp_path, args, pattern):
    (tmp_path / "adir").mkdir()
    run_dir = tmp_path / "run"
    proc = llmload(tmp_path, "sweep", "--run-dir", str(run_dir), *FAST, *SMALL, *args)
    one_line_error(proc, "llmload sweep", pattern)
    nothing_started(proc, run_dir)


def test_plain_locust_checks_records_while_parsing(tmp_path):
    """`locust -f` itself: an unwritable --records is Locust's one parse error, not a failed run."""
    extra = ["--rungs", "1", "--records", f"{NOWHERE}/r.jsonl"]
    cmd = locust_command(
        f"http://{LOOPBACK}:{free_port()}", tmp_path / "out", LOCUSTFILES["completions"], extra
    )
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == exit_codes.BAD_INPUT and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(
        rf"error: argument --records: {NOWHERE}/r.jsonl: cannot create {NOWHERE}: ",
        proc.stderr.splitlines()[-1],
    ), proc.stderr


# --- flags Locust (or llmload's options) refuse: its reason, before the simulator starts --------
@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--slo-ttft-ms", "5"], r"locust: unrecognized arguments: --slo-ttft-ms.*"),
        (["--rungs", "-1,2"], r"locust: argument --rungs: expected one argument"),
        (["--rungs", ""], r"locust: argument --rungs: empty value; leave the flag out .*"),
        (["--max-tokens=", "--rungs", "1"], r"locust: argument --max-tokens: empty value; .*"),
        (["--rungs", "1,,2"], r"--rungs: an empty item in '1,,2'; .*"),
        (["--rungs", "1,2,"], r"--rungs: an empty item in '1,2,'; .*"),
        (["--max-tokens", "x"], r"--max-tokens: 'max_tokens' must be an integer, got 'x'"),
    ],
    ids=["unknown-flag", "missing-value", "empty-rungs", "empty-value", "empty-item", "trailing-comma",
         "bad-value"],
)  # fmt: skip
def test_a_flag_locust_refuses_is_its_reason_before_the_simulator_starts(tmp_path, args, pattern):
    run_dir = tmp_path / "run"
    proc = llmload(tmp_path, "sweep", "--run-dir", str(run_dir), *args)
    one_line_error(proc, "llmload sweep", pattern)
    nothing_started(proc, run_dir)


# --- --host: no query, fragment or credentials; the credentials never echoed -------------------
@pytest.mark.parametrize(
    ("host", "pattern"),
    [
        ("http://127.0.0.1:8000/?model=x", r"--host 'http://127.0.0.1:8000/\?model=x': a query string .*"),
        ("http://127.0.0.1:8000#top", r"--host 'http://127.0.0.1:8000#top': a fragment .*"),
        ("http://admin:hunter2@127.0.0.1:8000", r"--host 'http://\*\*\*@127.0.0.1:8000': credentials .*"),
        ("http://admin:hunter2@127.0.0.1:abc", r"--host 'http://\*\*\*@127.0.0.1:abc': Port could not .*"),
    ],
    ids=["query", "fragment", "credentials", "credentials-bad-port"],
)
@pytest.mark.parametrize("command", ["sweep", "capacity"])
def test_host_with_query_fragment_or_credentials_is_refused(tmp_path, host, pattern, command):
    run_dir = tmp_path / "run"
    ladder = tmp_path / "capacity.yaml"
    ladder.write_text("mode: capacity\nslo: {ttft_ms: 100}\n")
    extra = ["--ladder", str(ladder)] if command == "capacity" else []
    proc = llmload(tmp_path, command, "--run-dir", str(run_dir), "--host", host, *extra)
    one_line_error(proc, f"llmload {command}", pattern)
    assert "hunter2" not in proc.stdout + proc.stderr
    nothing_started(proc, run_dir)


def test_sweep_help_lists_endpoint_once(tmp_path):
    proc = llmload(tmp_path, "sweep", "--help")
    assert proc.returncode == exit_codes.OK
    assert len(re.findall(r"^\s+--endpoint\b", proc.stdout, re.MULTILINE)) == 1, proc.stdout


# --- the flags of the other commands, checked as their YAML twins --------------------------------
@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """A run's records and run file (two 8-token requests at one user)."""
    prefix = tmp_path / "done" / "run"
    prefix.parent.mkdir()
    write_records(Path(f"{prefix}_records.jsonl"),
                  [make_record(1000.0 + i, 1001.0 + i, 8, 0.1, max_tokens=8) for i in range(2)])  # fmt: skip
    info = {"finished": True, "config": {"rungs": [1], "mode": "concurrency"}, "stages": []}
    Path(f"{prefix}_run.json").write_text(json.dumps(info))
    return prefix


@pytest.mark.parametrize("value", ["nan", "-5", "0", "inf"])
@pytest.mark.parametrize("key", ["ttft_ms", "tpot_ms", "e2el_ms"])
def test_table_slo_flags_are_checked_as_the_yaml_keys(tmp_path, finished_run, key, value):
    flag = "--slo-" + key.replace("_", "-")
    proc = llmload(tmp_path, "table", str(finished_run), f"{flag}={value}")
    message = one_line_error(proc, "llmload table", rf"argument {flag}: 'slo.{key}' must be .*")
    ladder = tmp_path / "slo.yaml"
    ladder.write_text(f"slo: {{{key}: {value.replace('nan', '.nan').replace('inf', '.inf')}}}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(ladder)
    assert message.removeprefix(f"argument {flag}: ") == str(refused.value).removeprefix(f"{ladder}: ")


@pytest.mark.parametrize(
    ("command", "args", "pattern"),
    [
        ("table", ["--percentiles", ""], r"argument --percentiles: an empty item in ''; .*"),
        ("table", ["--percentiles", "50,,90"], r"argument --percentiles: an empty item in '50,,90'; .*"),
        ("table", ["--percentiles", "0,50"],
         r"argument --percentiles: 'percentiles\[0\]' must be in \(0, 100\], .*"),
        ("table", ["--requests-per-user", "0"],
         r"argument --requests-per-user: 'requests_per_user' must be .*"),
        ("compare", ["--confidence", "1"],
         r"argument --confidence: 'confidence' must be a number in \(0, 1\), got 1"),
        ("compare", ["--resamples", "0"],
         r"argument --resamples: 'resamples' must be an integer in \[1, 10000\], got 0"),
        ("compare", ["--threshold", "nan"],
         r"argument --threshold: 'threshold' must be a number in \[0, 100\], got nan"),
        ("budget", ["--component-ms", "inf"],
         r"argument --component-ms: 'cost_ms' must be a number in \[0, 60000\], got inf"),
        ("budget", ["--component-ms", "1", "--accept-len", "0"],
         r"argument --accept-len: 'accept_len' must be a number in \[1, 1000\], got 0"),
        ("report", ["--out", f"{NOWHERE}/r"], rf"--out {NOWHERE}/r: cannot create {NOWHERE}/r: .+"),
        ("report", ["--out", "afile/r"], r"--out afile/r: afile is a file, not a folder"),
        ("capacity", ["--plot", f"{NOWHERE}/c.png"], rf"--plot {NOWHERE}/c.png: cannot create {NOWHERE}: .+"),
    ],
    ids=["percentiles-empty", "percentiles-empty-item", "percentiles-zero", "requests-per-user",
         "confidence", "resamples", "threshold", "component-ms", "accept-len", "report-out-uncreatable",
         "report-out-under-file", "capacity-plot"],
)  # fmt: skip
def test_other_commands_flags_are_one_line(tmp_path, finished_run, command, args, pattern):
    (tmp_path / "afile").write_text("a file\n")
    runs = {"table": [str(finished_run)], "compare": [str(finished_run)] * 2, "budget": [str(finished_run)],
            "report": [str(finished_run)], "capacity": ["--prefix", str(finished_run)]}  # fmt: skip
    proc = llmload(tmp_path, command, *runs[command], *args)
    one_line_error(proc, f"llmload {command}", pattern)
    assert not list(finished_run.parent.glob("*.png")) and not list(finished_run.parent.glob("*.html"))


def test_llama_server_refuses_a_port_out_of_range(tmp_path):
    proc = llmload(tmp_path, "llama-server", "serve", "--port", "70000")
    one_line_error(
        proc, "llmload llama-server serve", r"argument --port: 'port' must be a port in 1-65535, got 70000"
    )


# --- preflight: an answer that is not HTTP, or is cut short, is one line and exit 2 --------------
@contextmanager
def answering(payload: bytes) -> Iterator[str]:
    """A loopback server that answers every connection with `payload` and closes it."""
    server = socket.create_server((LOOPBACK, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(payload)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=10)
        server.close()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", r"the answer is not HTTP: status line 'SSH-2.0-OpenSSH_9.6\\r\\n' .*"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"data\": [",
         r"the answer was cut short: 10 bytes of 100 expected arrived .*"),
    ],
    ids=["not-http", "cut-short"],
)  # fmt: skip
def test_preflight_http_failure_is_one_line_and_bad_input(tmp_path, payload, reason):
    with answering(payload) as host:
        run = run_sweep(host=host, run_dir=tmp_path / "run", locust_args=SMALL, timeout=120)
    log = run.log.read_text()
    assert run.returncode == exit_codes.BAD_INPUT, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    last = log.strip().splitlines()[-1]
    assert re.fullmatch(re.escape(f"llmload: error: {host}/v1/models: ") + reason, last), last
