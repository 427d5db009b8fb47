"""Make SIGINT and SIGTERM reach this process.

A blocked signal mask and an ignored disposition are both inherited across fork and exec, so a
parent that blocked or ignored them (a shell, a scheduler, a test runner, our own sweep while it
starts a child) would leave a run that Ctrl+C and `kill` cannot stop. Every llmload process that
must stop on them (the `llmload` commands, Locust with an llmload locustfile, the simulator and
the children the sweep starts) calls `accept_stop_signals()` first.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def accept_stop_signals() -> None:
    """Unblock SIGINT and SIGTERM and undo an inherited SIG_IGN (Python's own defaults again)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
