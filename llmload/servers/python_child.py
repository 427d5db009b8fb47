"""A function of llmload run in a child Python process: `python -c` importing it from this
llmload (first on the child's path, whatever the working folder holds) and calling it with the
given arguments; what it writes on stdout comes back whole, with its exit code and its last
error line.

A plain command, not a `multiprocessing` one: those import the caller's main script again,
which a script without a `__main__` guard would run twice. Used for the first part of a large
records file (`llmload.analysis.run.records_pass`), passed in by the commands that read one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds this llmload


class PythonChild:
    """`function` ("package.module:function", called with `argv`) started in a child Python process
    (a `llmload.analysis.run.records_pass.StartChild`)."""

    def __init__(self, function: str, argv: Sequence[str]) -> None:
        module, _, name = function.partition(":")
        code = f"import sys; sys.path.insert(0, {ROOT!r}); from {module} import {name}; {name}(sys.argv[1:])"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def wait(self) -> tuple[int, bytes, str]:
        """Its exit code, its stdout and its last error line ("no message" when it wrote none)."""
        sent, errors = self._proc.communicate()
        last = (errors.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        return self._proc.returncode, sent, last
