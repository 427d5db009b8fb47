"""Run a whole sweep as one command: start the simulator unless a host is named, run Locust
headless over the ladder, stop the simulator by PID, and leave the run's files in one folder.

Used by `llmload sweep` (`make sweep`) and by the end-to-end tests, so what the tests
check is exactly what a user runs: a real `locust` process talking to a real server over loopback.

The command owns the processes it starts. Its stop signals (SIGINT, SIGTERM, SIGHUP) are only
recorded (`llmload.core.stop_signals.STOPS`) and acted on here, at points where acting is safe:
while the simulator starts (between its health polls), before Locust starts, and every
`STOP_POLL_S` while Locust runs. Then it stops Locust the way Ctrl+C in its terminal would (SIGINT
to its process group: the users stop, the final CSVs are written), waits `LOCUST_GRACE_S`, then
kills the group; then it stops the simulator (SIGTERM, `SIM_GRACE_S`, SIGKILL). A further signal
during the stop hurries it: whatever is still being waited for is killed at once. Every process
is gone within LOCUST_GRACE_S + SIM_GRACE_S (plus the last health poll's timeout, when the signal
comes while the simulator starts) of the signal, whatever it was doing: starting the simulator,
Locust's preflight, a rung, between rungs. Both also get SIGTERM from the kernel if this process
dies without cleaning up (SIGKILL): `servers.process.die_with_parent`; Locust then knows (its
parent is no longer `LAUNCHER_PID_ENV`) that requests failing from then on were cut by the
generator's own end, not by the server (`llmload.loadgen.shutdown`).

A run has no time limit of its own: it lasts as long as its ladder says. `run_sweep(timeout=...)`
is a cap for callers that want one (tests); a run it stops is reported as stopped by that cap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.core.exit_codes import INTERRUPTED, WRITE_FAILED
from llmload.core.files import run_files
from llmload.core.files.run_files import RunFiles
from llmload.core.status_pipe import Status, StatusPipe
from llmload.core.stop_signals import (
    LAUNCHER_PID_ENV,
    RUN_STOP_SIGNALS,
    STOPS,
    StopSignals,
    accept_stop_signals,
)
from llmload.locustfiles import ENDPOINT_LOCUSTFILES, locustfile_path
from llmload.runner.progress import Progress
from llmload.servers.process import (
    STOP_POLL_S,
    ServerStartError,
    StartCancelled,
    die_with_parent,
    free_port,
    wait_or_hurry,
)
from llmload.servers.simulator import SimulatorProcess

LOCUSTFILES = {endpoint: locustfile_path(endpoint) for endpoint in ENDPOINT_LOCUSTFILES}
LOCUST_GRACE_S = 5.0  # Locust's own shutdown: stop users, one CSV interval (~1.3 s), summary
SIM_GRACE_S = 3.0
PROGRESS_POLL_S = 1.0  # how often the progress line is refreshed


@dataclass(frozen=True, slots=True)
class SweepRun:
    """Where a finished (or stopped) run left its files."""

    prefix: Path  # Locust's --csv prefix; records are <prefix>_records.jsonl
    returncode: int  # Locust's exit code (INTERRUPTED when Locust never started)
    truth_log: Path | None  # the simulator's ground truth, when the simulator was used
    log: Path  # Locust's output
    stopped_by: int | None = None  # the signal (SIGINT, SIGTERM, SIGHUP) that stopped the run, if any
    records_file: Path | None = None  # the records, when not at <prefix>_records.jsonl (--records)
    time_limit: float | None = None  # run_sweep's `timeout` (s), when that cap stopped the run
    started_at: float | None = None  # when Locust was started (time.time()); None: it was not
    told: tuple[Status, ...] = ()  # what Locust and the simulator told over the status pipe
    simulator_exit: int | None = None  # the simulator's exit code, when it ended before the run
    simulator_failure: str | None = None  # why the simulator did not start (its last log line)

    @property
    def files(self) -> RunFiles:
        return RunFiles(self.prefix, self.records_file)

    @property
    def records(self) -> Path:
        return self.files.records


def default_run_dir() -> Path:
    """reports/sweep-<time>/ under the current directory (where Locust's own --csv files go too)."""
    return Path("reports") / time.strftime("sweep-%Y%m%d-%H%M%S")


def more_signals_than(signals: StopSignals, count: int) -> Callable[[], bool]:
    """True once `signals` has recorded more than `count` stop signals: a stop is hurried."""
    return lambda: len(signals.received) > count


@contextlib.contextmanager
def target(
    host: str | None,
    run_dir: Path,
    sim: Mapping[str, Any],
    sim_args: Sequence[str] = (),
    signals: StopSignals | None = None,
) -> Iterator[tuple[str, Path | None]]:
    """Yield (host, truth log): the given host, or a simulator started for the run (`serve`)."""
    with serve(host, run_dir, sim, sim_args, signals) as (url, server):
        yield url, None if server is None else server.truth_log


@contextlib.contextmanager
def serve(
    host: str | None,
    run_dir: Path,
    sim: Mapping[str, Any],
    sim_args: Sequence[str] = (),
    signals: StopSignals | None = None,
    status: StatusPipe | None = None,
) -> Iterator[tuple[str, SimulatorProcess | None]]:
    """Yield (host, simulator): the given host and None, or a simulator started for the run
    (its truth log in run_dir; `status`: the pipe it tells why it stopped). With `signals`, a stop
    signal while the simulator starts raises StartCancelled (the simulator is stopped already),
    and one more signal than those that stopped the run hurries its stop."""
    if host:
        yield host, None
        return
    truth = run_dir / run_files.SIM_TRUTH
    server = SimulatorProcess(
        truth_log=truth, log_path=run_dir / run_files.SIM_LOG, extra_args=sim_args, **sim
    )
    server.process.dies_with_parent = True
    if status is not None:
        server.process.env = status.child_env()
        server.process.pass_fds = status.pass_fds
    if signals is not None:
        server.process.cancel = more_signals_than(signals, 0)
    try:
        if signals is not None and signals.received:
            raise StartCancelled("stopped before the simulator started")
        server.start()  # stops what it started if it fails or is cancelled
        yield server.url, server
    finally:
        hurry = None if signals is None else more_signals_than(signals, min(len(signals.received), 1))
        server.stop(SIM_GRACE_S, hurry)


def tls_args(server: SimulatorProcess | None, locust_args: Sequence[str]) -> list[str]:
    """A simulator serving HTTPS (`--sim ssl_certfile=...`) is trusted by its own certificate
    (`--ca-bundle`), unless the command says how to trust it (--ca-bundle, --tls-insecure)."""
    if server is None or server.certfile is None:
        return []
    if any(a.split("=")[0] in ("--ca-bundle", "--tls-insecure") for a in locust_args):
        return []
    return ["--ca-bundle", server.certfile]


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


# per OS thread (`threading.get_native_id`): [the holders, the mask from before the first one]
_HOLDS: dict[int, tuple[int, set[int | signal.Signals]]] = {}


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[set[int | signal.Signals]]:
    """The stop signals blocked in this OS thread while entered; yields the mask from before.

    A signal mask belongs to the OS thread, which its greenlets share (gevent: Locust's import
    monkey-patches it in, and a pool's "threads" are then greenlets), and gevent's `Popen` yields
    to them until the child has exec'd. So the hold is counted per OS thread: the first entrant
    blocks and keeps the mask it found, the last leaver puts that mask back. (Each start setting
    back the mask it found left the thread blocked for good when two overlapped, and every later
    child with SIGTERM blocked.) No lock: nothing here yields; another OS thread has its own entry."""
    thread = threading.get_native_id()
    count, before = _HOLDS.get(thread, (0, set()))
    if count == 0:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, RUN_STOP_SIGNALS)
    _HOLDS[thread] = (count + 1, before)
    try:
        yield before
    finally:
        count, before = _HOLDS.pop(thread)
        if count > 1:
            _HOLDS[thread] = (count - 1, before)
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _start_locust(cmd: Sequence[str], out: Any, status: StatusPipe) -> subprocess.Popen[bytes]:
    """Locust in its own process group (a terminal's Ctrl+C reaches only this process, which
    forwards it); signals are held back until its PID is known, so no stop can miss it. It tells
    why it stops over `status`."""
    with _stop_signals_held() as before:
        return subprocess.Popen(
            cmd,
            env={**os.environ, LAUNCHER_PID_ENV: str(os.getpid()), **status.child_env()},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=status.pass_fds,
            preexec_fn=lambda: _child_setup(before),
        )


def stop_locust(
    proc: subprocess.Popen[bytes], grace: float = LOCUST_GRACE_S, hurry: Callable[[], bool] | None = None
) -> int:
    """Ctrl+C to Locust's process group, then SIGKILL to it after `grace` seconds (at once when
    `hurry()` turns True); its exit code."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if wait_or_hurry(proc, grace, hurry):
            break
    return proc.wait()


def _wait(
    proc: subprocess.Popen[bytes],
    signals: StopSignals,
    timeout: float | None,
    progress_of: RunFiles | None,
    watch: Watch,
) -> str | None:
    """Wait until proc exits (None), a stop signal is recorded ("signal"), a child tells that a
    file of the run could not be written ("write"), the simulator ends ("simulator") or `timeout`
    seconds pass ("time"); meanwhile, with `progress_of` (the run's files), its progress line."""
    deadline = None if timeout is None else time.monotonic() + timeout
    progress = Progress(progress_of) if progress_of is not None else None
    next_poll = time.monotonic() + PROGRESS_POLL_S
    with progress if progress is not None else contextlib.nullcontext():
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_POLL_S)
                return None
            if signals.received:
                return "signal"
            if why := watch.trouble():
                return why
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "time"
            if progress is not None and now >= next_poll:
                progress.poll()
                next_poll = now + PROGRESS_POLL_S


def run_sweep(
    *,
    host: str | None = None,
    run_dir: Path | None = None,
    locust_args: Sequence[str] = (),
    sim: Mapping[str, Any] | None = None,
    sim_args: Sequence[str] = (),
    endpoint: str = "completions",
    timeout: float | None = None,
    progress: bool = False,
    records: RunFiles | None = None,
) -> SweepRun:
    """Run the ladder headless against host (or a fresh simulator with the `sim` keyword flags,
    e.g. {"accept_len": 1, "faults": {"drop": 0.2}}, and `sim_args` in CLI form) and return where
    it wrote. No time limit unless `timeout` (seconds) is given; a run longer than that is stopped
    as a SIGTERM would stop it and says so (`SweepRun.time_limit`). With `progress`, a progress
    line follows the run on stderr when stderr is a terminal (llmload.runner.progress).
    `records`: where the run's records land when `locust_args` send them elsewhere (--records,
    --csv; `llmload.runner.sweep_input.records_at`), else <run_dir>/run_records.jsonl."""
    run_dir = Path(run_dir or default_run_dir())
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = run_dir / "run"
    files = records or RunFiles(prefix)
    log = run_dir / run_files.LOCUST_LOG
    returncode, truth_log, stopped_by, time_limit, started_at = INTERRUPTED, None, None, None, None
    simulator_exit, simulator_failure = None, None
    with STOPS as signals, StatusPipe() as status:
        try:
            with serve(host, run_dir, sim or {}, sim_args, signals, status) as (url, server):
                truth_log = None if server is None else server.truth_log
                with log.open("wb") as out:
                    if signals.received:  # while the simulator started: Locust is not started
                        stopped_by = signals.first
                    else:
                        extra = [*locust_args, *tls_args(server, locust_args)]
                        cmd = locust_command(url, prefix, LOCUSTFILES[endpoint], extra)
                        started_at = time.time()
                        proc = _start_locust(cmd, out, status)
                        watch = Watch(status, server)
                        why = _wait(proc, signals, timeout, files if progress else None, watch)
                        # a signal after Locust ended on its own only hurries the simulator's stop
                        if why is None:
                            returncode = proc.returncode
                        else:
                            stopped_by = signals.first if why == "signal" else None
                            time_limit = timeout if why == "time" else None
                            hurry = more_signals_than(signals, len(signals.received))
                            returncode = stop_locust(proc, hurry=hurry)
                        simulator_exit = watch.simulator_exit()
        except StartCancelled:  # while the simulator started: it is stopped already
            stopped_by = signals.first
        except ServerStartError as e:  # it is stopped already; its log says why
            simulator_failure = str(e).splitlines()[0]
            simulator_exit = e.returncode
        status.close()
        told = tuple(status.received)
    return SweepRun(
        files.prefix,
        returncode,
        truth_log,
        log,
        stopped_by=stopped_by,
        records_file=files.records_file,
        time_limit=time_limit,
        started_at=started_at,
        told=told,
        simulator_exit=simulator_exit,
        simulator_failure=simulator_failure,
    )


class Watch:
    """What ends a run besides Locust itself and a signal: a child that tells a file of the run
    could not be written (over the status pipe), a simulator that ended while Locust runs."""

    def __init__(self, status: StatusPipe, server: SimulatorProcess | None) -> None:
        self.status = status
        self.server = server

    def simulator_exit(self) -> int | None:
        """The simulator's exit code once it has ended; None while it runs (or without one)."""
        proc = None if self.server is None else self.server.process.proc
        return None if proc is None else proc.poll()

    def trouble(self) -> str | None:
        """ "write" once a child told WRITE_FAILED, "simulator" once the simulator ended, else None."""
        self.status.read()
        if any(told.exit_code == WRITE_FAILED for told in self.status.received):
            return "write"
        return "simulator" if self.simulator_exit() is not None else None
