"""How a sweep's run ended, said once: its exit code and the one line that says why.

`llmload sweep` and `llmload capacity` run Locust (and the simulator) through
`llmload.runner.sweep_run.run_sweep`; what they print about the end of the run, and the code they
exit with, come from `ending(run)`, so the two commands cannot drift apart. In order:
- **ended**: a file of the run could not be written (told by Locust or the simulator over the
  status pipe), the simulator did not start, or it ended while Locust ran (`ended_by`);
- **stopped**: a stop signal (SIGINT, SIGTERM, SIGHUP) or `run_sweep`'s time limit stopped it;
- **refused**: Locust refused its input (BAD_INPUT): the reason its run file gives, else its log;
- **crashed**: Locust ended with a code that is none of llmload's (killed, crashed): INTERRUPTED;
- **finished**: Locust's own end with one of llmload's codes (`llmload.core.exit_codes`).

`run_errors(run)`: the errors Locust recorded (told over the pipe, then its run file's);
`unmeasured(run)`: a run stopped before its first record, as a table of its ladder.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from llmload.analysis.run.postprocess import RunResult, missing_rungs
from llmload.core.exit_codes import BAD_INPUT, EXIT_CODES, INTERRUPTED, WRITE_FAILED
from llmload.core.files.run_errors import KINDS, RunError
from llmload.core.files.run_files import SIM_LOG
from llmload.core.files.run_info import RunInfo, read_run_info
from llmload.runner.sweep_run import SweepRun

ENDED, STOPPED, REFUSED, CRASHED, FINISHED = "ended", "stopped", "refused", "crashed", "finished"


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run ended: `kind` (module docstring), the command's exit `code`, and the one `line`
    that says why (None when Locust ended on its own with one of llmload's codes)."""

    kind: str
    code: int
    line: str | None = None


def ending(run: SweepRun, errors: list[RunError] | None = None) -> Ending:
    """How `run` ended (module docstring); `errors`: its `run_errors`, when already read."""
    ended = ended_by(run)
    if ended is not None:
        return Ending(ENDED, *ended)
    if run.stopped_by is not None or run.time_limit is not None:
        cause = (
            signal.Signals(run.stopped_by).name
            if run.stopped_by is not None
            else f"its time limit ({run.time_limit:g} s)"
        )
        stopped = "Locust was stopped" if run.truth_log is None else "Locust and the simulator were stopped"
        return Ending(STOPPED, INTERRUPTED, f"stopped by {cause}: {stopped}")
    if run.returncode == BAD_INPUT:
        told = run_errors(run) if errors is None else errors
        refused = [e.message for e in told if e.exit_code == BAD_INPUT]
        why = refused[-1] if refused else f"locust exited with code {run.returncode}; see {run.log}"
        return Ending(REFUSED, BAD_INPUT, why)
    if run.returncode not in EXIT_CODES:
        why = f"locust exited with code {run.returncode}; its output: {run.log}"
        return Ending(CRASHED, INTERRUPTED, why)
    return Ending(FINISHED, run.returncode)


def run_file_is_this_runs(run: SweepRun) -> bool:
    """Whether the run file was written by this run's Locust (not older than its start)."""
    try:
        return run.started_at is not None and run.files.run.stat().st_mtime >= run.started_at
    except OSError:
        return False


def this_runs_file(run: SweepRun) -> RunInfo | None:
    """The run file this run's Locust wrote; None without one (or with another run's)."""
    return read_run_info(run.files) if run_file_is_this_runs(run) else None


def run_errors(run: SweepRun) -> list[RunError]:
    """The errors this run's Locust recorded, each once, in order: why the run did not start, the
    server's first HTTP 400 reason, a failed reconciliation, a stalled rung, a file it could not
    write, ... (`llmload.core.files.run_errors.KINDS`): what it told over the status pipe, then
    what its run file holds besides. None when it wrote no run file and told nothing (it died
    first, or refused its configuration before writing any file) or left one older than its start
    (another run's)."""
    told = [
        RunError(t.kind, t.message, t.exit_code) for t in run.told if t.source == "locust" and t.kind in KINDS
    ]
    info = this_runs_file(run)
    written = info.errors if info is not None else ()
    return told + [e for e in written if e not in told]


def ended_by(run: SweepRun) -> tuple[int, str] | None:
    """Why the run ended, when it was neither Locust's own end nor a stop signal: (exit code, the
    one line). A file of the run that could not be written (told by Locust or the simulator), a
    simulator that did not start, or one that ended while Locust ran."""
    failed = [t.message for t in run.told if t.exit_code == WRITE_FAILED]
    if failed:
        return WRITE_FAILED, failed[0]
    sim_log = run.log.parent / SIM_LOG
    said = [t.message for t in run.told if t.source == "llmload sim"]
    exit_code = run.simulator_exit
    code = exit_code if exit_code in (BAD_INPUT, WRITE_FAILED) else INTERRUPTED
    if run.simulator_failure is not None:
        return code, f"the simulator did not start: {said[0] if said else run.simulator_failure}"
    if exit_code is not None:
        why = said[0] if said else f"its log: {sim_log}"
        return (
            code,
            f"the simulator ended (exit code {exit_code}) while Locust ran; Locust was stopped: {why}",
        )
    return None


def unmeasured(run: SweepRun) -> RunResult | None:
    """A run stopped before its first record, as a table of its ladder (its run file's) with every
    rung marked started or not run; None without a run file of this run."""
    info = this_runs_file(run)
    missing = missing_rungs(info, [])
    return RunResult(str(run.files.prefix), None, [], [], None, [], info, missing) if missing else None
