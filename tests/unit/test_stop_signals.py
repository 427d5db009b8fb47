"""SIGINT and SIGTERM reach an llmload process even when its parent left them blocked or ignored
(both are inherited across exec): found when a full test run's pytest process had them blocked
and every `llmload sweep` it started ignored SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

CHILD = """
import signal
from llmload.core.stop_signals import accept_stop_signals
before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
print(signal.SIGTERM in before, signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)
accept_stop_signals()
after = signal.pthread_sigmask(signal.SIG_BLOCK, set())
print(signal.SIGTERM in after or signal.SIGINT in after, signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)
"""


def _blocked_and_ignored() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_a_child_of_a_parent_that_blocked_and_ignored_them_accepts_them_again() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        preexec_fn=_blocked_and_ignored,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["True", "True", "False", "False"]  # inherited blocked and ignored; then neither
