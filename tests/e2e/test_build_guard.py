"""A build never outlives the process that asked for it (`llmload.servers.build_guard`).

The caller is a real Python process running `run_logged` on a command that leaves grandchildren
(as cmake -> make -> compilers does); the caller then dies by SIGKILL, SIGTERM or SIGINT, and
every process of the build must be gone within seconds, so the next run cannot start a second
build beside an orphaned one. Before the guard, the build's own process group kept running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.paths import REPO

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

GONE_WITHIN_S = 10.0
CALLER = """
import sys
from pathlib import Path
from llmload.servers.build_guard import run_logged
out = Path(sys.argv[1])
script = f"sleep 300 & echo $! >> {out}/pids; sleep 300 & echo $! >> {out}/pids; echo $$ >> {out}/pids; wait"
run_logged(["sh", "-c", script], out / "build.log", 600.0, "fake build")
"""


def alive(pid: int) -> bool:
    """True while pid runs (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.05)


def _default_signals() -> None:
    """SIGINT and SIGTERM as a terminal leaves them: a test runner started in the background of a
    shell without job control inherits SIGINT ignored, and then no Python caller would see it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_the_build_dies_with_its_caller(tmp_path: Path, sig: signal.Signals) -> None:
    pids_file = tmp_path / "pids"
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(tmp_path)],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_default_signals,
    )
    try:
        wait_for(
            lambda: pids_file.exists() and len(pids_file.read_text().split()) == 3, 30.0, "the build started"
        )
        build = [int(pid) for pid in pids_file.read_text().split()]
        assert all(alive(pid) for pid in build)
        os.kill(caller.pid, sig)
        caller.wait(timeout=30)
        wait_for(
            lambda: not any(alive(pid) for pid in build),
            GONE_WITHIN_S,
            f"the build's processes {build} ended after {sig.name} to their caller",
        )
    finally:
        for pid in pids_file.read_text().split() if pids_file.exists() else []:
            if alive(int(pid)):
                os.kill(int(pid), signal.SIGKILL)
        if caller.poll() is None:
            caller.kill()
            caller.wait()


def test_what_a_finished_command_left_running_is_stopped(tmp_path: Path) -> None:
    """A command that exits but leaves a process of its group behind (as a build tool can) does
    not leave it to the next run."""
    from llmload.servers.build_guard import run_logged

    pid_file = tmp_path / "pid"
    run_logged(["sh", "-c", f"sleep 300 & echo $! > {pid_file}"], tmp_path / "log", 60.0, "leaves one")
    left = int(pid_file.read_text())
    wait_for(lambda: not alive(left), GONE_WITHIN_S, f"the process {left} the command left ended")


def test_a_gevent_patched_caller_still_gets_the_exit_code(tmp_path: Path) -> None:
    """Once gevent is patched in (any process that imported Locust), children are reaped behind
    the caller's back; the build must still finish and report a failure as a failure."""
    script = f"""
import gevent.monkey; gevent.monkey.patch_all()
from pathlib import Path
from llmload.servers.build_guard import BuildError, run_logged
run_logged(["sh", "-c", "exit 0"], Path({str(tmp_path / "log")!r}), 60.0, "ok")
try:
    run_logged(["sh", "-c", "sleep 0.3; exit 3"], Path({str(tmp_path / "log")!r}), 60.0, "fails")
except BuildError as e:
    print("BuildError", e)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "BuildError fails failed" in done.stdout
