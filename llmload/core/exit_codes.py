"""The exit codes of every llmload command and of the Locust process it drives, in one place.

A scheduler (cron, CI, Kubernetes) reads only the exit code, so each code means one thing
everywhere: `locust -f locustfiles/...`, `llmload sweep` / `scripts/run_sweep.py`,
`llmload table` / `scripts/sweep_table.py` and the other commands. The table in
`docs/errors-and-exit-codes.md` is generated from `EXIT_CODES` (a test keeps them equal).

When several apply, the most serious wins: BAD_INPUT, then INTERRUPTED, then RECONCILIATION,
then REQUEST_FAILURES (`worst`).
"""

from __future__ import annotations

OK = 0  # every rung finished, no request failed, token accounts add up
REQUEST_FAILURES = 1  # every rung finished, some requests failed (Locust's own convention)
BAD_INPUT = 2  # bad config, option or file, or the preflight stopped the run before any request
RECONCILIATION = 3  # a finished rung's token accounts do not add up (reconcile: limits)
INTERRUPTED = 4  # SIGINT/SIGTERM, a stalled rung or a crash: not every rung finished

EXIT_CODES: dict[int, str] = {
    OK: "finished: every rung ran to the end, no request failed, token accounts add up",
    REQUEST_FAILURES: "finished, but some requests failed (the table counts them by kind)",
    BAD_INPUT: "bad input (config file, option, records file) or the preflight stopped the run: "
    "nothing was measured",
    RECONCILIATION: "finished, but a rung's token accounts do not add up (token reconciliation)",
    INTERRUPTED: "interrupted or unfinished: stopped by SIGINT/SIGTERM, a stalled rung or a crash; "
    "the finished rungs' files are intact and the table marks the rest",
}

_PRECEDENCE = (BAD_INPUT, INTERRUPTED, RECONCILIATION, REQUEST_FAILURES, OK)


def worst(*codes: int) -> int:
    """The code that wins when several apply (an unknown code, e.g. a crash's, wins over all)."""
    unknown = [c for c in codes if c not in _PRECEDENCE]
    if unknown:
        return unknown[0]
    return min(codes, key=_PRECEDENCE.index, default=OK)
