"""How a llmload Locust process ends (run finished, Ctrl+C, SIGTERM) without losing what it measured.

- Ctrl+C raises KeyboardInterrupt in the main greenlet only, where Locust catches it and shuts
  down cleanly; by default it lands in whichever user or monitor greenlet is running, and gevent
  prints it as a crash.
- SIGTERM during a headless ladder run is handled the same way. Locust 2.47 installs its own
  SIGTERM handler only after a headless shape run has ended (`main.py` joins the shape greenlet
  first), so until then SIGTERM would kill the process outright and leave no final CSVs. Our
  handler is cancelled when the test stops, after which Locust's own takes over.
- At `quitting` (master or local process with `--csv`): the users are stopped first, so a request
  still in flight is cut and leaves neither a record nor a Locust event (records and Locust's
  counts stay equal), then the process waits one CSV interval. Locust rewrites `_stats.csv` /
  `_failures.csv` from a greenlet once a second (started only after a headless shape run ends)
  and not at exit, so without the wait the CSVs can miss the last requests
  (the end-to-end tests cross-check every CSV against the records).
- A request that fails while the generator itself is stopping was cut by that stop, not by the
  server: it too leaves neither a record nor a Locust event (`generator_stopping`), like the
  requests the stopped users were sending. The process is stopping once it got SIGINT or SIGTERM,
  or once the `llmload sweep` that started it is gone (`LAUNCHER_PID_ENV`): a SIGKILLed sweep
  makes the kernel send SIGTERM to Locust and to the simulator at the same instant, and the
  simulator closing its streams must not read as server drops. The parent check is the one
  that holds in that race: the kernel reparents both children before it signals either.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import gevent
from locust.runners import WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from llmload.core.stop_signals import LAUNCHER_PID_ENV, accept_stop_signals

CSV_WRITE_MARGIN_S = 0.3  # beyond one CSV interval, for the writer greenlet to get its turn


log = logging.getLogger(__name__)


class _Stopping:
    """This process's knowledge that the generator is being stopped."""

    signalled = False  # SIGINT or SIGTERM reached it, or it began quitting
    launcher: int | None = None  # the PID of the `llmload sweep` that started it (its parent)
    told = False  # the first cut request was logged


def _launcher_pid() -> int | None:
    """The sweep's PID when this process is its direct child (a forked worker is not)."""
    try:
        pid = int(os.environ.get(LAUNCHER_PID_ENV, ""))
    except ValueError:
        return None
    return pid if pid == os.getppid() else None


def generator_stopping() -> bool:
    """True once this process is being stopped: a stop signal, its quitting, or its launcher gone."""
    launcher = _Stopping.launcher
    return _Stopping.signalled or (launcher is not None and os.getppid() != launcher)


def cut_by_stop() -> bool:
    """For a failed request: True when the generator's own stop cut it (it is then left out)."""
    if not generator_stopping():
        return False
    if not _Stopping.told:
        _Stopping.told = True
        log.info("llmload: the generator is stopping: requests it cuts leave no record")
    return True


def _stop_main(main: Any) -> None:
    _Stopping.signalled = True
    gevent.kill(main, KeyboardInterrupt)


def install(environment: Any) -> None:
    """Route Ctrl+C (and SIGTERM during a headless ladder run) to the main greenlet, and register
    the final CSV write. Call from `events.init`, which runs in the main greenlet."""
    accept_stop_signals()  # a parent may have left them blocked or ignored (both are inherited)
    _Stopping.launcher = _launcher_pid()
    main = gevent.getcurrent()
    gevent.signal_handler(signal.SIGINT, _stop_main, main)
    options = environment.parsed_options
    if isinstance(environment.runner, WorkerRunner):
        environment.events.quitting.add_listener(_quitting)
        return
    if getattr(options, "headless", False) and environment.shape_class is not None:
        term = gevent.signal_handler(signal.SIGTERM, _stop_main, main)

        def hand_over_sigterm(**_: Any) -> None:
            term.cancel()

        environment.events.test_stop.add_listener(hand_over_sigterm)
    if getattr(options, "csv_prefix", None):
        environment.events.quitting.add_listener(write_final_csv)
    environment.events.quitting.add_listener(_quitting)  # last added: fired first (reverse order)


def _quitting(**_: Any) -> None:
    _Stopping.signalled = True


def write_final_csv(environment: Any, **_: Any) -> None:
    """Stop the users, then let Locust's CSV writer write the final counts once more."""
    if environment.runner is not None:
        environment.runner.stop()
    gevent.sleep(CSV_STATS_INTERVAL_SEC + CSV_WRITE_MARGIN_S)
