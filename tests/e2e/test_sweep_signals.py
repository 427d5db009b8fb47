"""`llmload sweep` owns its children: SIGTERM or SIGINT at any moment (while the simulator starts,
during Locust's preflight, mid-rung, between rungs) stops Locust and then the simulator, leaves no
process it started alive 10 s later, prints the table of the finished rungs with the rest marked,
and exits with the interrupted code (4) without a traceback. Through the real command line
(`python -m llmload sweep`), with the simulator's truth log as the witness of what ran."""

from __future__ import annotations

import inspect
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from llmload.cli.sweep import report
from llmload.core import exit_codes
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import LOCUSTFILES, SweepRun, locust_command, run_sweep
from llmload.servers.process import LOOPBACK

GONE_WITHIN_S = 10.0
RUNGS = (2, 2, 3)
PER_USER = 3
# one token per 20 ms step: a request ~0.5 s, a rung ~1.5 s
SLOW = ["--sim", "accept_len=1", "--sim", "base_ms=20", "--sim", "per_seq_ms=0"]
SLOW_SIM = {"accept_len": 1, "base_ms": 20, "per_seq_ms": 0}
LADDER = ["--rungs", ",".join(map(str, RUNGS)), "--requests-per-user", str(PER_USER), "--max-tokens", "24"]


def _as_from_a_terminal() -> None:
    """SIGHUP's disposition as a terminal's shell leaves it, whatever the test runner inherited
    (a runner started under `nohup` ignores it, and `llmload sweep` then rightly keeps ignoring
    it); the mask as the CI runner left it, the stop signals blocked, which the sweep undoes."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def start_sweep(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "llmload", "sweep", "--run-dir", str(tmp_path / "run"), *args]
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )


def wait_for(proc: subprocess.Popen[str], condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"sweep ended ({proc.returncode}) before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def stop_and_check(proc: subprocess.Popen[str], sig: int) -> tuple[str, str]:
    """Signal the sweep; every process it started must be gone within GONE_WITHIN_S."""
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=GONE_WITHIN_S)
    except subprocess.TimeoutExpired:  # say what was still there and what the sweep had printed
        state = "running" if proc.poll() is None else f"exited {proc.returncode}"
        proc.kill()
        out, err = proc.communicate()
        out = f"(the sweep {state} after {GONE_WITHIN_S:g} s; its children: {children})\n{out}"
    finally:
        alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        for child in alive:  # never leave them behind, even when the test fails
            child.kill()
    assert alive == [], f"still running after {time.monotonic() - t0:.1f} s: {alive}"
    assert time.monotonic() - t0 < GONE_WITHIN_S, f"not gone within {GONE_WITHIN_S:g} s:\n{out}\n{err}"
    assert proc.returncode == exit_codes.INTERRUPTED, err
    assert "Traceback" not in out + err, err
    assert f"llmload sweep: stopped by {signal.Signals(sig).name}" in err
    return out, err


def records_of(tmp_path: Path) -> list:
    path = tmp_path / "run" / "run_records.jsonl"
    return read_records(path)[0] if path.exists() else []


def stages(tmp_path: Path) -> list[dict]:
    try:
        return json.loads((tmp_path / "run" / "run_run.json").read_text())["stages"]
    except (OSError, ValueError, KeyError):
        return []


def test_sigterm_while_the_simulator_starts(tmp_path):
    proc = start_sweep(tmp_path, *SLOW, *LADDER)
    wait_for(proc, lambda: (tmp_path / "run" / "sim.log").exists(), "the simulator's start")
    out, err = stop_and_check(proc, signal.SIGTERM)
    assert not (tmp_path / "run" / "run_records.jsonl").exists()


def test_sigterm_during_locusts_preflight(tmp_path):
    """A server that accepts the connection and never answers: Locust sits in its preflight."""
    with socket.create_server((LOOPBACK, 0)) as silent:
        host = f"http://{LOOPBACK}:{silent.getsockname()[1]}"
        proc = start_sweep(tmp_path, "--host", host, *LADDER)
        silent.settimeout(60)
        conn, _ = silent.accept()  # the preflight's GET /v1/models
        with conn:
            out, err = stop_and_check(proc, signal.SIGTERM)
    log = (tmp_path / "run" / "locust.log").read_text()
    assert "the run stopped before its last rung finished" in log
    assert "Shutting down (exit code 4)" in log  # Locust's own code too: not 0 as before
    assert out == ""


def test_sighup_before_the_first_record_prints_the_ladder(tmp_path):
    """The first rung started, no request has ended: the table lists every rung, marked."""
    proc = start_sweep(tmp_path, *SLOW, *LADDER, "--warmup-requests", "0")
    wait_for(proc, lambda: bool(stages(tmp_path)), "the first rung's start")
    assert records_of(tmp_path) == []
    out, err = stop_and_check(proc, signal.SIGHUP)
    marks = [line.split()[0] for line in out.splitlines()[1:4]]
    assert marks == [f"{RUNGS[0]}!", f"{RUNGS[1]}~", f"{RUNGS[2]}~"], out


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_stopped_mid_rung_prints_the_finished_rungs(tmp_path, sig):
    """SIGHUP (the terminal closed) stops the run as SIGTERM does."""
    proc = start_sweep(tmp_path, *SLOW, *LADDER, "--warmup-requests", "0")
    wait_for(proc, lambda: any(r.rung == 1 for r in records_of(tmp_path)), "a record of the second rung")
    out, err = stop_and_check(proc, sig)
    lines = out.splitlines()
    assert lines[1].split()[:4] == [str(RUNGS[0]), *lines[1].split()[1:3], str(24 * RUNGS[0] * PER_USER)]
    assert lines[2].split()[0] == f"{RUNGS[1]}!"  # the rung that was cut
    assert lines[3].split()[0] == f"{RUNGS[2]}~"  # the rung that never started
    assert "~ rung not run (the run stopped, or has not reached it yet): rung03 c3" in out
    finished = [r for r in records_of(tmp_path) if r.rung == 0]
    assert len(finished) == RUNGS[0] * PER_USER and all(r.ok for r in finished)
    assert err.strip().splitlines()[-1] == "llmload sweep: the run did not finish every rung (exit code 4)"


def test_sigterm_between_rungs(tmp_path):
    proc = start_sweep(tmp_path, *SLOW, *LADDER, "--warmup-requests", "0")

    def first_rung_done() -> bool:
        done = stages(tmp_path)
        return bool(done) and done[0]["finished"] is not None

    wait_for(proc, first_rung_done, "the end of the first rung")
    out, err = stop_and_check(proc, signal.SIGTERM)
    notes = [line for line in out.splitlines() if line.startswith(("!", "~"))]
    assert notes and not any(f"rung01 c{RUNGS[0]}" in line for line in notes)  # finished: no mark
    assert out.splitlines()[3].split()[0] == f"{RUNGS[2]}~"


def test_sigkill_of_the_sweep_leaves_no_orphan(tmp_path):
    """SIGKILL cannot be handled: the kernel sends SIGTERM to Locust and the simulator instead
    (PR_SET_PDEATHSIG), and Locust still writes the finished rung's files on its way out."""
    proc = start_sweep(tmp_path, *SLOW, *LADDER, "--warmup-requests", "0")
    wait_for(proc, lambda: any(r.rung == 1 for r in records_of(tmp_path)), "a record of the second rung")
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2  # the simulator and Locust
    proc.kill()
    proc.communicate(timeout=GONE_WITHIN_S)
    gone, alive = psutil.wait_procs(children, timeout=GONE_WITHIN_S)
    for child in alive:
        child.kill()
    assert alive == []
    finished = [r for r in records_of(tmp_path) if r.rung == 0]
    assert len(finished) == RUNGS[0] * PER_USER and all(r.ok for r in finished)
    assert "the run stopped before its last rung finished" in (tmp_path / "run" / "locust.log").read_text()
    # the kernel stopped the simulator too: the streams it cut are the generator's end, not the
    # server's failures (they used to be recorded as `drop`s of the cut rung)
    assert [r.outcome for r in records_of(tmp_path) if not r.ok] == []
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(tmp_path / "run"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    measured = [row for row in json.loads(table.stdout) if not row.get("not_run")]
    assert [(row["rung"], row["failures"]) for row in measured] == [(0, 0), (1, 0)], table.stderr


def test_a_second_signal_hurries_the_stop(tmp_path):
    """The first SIGTERM asks Locust to stop (SIGINT: final CSVs, summary, a second or more); a
    second one right after kills it at once instead of being ignored."""
    proc = start_sweep(tmp_path, *SLOW, *LADDER, "--warmup-requests", "0")
    wait_for(proc, lambda: any(r.rung == 0 for r in records_of(tmp_path)), "a record of the first rung")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # less than Locust's own shutdown (one CSV interval at least): it is still stopping
    out, err = stop_and_check(proc, signal.SIGTERM)
    log = (tmp_path / "run" / "locust.log").read_text()
    assert "Shutting down (exit code" not in log, log[-2000:]  # killed before its summary
    assert err.strip().splitlines()[-1] == "llmload sweep: the run did not finish every rung (exit code 4)"


def test_a_stop_at_a_rung_boundary_keeps_the_finished_rung_complete(tmp_path):
    """Every request of the first rung recorded, the ladder's next tick (up to 1 s later) not yet
    run, then SIGTERM: the rung is complete, not partial. The signal lands in that window unless
    the tick came first; up to three sweeps are run until one caught it."""
    caught = 0
    for attempt in range(3):
        run = tmp_path / f"try{attempt}"
        run.mkdir()
        proc = start_sweep(run, *SLOW, *LADDER, "--warmup-requests", "0")
        wait_for(
            proc,
            lambda run=run: len([r for r in records_of(run) if r.rung == 0]) == RUNGS[0] * PER_USER,
            "every record of the first rung",
        )
        marked_already = bool(stages(run)) and stages(run)[0]["finished"] is not None
        out, err = stop_and_check(proc, signal.SIGTERM)
        assert out.splitlines()[1].split()[0] == str(RUNGS[0]), out  # no `!`: complete
        assert not any(f"rung01 c{RUNGS[0]}" in line for line in out.splitlines() if line.startswith("!"))
        assert stages(run)[0]["finished"] is not None
        caught += not marked_already
        if caught:
            break
    assert caught, "the ladder's tick came before the signal in every try"


BREACH = "min_agg_tok_s: 1000000000"


@pytest.mark.parametrize(
    ("threshold", "code"), [("", exit_codes.INTERRUPTED), (BREACH, exit_codes.REQUEST_FAILURES)]
)
def test_a_soak_stopped_early_keeps_its_verdict(tmp_path, sim_start, threshold, code):
    """`locust` on a soak ladder, SIGTERM before its duration: no breach is 'incomplete' (the
    interrupted code), a breach stays a breach (1): the verdict owns the exit code."""
    sim = sim_start(accept_len=1, base_ms=5, per_seq_ms=0)
    ladder = tmp_path / "soak.yaml"
    ladder.write_text(f"rungs: [2]\nduration: 60\nmax_tokens: 8\nsoak: {{window_s: 1, {threshold}}}\n")
    prefix = tmp_path / "run"
    cmd = locust_command(sim.url, prefix, LOCUSTFILES["completions"], ["--ladder", str(ladder)])
    with (tmp_path / "locust.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        records = tmp_path / "run_records.jsonl"
        wait_for(proc, lambda: records.exists() and len(read_records(records)[0]) > 60, "3 s of records")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GONE_WITHIN_S) == code, (tmp_path / "locust.log").read_text()[-2000:]


def _effective_timeout(module: Any, argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The `timeout` a command's main hands to run_sweep (its default when not passed)."""
    calls: list[dict[str, Any]] = []

    def fake_run_sweep(**kwargs: Any) -> SweepRun:
        calls.append(inspect.signature(run_sweep).bind(**kwargs).arguments | kwargs)
        prefix = tmp_path / "run" / "run"
        return SweepRun(prefix, exit_codes.OK, None, tmp_path / "locust.log")

    monkeypatch.setattr(module, "run_sweep", fake_run_sweep)
    module.main(argv)
    (call,) = calls
    return call.get("timeout", inspect.signature(run_sweep).parameters["timeout"].default)


def test_sweep_and_capacity_have_no_hidden_time_limit(tmp_path, monkeypatch):
    """They ran with run_sweep's default of 1800 s: a longer sweep or search was stopped and
    reported `stopped by SIGTERM` though nobody sent a signal."""
    from llmload.cli import capacity, sweep

    run_dir = ["--run-dir", str(tmp_path / "run")]
    assert _effective_timeout(sweep, run_dir, monkeypatch, tmp_path) is None
    ladder = tmp_path / "capacity.yaml"
    ladder.write_text("mode: capacity\nmax_tokens: 8\nslo: {tpot_ms: 50}\n")
    argv = ["--ladder", str(ladder), *run_dir]
    assert _effective_timeout(capacity, argv, monkeypatch, tmp_path) is None


def test_a_run_stopped_by_its_time_limit_says_so(tmp_path, capsys):
    """run_sweep's `timeout` is a cap a caller asks for; its stop is reported as that cap, not as
    a signal nobody sent."""
    run = run_sweep(run_dir=tmp_path / "run", sim=SLOW_SIM, locust_args=LADDER, timeout=3.0)
    assert (run.stopped_by, run.time_limit) == (None, 3.0)
    assert report(run, "table") == exit_codes.INTERRUPTED
    err = capsys.readouterr().err
    assert "llmload sweep: stopped by its time limit (3 s)" in err, err
    assert "SIGTERM" not in err


# Locusts started at once from greenlets of one OS thread (gevent monkey-patched, as Locust's import
# leaves a process: a pool's "threads" are greenlets then). gevent's Popen yields while it waits
# for the exec, so the starts overlap. In a process of its own: this file alone leaves pytest
# unpatched, and patching it would reach the tests after. Masks are printed as signal numbers.
AT_ONCE = """
import json, signal, subprocess, sys
from gevent import monkey
monkey.patch_all()
import gevent
from llmload.runner.sweep_run import _start_locust
from llmload.core.status_pipe import StatusPipe

STOP = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK if sys.argv[1] == "blocked" else signal.SIG_UNBLOCK, STOP)
before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
started = []
with StatusPipe() as status:
    def start():
        started.append(_start_locust([sys.executable, "-c", ""], subprocess.DEVNULL, status))
    try:
        for _ in range(3):  # which start sets the mask back last varies: three bursts of four
            gevent.joinall([gevent.spawn(start) for _ in range(4)], timeout=30, raise_error=True)
        for proc in started:
            proc.wait(timeout=30)
    finally:
        for proc in started:
            proc.kill()
after = signal.pthread_sigmask(signal.SIG_BLOCK, [])
later = subprocess.Popen(["sleep", "30"])  # a child started afterwards: a simulator, a server
try:
    with open(f"/proc/{later.pid}/status") as status_file:
        sigblk = next(int(line.split()[1], 16) for line in status_file if line.startswith("SigBlk:"))
    later.terminate()
    try:
        ended = later.wait(timeout=5)
    except subprocess.TimeoutExpired:
        ended = None
finally:
    later.kill()
    later.wait(timeout=5)
print(json.dumps({
    "started": len(started),
    "before": sorted(before), "after": sorted(after),
    "later_blocked": [s for s in sorted(STOP) if sigblk >> (s - 1) & 1],
    "later_ended_by": ended,
}))
"""


@pytest.mark.parametrize("mask", ["unblocked", "blocked"])
def test_locust_starts_at_once_leave_the_signal_mask_as_it_was(mask):
    """Each start held the stop signals and set back the mask it found: the second greenlet found
    the first one's hold, set it back last, and left the thread with SIGTERM blocked for good, so
    every child started afterwards (a simulator, a server) ignored the SIGTERM that stops it. A
    thread whose runner had them blocked keeps them blocked: the mask is put back, not cleared."""
    done = subprocess.run([sys.executable, "-c", AT_ONCE, mask], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["started"] == 12
    stop = sorted([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
    assert seen["before"] == (stop if mask == "blocked" else []), seen
    assert seen["after"] == seen["before"], seen
    if mask == "unblocked":
        assert seen["later_blocked"] == [], seen
        assert seen["later_ended_by"] == -signal.SIGTERM, seen
