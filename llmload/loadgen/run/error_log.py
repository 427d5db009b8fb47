"""The errors of one ladder run on the master (or the local process), each recorded once.

Owns `RunErrors.record`, the one way the Locust side tells an error of a run (the kinds:
`llmload.core.files.run_errors.KINDS`): logged as `llmload: <message>` (people read Locust's
output), the exit code set when the error carries one, kept, in order and each once, in the run
file's `errors` (programs read that), and told to the command that started the process, if any
(`llmload.core.status_pipe`: `llmload sweep` hears it even when the run file cannot be written).
Before the run has a run file of its own (its start failed: a refused configuration, the preflight)
it writes one with no stages that carries its errors; once the run exists (`attach`, given the run's
own writer of its run file, `RunState.write_run_file`), that writer writes them with the rest, also
after the run closed (a verdict at quitting). Without a run file (the plugin's check of the
configuration at `init`, before any file of the run exists) it logs and sets the code only: a
refused configuration leaves no file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.core.files.records import new_run_id
from llmload.core.files.run_errors import RunError
from llmload.core.files.run_files import write_run_json
from llmload.core.status_pipe import tell

log = logging.getLogger("llmload")


class RunErrors:
    """One run's errors (module docstring); `run_file`: where its run file goes, None for none."""

    def __init__(self, environment: Any, run_file: Path | None = None) -> None:
        self.environment = environment
        self.run_file = run_file
        self.entries: list[RunError] = []
        self._write_run_file: Callable[[], None] | None = None
        self._run_id = new_run_id()  # of the run file written before the run exists

    def attach(self, write_run_file: Callable[[], None]) -> None:
        """The run exists: its own run file, rewritten by `write_run_file`, carries the errors from now on."""
        self._write_run_file = write_run_file

    def record(self, kind: str, message: str, exit_code: int | None = None) -> None:
        """Log the error, set its exit code, keep it in the run file; an error recorded again
        (same kind, message and code) is neither logged nor kept twice. ValueError for a kind
        not in `llmload.core.files.run_errors.KINDS`."""
        error = RunError(kind, message, exit_code)
        if exit_code is not None:
            self.environment.process_exit_code = exit_code
        if error in self.entries:
            return
        log.error("llmload: %s", message)
        self.entries.append(error)
        tell("locust", kind, message, exit_code)  # to `llmload sweep`, which may not read the run file
        try:
            if self._write_run_file is not None:
                self._write_run_file()
            elif self.run_file is not None:
                data = {"run_id": self._run_id, "finished": False, "stages": [], "errors": self.as_json()}
                self.run_file.parent.mkdir(parents=True, exist_ok=True)
                write_run_json(self.run_file, data)
        except OSError as e:  # the error may be that the run's folder cannot be written
            log.warning("llmload: cannot write the run file %s: %s", self.run_file, e.strerror or e)

    def as_json(self) -> list[dict[str, Any]]:
        """The run file's `errors`: each entry's kind, message and exit code, in order."""
        return [e.to_dict() for e in self.entries]
