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
"""

from __future__ import annotations

import signal
from typing import Any

import gevent
from locust.runners import WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from llmload.core.stop_signals import accept_stop_signals

CSV_WRITE_MARGIN_S = 0.3  # beyond one CSV interval, for the writer greenlet to get its turn


def install(environment: Any) -> None:
    """Route Ctrl+C (and SIGTERM during a headless ladder run) to the main greenlet, and register
    the final CSV write. Call from `events.init`, which runs in the main greenlet."""
    accept_stop_signals()  # a parent may have left them blocked or ignored (both are inherited)
    main = gevent.getcurrent()
    gevent.signal_handler(signal.SIGINT, gevent.kill, main, KeyboardInterrupt)
    options = environment.parsed_options
    if isinstance(environment.runner, WorkerRunner):
        return
    if getattr(options, "headless", False) and environment.shape_class is not None:
        term = gevent.signal_handler(signal.SIGTERM, gevent.kill, main, KeyboardInterrupt)

        def hand_over_sigterm(**_: Any) -> None:
            term.cancel()

        environment.events.test_stop.add_listener(hand_over_sigterm)
    if getattr(options, "csv_prefix", None):
        environment.events.quitting.add_listener(write_final_csv)


def write_final_csv(environment: Any, **_: Any) -> None:
    """Stop the users, then let Locust's CSV writer write the final counts once more."""
    if environment.runner is not None:
        environment.runner.stop()
    gevent.sleep(CSV_STATS_INTERVAL_SEC + CSV_WRITE_MARGIN_S)
