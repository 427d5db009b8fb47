"""SIGINT and SIGTERM reach an llmload process even when its parent left them blocked or ignored
(both are inherited across exec): found when a full test run's pytest process had them blocked
and every `llmload sweep` it started ignored SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from llmload.runner.sweep_run import _stop_signals_held

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


RECORDER = """
import os, signal, sys
from llmload.core.stop_signals import STOPS, accept_stop_signals
accept_stop_signals()  # as every llmload command does first: a test runner may have them blocked
with STOPS:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        os.kill(os.getpid(), sig)  # the handler runs before kill returns: recorded, nothing raised
    print(*(signal.Signals(s).name for s in STOPS.received))
print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)
"""


def _ignore_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal leaves it (not the runner's nohup)


def _default_but_blocked_sighup() -> None:
    _default_sighup()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # as a CI runner left it: found there


@pytest.mark.parametrize("setup", [_default_sighup, _default_but_blocked_sighup], ids=["default", "blocked"])
def test_the_recorder_records_every_stop_signal_and_raises_none(setup: Callable[[], None]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", RECORDER],
        preexec_fn=setup,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["SIGTERM", "SIGINT", "SIGHUP", "SIGTERM", "True", "False"]  # and the handlers restored


def test_under_nohup_sighup_is_left_ignored() -> None:
    """`nohup llmload sweep`: the user asked the run to outlive the terminal (the SIGHUP is
    neither recorded nor fatal)."""
    out = subprocess.run(
        [sys.executable, "-c", RECORDER],
        preexec_fn=_ignore_sighup,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert out == ["SIGTERM", "SIGINT", "SIGTERM", "True", "True"]


STOP = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _mask() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.mark.parametrize("found", [set(), STOP], ids=["unblocked", "blocked"])
def test_overlapping_holds_of_one_thread_put_back_the_mask_they_found(found: set[int]) -> None:
    """Two starts of Locust from greenlets of one OS thread (they share its mask), the first done
    before the second: the thread was left with the stop signals blocked for good. Both hand the
    child the mask from before the hold, and the last one out puts that mask back."""
    original = signal.pthread_sigmask(signal.SIG_SETMASK, found)
    try:
        first, second = _stop_signals_held(), _stop_signals_held()
        assert first.__enter__() == found
        assert second.__enter__() == found  # not the first one's hold
        first.__exit__(None, None, None)
        assert _mask() >= STOP  # the second start still holds them
        second.__exit__(None, None, None)
        assert _mask() == found
        with pytest.raises(RuntimeError), _stop_signals_held():
            raise RuntimeError  # a failed start puts the mask back too
        assert _mask() == found
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, original)
