"""Make SIGINT and SIGTERM reach this process, and record the stop signals of a run that owns
processes.

A blocked signal mask and an ignored disposition are both inherited across fork and exec, so a
parent that blocked or ignored them (a shell, a scheduler, a test runner, our own sweep while it
starts a child) would leave a run that Ctrl+C and `kill` cannot stop. Every llmload process that
must stop on them (the `llmload` commands, Locust with an llmload locustfile, the simulator and
the children the sweep starts) calls `accept_stop_signals()` first.

`STOPS` is the one recorder of a command that starts processes (`llmload sweep`, `llmload
capacity`): while entered, SIGINT, SIGTERM and SIGHUP (the terminal closed) are only appended to
`STOPS.received`; nothing is raised from the handler. An exception raised from a signal handler
lands wherever the main thread happens to be, which may be logging's at-fork hook inside
`subprocess.Popen` or a library's cleanup, where it is swallowed ("Exception ignored in ...")
and the stop is lost. The code that owns the processes reads `received` at points where acting
is safe and stops the run there.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

RUN_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# set by `llmload sweep` in Locust's environment: its own PID, the parent whose death (the kernel's
# SIGTERM, `die_with_parent`) means the generator is being stopped, not that the server failed
LAUNCHER_PID_ENV = "LLMLOAD_LAUNCHER_PID"


def accept_stop_signals() -> None:
    """Unblock SIGINT, SIGTERM and SIGHUP and undo an inherited SIG_IGN of SIGINT and SIGTERM
    (Python's own defaults again). SIGHUP's disposition is kept: SIG_IGN there is `nohup`'s
    request to outlive the terminal, while a blocked SIGHUP is only a runner's leftover mask."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RUN_STOP_SIGNALS)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class StopSignals:
    """While entered (main thread; nested entries share the outermost), SIGINT, SIGTERM and SIGHUP
    are recorded in `received`, in order, and do nothing else. SIGHUP is left alone when it was
    ignored on entry (`nohup`: the user asked the run to outlive the terminal). The outermost
    entry starts a new record and its exit puts the previous handlers back."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}
        self._depth = 0

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)  # only this: see the module docstring

    @property
    def first(self) -> int | None:
        """The signal that asked for the stop, or None."""
        return self.received[0] if self.received else None

    def __enter__(self) -> StopSignals:
        if self._depth == 0:
            self.received = []
            if threading.current_thread() is threading.main_thread():
                for signum in RUN_STOP_SIGNALS:
                    if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                        continue
                    self._previous[signum] = signal.signal(signum, self._handler)
        self._depth += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth == 0:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous = {}


STOPS = StopSignals()  # the process's one recorder (a signal handler is per process)
