"""Run a long command (a pip download, a CMake build) so that it never outlives its caller.

A build is many processes (cmake, make, the compilers), started in a process group of their own
so that a timeout can kill all of them at once. The same separation means a signal to the
caller's terminal does not reach them, and a caller that is killed outright (SIGKILL, the OOM
killer, a CI runner's timeout) would leave the build running as an orphan, next to the build the
next caller starts once the file lock is free.

So the command runs under a guard: this file, run as a script, leads the command's process group
and holds the read end of a pipe whose write end only the caller has. However the caller dies,
the kernel closes that end; the guard reads end-of-file and kills the whole group. The guard uses
only the standard library (it runs as `python -I build_guard.py`, whatever the caller's path is).

`run_logged()` is the caller's side: the output appended to a log file, a progress line every
`PROGRESS_EVERY_S`, a timeout, and the group killed on every way out (timeout, exception, signal)
before it returns or raises.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PROGRESS_EVERY_S = 30.0  # a long build reports its progress this often
WATCH_EVERY_S = 0.2  # how often the guard looks at its command between pipe checks

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The default progress callback: report nothing."""


class BuildError(RuntimeError):
    """Fetching or building failed; the message names the log file."""


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file ("" if it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def build_percent(log_path: Path) -> str | None:
    """The last `[ NN%]` progress mark CMake's build wrote into the log, if any."""
    marks = [
        line[:6] for line in tail(log_path, 50).splitlines() if line.startswith("[") and "%]" in line[:6]
    ]
    return marks[-1].strip("[] ") if marks else None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_logged(
    cmd: Sequence[str], log_path: Path, timeout: float, what: str, progress: Progress = quiet
) -> None:
    """Run cmd under the guard with its output appended to log_path; BuildError naming the log
    (and its tail) when it fails or overruns `timeout`. Every PROGRESS_EVERY_S seconds `progress`
    gets a line saying how far it got (CMake's percentage, when the log has one) and for how long."""
    watch_read, watch_write = os.pipe()
    with log_path.open("ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            guard = subprocess.Popen(
                [sys.executable, "-I", __file__, str(watch_read), "--", *cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(watch_read,),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(watch_write)
            raise BuildError(f"{what} could not start ({exc}); see {log_path}") from exc
        finally:
            os.close(watch_read)
    try:
        returncode = _wait(guard, log_path, timeout, what, progress)
    finally:
        os.close(watch_write)
        # Still running (a timeout, an exception, a signal): the guard is not reaped, so its pid
        # still names the group, and the group is killed. A guard that exited has already
        # stopped what its command left behind (guard_main), so a reaped pid is never signalled.
        if guard.returncode is None:
            _kill_group(guard.pid)
            guard.wait()
    if returncode != 0:
        raise BuildError(f"{what} failed (exit {returncode}); see {log_path}:\n{tail(log_path)}")


def _wait(
    guard: subprocess.Popen[bytes], log_path: Path, timeout: float, what: str, progress: Progress
) -> int:
    """The guard's exit code, with a progress line every PROGRESS_EVERY_S; BuildError at timeout.

    Polls rather than blocks: a process where gevent is patched in reaps children itself, and
    `Popen.poll` is the call that copes with that."""
    started = time.monotonic()
    next_report = started + PROGRESS_EVERY_S
    while (returncode := guard.poll()) is None:
        now = time.monotonic()
        if now - started >= timeout:
            raise BuildError(f"{what} timed out after {timeout:g} s; see {log_path}:\n{tail(log_path)}")
        if now >= next_report:
            next_report = now + PROGRESS_EVERY_S
            percent = build_percent(log_path)
            progress(f"{what}: {percent + ' done, ' if percent else ''}{(now - started) / 60:.1f} min so far")
        time.sleep(WATCH_EVERY_S)
    return returncode


def guard_main(argv: Sequence[str]) -> int:
    """The guard: `build_guard.py FD -- CMD...`. Runs CMD in this process's group and returns its
    exit code (128 + N for a death by signal N); kills the group once FD reads end-of-file."""
    watch_fd = int(argv[0])
    cmd = list(argv[2:]) if len(argv) > 2 and argv[1] == "--" else []
    if not cmd:
        print("build_guard: usage: build_guard.py FD -- CMD...", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    # set after the command started, so that it does not inherit it: the guard outlives the
    # SIGTERM it sends its own group once the command is done
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        readable, _, _ = select.select([watch_fd], [], [], WATCH_EVERY_S)
        if readable:  # the caller never writes: readable means it is gone
            _kill_group(os.getpgrp())  # this guard too
        returncode = child.poll()
        if returncode is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgrp(), signal.SIGTERM)  # whatever the command left running
            return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(guard_main(sys.argv[1:]))
