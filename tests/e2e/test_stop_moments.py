"""A stop is never lost: SIGINT or SIGTERM at 30 seeded random moments of the first 5 s of
`llmload sweep` (the simulator's start, Locust's start, its preflight, the first rung) always
ends the sweep with the interrupted code (4), the stop named, no traceback, and no process of
the run alive 10 s after the signal.

Ten of the moments fall within a few milliseconds after the simulator's log file appears, that
is while the sweep forks the simulator: a stop raised from the signal handler there landed in
logging's at-fork hook, was swallowed ("Exception ignored in: <function _releaseLock>") and the
run went on to exit 0. The other twenty are spread over the first 5 s. Two sweeps run at a time.
Through the real command line (`python -m llmload sweep`) against the simulator.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from llmload.core import exit_codes

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SEED = 26
GONE_WITHIN_S = 10.0
FIRST_S = 5.0
AT_FORK = 10  # moments right after the simulator's log appears
SPREAD = 20  # moments over the first FIRST_S seconds
SLOW = ["--sim", "accept_len=1", "--sim", "base_ms=20", "--sim", "per_seq_ms=0"]
LADDER = ["--rungs", "2,2,3", "--requests-per-user", "3", "--max-tokens", "24", "--warmup-requests", "0"]


@dataclass(frozen=True)
class Moment:
    case: int
    sig: signal.Signals
    after: str  # "start": the sweep's handlers installed; "sim.log": the simulator's log appeared
    delay_s: float

    def __str__(self) -> str:
        return f"#{self.case} {self.sig.name} {self.delay_s * 1000:.0f} ms after {self.after}"


def moments() -> list[Moment]:
    rng = random.Random(SEED)
    sigs = (signal.SIGINT, signal.SIGTERM)
    near = [Moment(i, sigs[i % 2], "sim.log", rng.uniform(0.0, 0.015)) for i in range(AT_FORK)]
    spread = [Moment(AT_FORK + i, sigs[i % 2], "start", rng.uniform(0.0, FIRST_S)) for i in range(SPREAD)]
    return near + spread


def catches_sigterm(pid: int) -> bool:
    """The process has a handler for SIGTERM (its stop recorder is in place): from then on it is
    `llmload sweep` and no longer the Python interpreter starting up."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def of_the_run(run_dir: Path) -> list[psutil.Process]:
    """Every live process whose command line names the run's folder (the simulator's truth log,
    Locust's --csv prefix, Locust's forked workers), wherever it was reparented."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(run_dir) in arg for arg in proc.info["cmdline"] or ()) and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[str], limit_s: float = 60.0) -> bool:
    """Poll condition until True; False if the sweep ended first."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


def stop_at(moment: Moment, tmp_path: Path) -> str | None:
    """Run one sweep, signal it at the moment; None if all is well, else what went wrong."""
    run_dir = tmp_path / f"case{moment.case:02d}"
    cmd = [sys.executable, "-m", "llmload", "sweep", "--run-dir", str(run_dir), *SLOW, *LADDER]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        if not wait_until(lambda: catches_sigterm(proc.pid), proc):
            return f"the sweep ended ({proc.returncode}) before it set its handlers"
        if moment.after == "sim.log" and not wait_until((run_dir / "sim.log").exists, proc):
            return f"the sweep ended ({proc.returncode}) before the simulator started"
        time.sleep(moment.delay_s)
        t_signal = time.monotonic()
        proc.send_signal(moment.sig)
        try:
            out, err = proc.communicate(timeout=GONE_WITHIN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return f"the sweep still ran {GONE_WITHIN_S:g} s after the signal\n{out}\n{err}"
        left = of_the_run(run_dir)
        while left and time.monotonic() - t_signal < GONE_WITHIN_S:
            time.sleep(0.1)
            left = of_the_run(run_dir)
        problems = []
        if proc.returncode != exit_codes.INTERRUPTED:
            problems.append(f"exit code {proc.returncode}, not {exit_codes.INTERRUPTED}")
        if f"stopped by {moment.sig.name}" not in err:
            problems.append(f"no 'stopped by {moment.sig.name}' line")
        if "Traceback" in out + err or "Exception ignored" in err:
            problems.append("a traceback")
        if left:
            alive = [(p.pid, (p.info["cmdline"] or [])[:4]) for p in left]
            problems.append(f"still alive {GONE_WITHIN_S:g} s after the signal: {alive}")
        return "; ".join(problems) + f"\nstdout:\n{out}\nstderr:\n{err[-3000:]}" if problems else None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for leftover in of_the_run(run_dir):
            leftover.kill()


def test_a_stop_at_any_moment_of_the_start_is_never_lost(tmp_path: Path) -> None:
    cases = moments()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda m: (m, stop_at(m, tmp_path)), cases))
    failed = [f"{moment}: {problem}" for moment, problem in results if problem is not None]
    summary = f"{len(failed)} of {len(cases)} stops went wrong (seed {SEED}):\n"
    assert not failed, summary + "\n\n".join(failed)
