"""Inputs with no sane size, through the real processes: an alias bomb or an oversized ladder file
is one line within seconds, not a hang; an absurd user count is refused with the ceiling before
anything ramps; the simulator answers a key it cannot match with 401, never a 500."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmload.core import exit_codes
from llmload.runner.sweep_run import LOCUSTFILES, locust_command
from llmload.servers.process import LOOPBACK, free_port

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


def sweep(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`llmload sweep ARGS` and its wall time."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "llmload", "sweep", "--run-dir", str(cwd / "run"), *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - t0


def laughs(depth: int = 9) -> str:
    """The "billion laughs": each anchor is nine aliases of the one before (9**10 values)."""
    text = "&a0 [" + ", ".join(['"lol"'] * 9) + "]"
    for i in range(1, depth + 1):
        text = f"&a{i} [{text}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    return text


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (f"rungs: {laughs()}\n", "more than 10000 values, each alias counted as the values it repeats"),
        (f"prompt: {laughs()}\n", "more than 10000 values, each alias counted as the values it repeats"),
        ("rungs: [1]\nprompt: " + "x" * (50 << 20) + "\n", "larger than 256 KiB"),
    ],
    ids=["bomb-rungs", "bomb-prompt", "50MB"],
)
def test_a_ladder_beyond_the_limits_is_one_line_within_seconds(tmp_path, text, limit):
    """The time is compared with the same command on an empty ladder (the interpreter's start)."""
    (tmp_path / "empty.yaml").write_text("")
    _, baseline = sweep(tmp_path, "--ladder", str(tmp_path / "empty.yaml"))
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(text)
    proc, elapsed = sweep(tmp_path, "--ladder", str(ladder))
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"llmload sweep: error: {ladder}: ") and limit in line, line
    assert len(line) <= 300 + len(str(ladder)), line
    assert elapsed < baseline + 5, (elapsed, baseline)


def run_locust(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    host = f"http://{LOOPBACK}:{free_port()}"  # nothing listens: nothing may be sent anyway
    cmd = locust_command(host, tmp_path / "out" / "run", LOCUSTFILES["completions"], args)
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


def the_error(proc: subprocess.CompletedProcess[str]) -> str:
    output = proc.stdout + proc.stderr
    assert proc.returncode == exit_codes.BAD_INPUT, output[-3000:]
    assert "Traceback" not in output
    (line,) = re.findall(r"ERROR/llmload: llmload: (.*)", output)
    return line


def test_rungs_of_10_to_the_29_users_are_refused_with_the_ceiling(tmp_path):
    line = the_error(run_locust(tmp_path, ["--rungs", "1,100000000000000000000000000000"]))
    assert line == (
        "--rungs: 'rungs[1]' asks ~10^29 users; at most 100000 users a rung (20 processes of 5000 "
        "streams: more than any server batches); for more, split the load over several llmload runs"
    )
    assert not [p for p in (tmp_path / "out").glob("*") if p.stat().st_size]  # no record, no run file


def test_more_users_than_one_process_holds_are_refused_before_anything_is_sent(tmp_path):
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("rungs: [1, 6000]\n")
    proc = run_locust(tmp_path, ["--ladder", str(ladder)])
    assert the_error(proc) == (
        f"{ladder}: 6000 users at once in 1 Locust process; one process runs at most 5000 (a socket "
        "and about 60 KB each, within Locust's 10000 open files): run them on 2 or more "
        "(--processes 2, or workers)"
    )
    assert "/v1/models" not in proc.stderr  # refused before the preflight


def test_two_processes_hold_what_one_cannot(tmp_path):
    """With --processes 2 the same ladder passes the ceiling and reaches the preflight (which
    finds no server)."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("rungs: [1, 6000]\n")
    line = the_error(run_locust(tmp_path, ["--ladder", str(ladder), "--processes", "2"]))
    assert "cannot reach the server" in line, line


# --- the simulator: any key it cannot match is a 401 --------------------------------------------
@pytest.mark.parametrize(
    "header",
    [b"Bearer sk-caf\xe9", b"Bearer sk-\xe2\x80\x9czebra\xe2\x80\x9d", b"Bearer sk-\xff\xfe", b"sk-right"],
    ids=["latin-1", "utf-8-beyond-latin-1", "not-utf-8", "no-bearer"],
)
def test_the_simulator_answers_a_key_it_cannot_match_with_401(tmp_path, sim_start, header):
    sim = sim_start(api_key="sk-right")
    conn = http.client.HTTPConnection(LOOPBACK, sim.port, timeout=20)
    body = json.dumps({"model": "sim-model", "prompt": "hi", "max_tokens": 1})
    conn.request("POST", "/v1/completions", body=body, headers={"Authorization": header})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 401, answer
    assert answer["error"]["message"] == "Invalid API key"
    sim.stop()
    log = (tmp_path / "sim0.log").read_text(errors="replace")
    assert "Traceback" not in log and "Error" not in log.replace("AuthenticationError", ""), log


def test_the_simulator_matches_a_latin_1_key_as_clients_send_it(tmp_path, sim_start):
    """A configured key with a Latin-1 character: the bytes llmload (and urllib) send match it."""
    sim = sim_start(api_key="sk-café")
    conn = http.client.HTTPConnection(LOOPBACK, sim.port, timeout=20)
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-café"})  # Latin-1 on the wire
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 200, answer
    assert answer["data"][0]["id"] == "sim-model"
