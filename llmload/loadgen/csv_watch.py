"""Locust's own CSVs that cannot be written stop the run, as llmload's own files do.

Locust writes its `--csv` files from a greenlet of its own. When a write fails (a full disk) that
greenlet dies, and Locust only logs the exception and goes on: the run would end much later with
exit code 2 and CSVs that stopped mid-run. `watch_csv_writer(environment)` adds a logging handler
that hands an OSError raised inside Locust's stats module to the ladder's
`llmload.loadgen.run.run_end.RunEnd.cannot_write`, which stops the run at once and names the CSVs
by the run's --csv prefix.

The contract it relies on: Locust logs the exception of a greenlet that died (its
`greenlet_exception_logger`) on the `locust.main` logger, with the exception's traceback
(`exc_info`), and its CSV writer's frames are in `locust/stats.py`.
`tests/unit/test_csv_watch_contract.py` runs Locust's CSV writer into a file that cannot be
written, with Locust's own logger, and checks that the run stops.
"""

from __future__ import annotations

import logging
import traceback
from types import TracebackType
from typing import Any

import locust.stats

LOCUST_LOGGER = "locust.main"  # where Locust's main logs a dead greenlet's exception


def _in_locust_stats(tb: TracebackType | None) -> bool:
    """Whether the traceback passes through Locust's stats module (its CSV writer)."""
    return any(frame.f_code.co_filename == locust.stats.__file__ for frame, _ in traceback.walk_tb(tb))


class CsvWriterFailure(logging.Handler):
    """Turns Locust's log of its dead CSV writer into a stop of the run (module docstring)."""

    def __init__(self, environment: Any) -> None:
        super().__init__(level=logging.ERROR)
        self.environment = environment

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, OSError) or not _in_locust_stats(
            record.exc_info[2] if record.exc_info else None
        ):
            return
        end = getattr(self.environment.shape_class, "end", None)
        if end is None:  # not a ladder run: Locust's own account stands
            return
        end.environment = end.environment or self.environment
        prefix = getattr(self.environment.parsed_options, "csv_prefix", None) or "the run"
        end.cannot_write(error, f"{prefix}_*.csv (Locust's CSVs)")


def watch_csv_writer(environment: Any) -> CsvWriterFailure:
    """Watch Locust's CSV writer of this process (the master or a local run); the handler added."""
    handler = CsvWriterFailure(environment)
    logging.getLogger(LOCUST_LOGGER).addHandler(handler)
    return handler
