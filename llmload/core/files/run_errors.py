"""The errors a run ended with or reported, as its run file (`<prefix>_run.json`) carries them.

Owns the vocabulary: `KINDS` (each a short stable identifier and what it means), `RunError` (one
entry: kind, message, the exit code it set or None), its JSON form, and `errors_of`, which reads
the `errors` list of a parsed run file. The Locust side records them
(`llmload.loadgen.run.error_log`); programs read them from the file, never from Locust's log, whose
wording is for people.

A kind outside `KINDS` is refused where an error is made (`RunError` raises ValueError: a new kind
is declared here first), and read as `UNKNOWN` from a file (one written by a later llmload), its
message and exit code kept, so the reader still says why the run ended; no writer uses `UNKNOWN`.
An entry that is not an object with a string message is skipped: there is nothing honest to print
of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS: dict[str, str] = {
    "bad_config": "the run configuration is refused (ladder file, option, prompt file, users per process)",
    "preflight": "the server cannot serve the run (GET /v1/models, TLS, the context length, calibration)",
    "io": "a file or connection failed while the run started (the records file cannot be written)",
    "no_workers": "a distributed run was started while no worker was connected to its master",
    "worker_clock": "a worker's clock could not be measured closely enough (no answer, or a slow round trip)",
    "http_400": "the server's reason for the run's first HTTP 400 (reported; the records hold every one)",
    "reconciliation": "a finished rung's token accounts do not add up",
    "input_lengths": "a finished rung's prompts are off the asked lengths",
    "stalled_rung": "a started rung made no progress for longer than any request can take",
    "lost_worker": "a worker stopped answering Locust's heartbeat while a held rung ran: its users are gone",
    "write_failed": "a file of the run could not be written (disk full, over quota): the run stopped at once",
    "interrupted": "the run stopped before its last rung finished",
    "soak": "a soak run's verdict that is not a pass, its reasons, or why it cannot be judged",
    "unknown": "read from a run file: a kind this llmload does not know (a later one wrote it)",
}
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RunError:
    """One error of a run: what kind, the one line that says it, the exit code it set (None: it
    is only reported and leaves the run's code to the rest of the run)."""

    kind: str
    message: str
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"run error kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "exit_code": self.exit_code}


def errors_of(info: Mapping[str, Any] | None) -> list[RunError]:
    """The `errors` of a parsed run file, in order (none for a run file without the key)."""
    entries = (info or {}).get("errors")
    found: list[RunError] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("message"), str):
            continue
        code = entry.get("exit_code")
        kind = entry.get("kind")
        known = kind if isinstance(kind, str) and kind in KINDS else UNKNOWN
        found.append(RunError(known, entry["message"], code if type(code) is int else None))
    return found
