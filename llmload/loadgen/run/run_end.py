"""How a ladder run ends on the master (or the local process): its exit code and its last wait.

Owns `RunEnd`: each run's errors (`begin`: a `llmload.loadgen.run.error_log.RunErrors`, kept after the
run closed for what is said at quitting), the exit code of a run that could not start or stalled
(`fail`), of a rung whose accounts do not add up (`rung_failed`), and of a run stopped before its
last rung (`on_quitting`: the interrupted code, whatever Locust's own would be; a soak run's code
is its verdict), of a file of the run that could not be written (`cannot_write`: it stops the run
at once), each recorded as an error of the run; and the reason repeated as the last line
under Locust's summary (`on_quit`). And the last wait of a
finished ladder (`may_end`): Locust's own stats of a distributed run come from the workers every
3 s, so the shape waits until they hold every record (at most `STATS_CATCH_UP_S`), and the final
CSVs hold every request.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from locust.runners import MasterRunner

from llmload.core import exit_codes
from llmload.core.command_line import errno_text, path_text
from llmload.core.names import REQUEST_TYPE
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.run_state import RunState
from llmload.loadgen.run.stage_protocol import StageProgress

STATS_CATCH_UP_S = 12.0  # workers report stats every 3 s; wait at most this for the last ones


class RunEnd:
    """What the shape's runs ended with, for the exit code and the last line (module docstring)."""

    def __init__(self, environment: Any = None) -> None:
        self.environment = environment  # Locust's (set before a write can fail)
        self.failed = False  # the run failed: the shape ticks no more until the run is closed
        self.write_failed = False  # a file of the run could not be written (`cannot_write`)
        self.error = ""  # why the run could not start (bad config, failed preflight) or stopped
        self.unfinished = False  # a run began (preflight included) and has not finished every rung
        self.soak = False  # a soak run: its verdict (llmload.loadgen.monitor.soak_monitor) is the exit code
        self._errors: RunErrors | None = None
        self._begun = False  # a run has begun in this process (the web UI begins one per start)

    def begin(self, environment: Any, run_file: Path) -> RunErrors:
        """A run begins: its errors, none yet, go to `run_file` (and to its log). After an earlier
        run of the same process (the web UI's next start), the exit code and the last line are
        this run's: an earlier run's error (a refused start, a stall) is not said again at quitting."""
        if self._begun:
            self.error = ""
            environment.process_exit_code = None
        self._begun = True
        self.environment = environment
        self.write_failed = False
        self._errors = RunErrors(environment, run_file)
        return self._errors

    @property
    def errors(self) -> RunErrors:
        """The errors of the run begun last (one has begun before anything can fail)."""
        assert self._errors is not None
        return self._errors

    def fail(self, kind: str, message: str, code: int = exit_codes.BAD_INPUT) -> None:
        """The run could not start, or stops (a stalled rung): the shape ticks no more."""
        self.errors.record(kind, message, code)
        self.failed = True
        self.unfinished = False  # the exit code already says why
        self.error = message

    def cannot_write(self, error: OSError, path: str | None = None) -> None:
        """A file of the run (`path`, else the error's) could not be written: the run stops at once
        (the shape ticks no more) with WRITE_FAILED and one line naming the file and the errno;
        the first failure is the one said (the rest follow from it)."""
        if self.write_failed:
            return
        where = path_text(path or error.filename or "a file of the run")
        message = f"cannot write {where}: {errno_text(error)}; the run stopped"
        self.write_failed = True
        if self._errors is None:  # before any run began (Locust's CSVs): no run file to carry it
            self._errors = RunErrors(self.environment)
        self.fail("write_failed", message, exit_codes.WRITE_FAILED)

    def rung_failed(self, problems: list[tuple[str, str]]) -> None:
        """A finished rung's reconciliation problems (kind, message) fail the run (exit code 3);
        it goes on."""
        for kind, problem in problems:
            self.errors.record(kind, problem, exit_codes.RECONCILIATION)

    def on_quitting(self, environment: Any, **_: Any) -> None:
        """A run stopped before its last rung (SIGINT, SIGTERM, the web UI's STOP, preflight cut
        short) exits with the interrupted code, whatever Locust's own would be; a soak run's code is
        its verdict ("incomplete" is the interrupted code too, a breach stays a breach)."""
        if self.unfinished and not self.soak:
            code = exit_codes.INTERRUPTED
            self.errors.record(
                "interrupted", f"the run stopped before its last rung finished (exit code {code})", code
            )

    def on_quit(self, **_: Any) -> None:
        """Repeat why the run never started (or stopped) as the last line, under Locust's summary."""
        if self.error:
            with contextlib.suppress(OSError):  # the output may be on the disk that failed
                print(f"llmload: error: {self.error}", file=sys.stderr, flush=True)


def stats_caught_up(runner: Any, progress: list[StageProgress]) -> bool:
    """Whether Locust's own stats count every record of every stage (always, but on a master)."""
    if not isinstance(runner, MasterRunner):
        return True
    for p in progress:
        entry = runner.stats.entries.get((p.stage.name, REQUEST_TYPE))
        if (entry.num_requests if entry else 0) < p.records:
            return False
    return True


def may_end(run: RunState, runner: Any) -> bool:
    """Whether a run whose last stage finished may end now: Locust's stats caught up, or
    STATS_CATCH_UP_S passed since the ladder was done."""
    run.all_done_at = run.all_done_at or time.time()
    return stats_caught_up(runner, run.progress) or time.time() - run.all_done_at > STATS_CATCH_UP_S
