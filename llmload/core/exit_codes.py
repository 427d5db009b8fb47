"""The exit codes of every llmload command and of the Locust process it drives, in one place.

A scheduler (cron, CI, Kubernetes) reads only the exit code, so each code means one thing
everywhere: `locust -f <llmload locustfile>`, `llmload sweep`, `llmload table` and the other
commands. `docs/errors-and-exit-codes.md` shows `EXIT_CODES` as a table (a unit test keeps the two
equal). When several apply, the first of BAD_INPUT, WRITE_FAILED, INTERRUPTED, RECONCILIATION,
REQUEST_FAILURES wins: a run stopped after a reconciliation failure exits INTERRUPTED.
"""

from __future__ import annotations

OK = 0
REQUEST_FAILURES = 1  # Locust's own convention (--exit-code-on-error)
BAD_INPUT = 2
RECONCILIATION = 3
INTERRUPTED = 4
DIVERGED = 5  # --fail-on-divergence (llmload.analysis.identity.determinism)
OUTPUT_CHANGED = 6  # llmload compare --fail-on-output-change (llmload.analysis.output_identity)
WRITE_FAILED = 7  # a file of the run (or a report) could not be written: the run stopped at once
REGRESSED = 1  # llmload compare --fail-on-regression: a rung regressed (compare runs no requests)
NO_FIT = 1  # llmload twin: the fitted simulator does not reproduce the run (the verdict says why)
SERVER_UNUSABLE = 1  # llmload llama-server: no flavour builds, starts or generates tokens here
NOT_WORTH_IT = 8  # llmload twin with a change: not worth it at a production rung (the decision)
UNDECIDED = 9  # llmload twin with a change: cannot tell (an interval holds the threshold, or a table)

EXIT_CODES: dict[int, str] = {
    OK: "finished: every rung ran to its end, no request failed, the token accounts add up",
    REQUEST_FAILURES: "finished, but some requests failed (the table counts them by kind)",
    BAD_INPUT: "bad input (config file, option, records file) or the preflight stopped the run; "
    "nothing was measured",
    RECONCILIATION: "finished, but a rung's token accounts do not add up (token reconciliation)",
    INTERRUPTED: "stopped before every rung finished: SIGINT/SIGTERM/SIGHUP, the web UI's STOP, a stalled "
    "rung, a worker lost mid-rung (no heartbeat), a killed Locust; the finished rungs' files are intact "
    "and the table marks the rest",
    DIVERGED: "finished, but with --fail-on-divergence a rung's greedy texts differ from the same "
    "prompts' reference texts (the greedy-determinism check)",
    OUTPUT_CHANGED: "llmload compare with --fail-on-output-change: a candidate request's greedy text differs "
    "from the base's for the same prompt (output identity across runs)",
    WRITE_FAILED: "a file could not be written (disk full, over quota): the run stopped at once; one line "
    "names the file and the errno, and the rungs that finished are printed",
    NOT_WORTH_IT: "llmload twin with a change: not worth it at a production rung (the bound or the whole "
    "predicted interval below --worth)",
    UNDECIDED: "llmload twin with a change: cannot tell (a predicted interval holds the --worth threshold, "
    "or a table alone cannot say)",
}
