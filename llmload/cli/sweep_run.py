"""Run a whole sweep as one command: start the simulator unless a host is named, run Locust
headless over the ladder, stop the simulator by PID, and leave the run's files in one folder.

Used by `llmload sweep` (`make sweep`) and by the end-to-end tests, so what the tests
check is exactly what a user runs: a real `locust` process talking to a real server over loopback.

The command owns the processes it starts. On SIGINT or SIGTERM (in the main thread) it stops
Locust the way Ctrl+C in its terminal would (SIGINT to its process group: the users stop, the
final CSVs are written), waits `LOCUST_GRACE_S`, then kills the group; then it stops the simulator
(SIGTERM, `SIM_GRACE_S`, SIGKILL). Every process is gone within LOCUST_GRACE_S + SIM_GRACE_S (plus
the simulator's start timeout's last health poll, when the signal comes while it starts) of the
signal, whatever it was doing: starting the simulator, Locust's preflight, a rung, between rungs.
Both also get SIGTERM from the kernel if this process dies without cleaning up (SIGKILL):
`servers.process.die_with_parent`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from llmload.cli.progress import Progress
from llmload.core.exit_codes import INTERRUPTED
from llmload.core.run_files import RunFiles
from llmload.core.stop_signals import accept_stop_signals
from llmload.locustfiles import ENDPOINT_LOCUSTFILES, locustfile_path
from llmload.servers.process import die_with_parent, free_port
from llmload.servers.simulator import SimulatorProcess

LOCUSTFILES = {endpoint: locustfile_path(endpoint) for endpoint in ENDPOINT_LOCUSTFILES}
LOCUST_GRACE_S = 5.0  # Locust's own shutdown: stop users, one CSV interval (~1.3 s), summary
SIM_GRACE_S = 3.0
PROGRESS_POLL_S = 1.0  # how often the progress line is refreshed
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class SweepRun:
    """Where a finished (or stopped) run left its files."""

    prefix: Path  # Locust's --csv prefix; records are <prefix>_records.jsonl
    returncode: int  # Locust's exit code (INTERRUPTED when Locust never started)
    truth_log: Path | None  # the simulator's ground truth, when the simulator was used
    log: Path  # Locust's output
    stopped_by: int | None = None  # the signal (SIGINT, SIGTERM) that stopped the run, if any
    records_file: Path | None = None  # the records, when not at <prefix>_records.jsonl (--records)

    @property
    def files(self) -> RunFiles:
        return RunFiles(self.prefix, self.records_file)

    @property
    def records(self) -> Path:
        return self.files.records


def default_run_dir() -> Path:
    """reports/sweep-<time>/ under the current directory (where Locust's own --csv files go too)."""
    return Path("reports") / time.strftime("sweep-%Y%m%d-%H%M%S")


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the sweep (a BaseException, as KeyboardInterrupt: no
    `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """While entered (main thread only), the first SIGINT/SIGTERM raises `Interrupted`; once
    disarmed (the cleanup has begun) signals are only recorded, so none cuts a cleanup short."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.armed:
            self.armed = False
            raise Interrupted(signum)

    def disarm(self) -> None:
        self.armed = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
            self.armed = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.armed = False
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


@contextlib.contextmanager
def target(
    host: str | None, run_dir: Path, sim: Mapping[str, Any], sim_args: Sequence[str] = ()
) -> Iterator[tuple[str, Path | None]]:
    """Yield (host, truth log): the given host, or a simulator started for the run."""
    if host:
        yield host, None
        return
    truth = run_dir / "sim_truth.jsonl"
    server = SimulatorProcess(truth_log=truth, log_path=run_dir / "sim.log", extra_args=sim_args, **sim)
    server.process.dies_with_parent = True
    try:
        server.start()  # stops what it started if it fails or is interrupted
        yield server.url, truth
    finally:
        server.stop(SIM_GRACE_S)


def local_master_port(extra: Sequence[str]) -> list[str]:
    """With --processes, a free port for the master and its forked workers (Locust's default, 5557,
    is taken by any other local distributed run on the machine), unless the command names one."""
    if "--processes" not in extra or any(a.startswith("--master-bind-port") for a in extra):
        return []
    port = str(free_port())
    return ["--master-bind-port", port, "--master-port", port]


def locust_command(host: str, prefix: Path, locustfile: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--host",
        host,
        "--csv",
        str(prefix),
        "--only-summary",
        *local_master_port(extra),
        *extra,
    ]


def _child_setup(held: set[int | signal.Signals]) -> None:
    """In Locust's process, before it runs: the signals the sweep held, and death with the sweep."""
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    accept_stop_signals()  # even if the sweep's own parent left them blocked or ignored
    die_with_parent()


def _start_locust(cmd: Sequence[str], out: Any) -> subprocess.Popen[bytes]:
    """Locust in its own process group (a terminal's Ctrl+C reaches only this process, which
    forwards it); signals are held back until its PID is known, so no stop can miss it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: _child_setup(held),
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stop_locust(proc: subprocess.Popen[bytes], grace: float = LOCUST_GRACE_S) -> int:
    """Ctrl+C to Locust's process group, then SIGKILL to it after `grace` seconds; its exit code."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, grace)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
    return proc.wait()


def _wait(proc: subprocess.Popen[bytes], timeout: float, progress_of: RunFiles | None) -> int:
    """proc's exit code; meanwhile, with `progress_of` (the run's files), its progress line."""
    if progress_of is None:
        return proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    with Progress(progress_of) as progress:
        while True:
            try:
                return proc.wait(timeout=max(0.0, min(PROGRESS_POLL_S, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
                progress.poll()


def run_sweep(
    *,
    host: str | None = None,
    run_dir: Path | None = None,
    locust_args: Sequence[str] = (),
    sim: Mapping[str, Any] | None = None,
    sim_args: Sequence[str] = (),
    endpoint: str = "completions",
    timeout: float = 1800.0,
    progress: bool = False,
    records: RunFiles | None = None,
) -> SweepRun:
    """Run the ladder headless against host (or a fresh simulator with the `sim` keyword flags,
    e.g. {"accept_len": 1, "faults": {"drop": 0.2}}, and `sim_args` in CLI form) and return where
    it wrote. A run longer than `timeout` is stopped as a SIGTERM would stop it. With `progress`,
    a progress line follows the run on stderr when stderr is a terminal (llmload.cli.progress).
    `records`: where the run's records land when `locust_args` send them elsewhere (--records,
    --csv; `llmload.cli.sweep.records_at`), else <run_dir>/run_records.jsonl."""
    run_dir = Path(run_dir or default_run_dir())
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = run_dir / "run"
    files = records or RunFiles(prefix)
    log = run_dir / "locust.log"
    returncode, truth_log, stopped_by = INTERRUPTED, None, None
    with StopSignals() as signals:
        try:
            with target(host, run_dir, sim or {}, sim_args) as (url, truth), log.open("wb") as out:
                truth_log = truth
                proc = _start_locust(locust_command(url, prefix, LOCUSTFILES[endpoint], locust_args), out)
                try:
                    returncode = _wait(proc, timeout, files if progress else None)
                except Interrupted as stop:
                    stopped_by, returncode = stop.signum, stop_locust(proc)
                except subprocess.TimeoutExpired:
                    signals.disarm()
                    stopped_by, returncode = signal.SIGTERM, stop_locust(proc)
                signals.disarm()  # the simulator's stop is not cut short by a late signal
        except Interrupted as stop:  # while the simulator started: it is stopped already
            stopped_by = stop.signum
    return SweepRun(files.prefix, returncode, truth_log, log, stopped_by, files.records_file)
