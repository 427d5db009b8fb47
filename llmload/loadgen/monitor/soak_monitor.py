"""Soak runs inside the locust process: the verdict becomes the exit code, and Locust's state that
grows with time (not with requests) is kept bounded over hours.

On the master (or the local process), when a run whose configuration has a `soak` section starts:
- its file prefix is remembered (the shape's first tick has begun the run before `test_start`);
- a greenlet keeps Locust's own stats bounded every `TRIM_INTERVAL_S`: each stats entry keeps one
  dict key per second of the run (`num_reqs_per_sec`, `num_fail_per_sec`) although only the last
  ~12 s feed its current-RPS figure, so older keys are dropped; `stats.history` (the web UI and
  HTML report charts, one row per 5 s) is thinned to at most `HISTORY_MAX` rows by dropping every
  other row of its older half, so the charts still span the whole run at a coarser step.
At `quitting` (a finished run, or one stopped by SIGTERM/SIGINT) the run is judged from its files
(`llmload.analysis.soak.verdict`), the outputs are written next to them, the verdict is logged (one that
is not a pass, and its reasons, as errors of the run: `llmload.loadgen.run.error_log`), and
`environment.process_exit_code` is set: 0 pass, 1 breached, 2 not run, 4 incomplete. It is set to
0 explicitly on a pass, since Locust otherwise exits 1 when any request failed.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

import gevent

from llmload.analysis.soak.verdict import EXIT_NOT_RUN, soak_report
from llmload.core.config import ConfigError
from llmload.core.files.records import RecordFileError
from llmload.loadgen.run.ladder import LadderHook, LadderShape
from llmload.output.soak_output import write_outputs

log = logging.getLogger("llmload")
TRIM_INTERVAL_S = 60.0
KEEP_PER_SECOND_S = 30  # Locust's current RPS reads the last ~12 s
HISTORY_MAX = 2000  # rows of stats.history: ~2.8 h at full 5 s resolution, then thinned


def trim_stats(stats: Any, now: float) -> None:
    """Drop per-second counters older than KEEP_PER_SECOND_S and thin the history to HISTORY_MAX rows."""
    cutoff = int(now) - KEEP_PER_SECOND_S
    for entry in (*stats.entries.values(), stats.total):
        for per_sec in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            for second in [s for s in per_sec if s < cutoff]:
                del per_sec[second]
    history = stats.history
    while len(history) > HISTORY_MAX:
        half = len(history) // 2
        history[:half] = history[:half:2]


class SoakMonitor(LadderHook):
    """Per-process soak hooks; `install(environment)` from `events.init`."""

    LISTENS: ClassVar[dict[str, str]] = {"test_start": "on_test_start", "quitting": "on_quitting"}

    prefix: str | None = None  # the soak run's prefix, once a soak run started
    _trimmer: gevent.Greenlet | None = None

    def on_test_start(self, environment: Any, **_: Any) -> None:
        shape = environment.shape_class
        run = shape.run if isinstance(shape, LadderShape) else None
        if run is None or run.config.soak is None:
            self.prefix = None
            return
        self.prefix = str(run.files.prefix)
        if self._trimmer is None:
            self._trimmer = gevent.spawn(self._trim_forever)

    def _trim_forever(self) -> None:
        while True:
            gevent.sleep(TRIM_INTERVAL_S)
            trim_stats(self.environment.runner.stats, time.time())

    def on_quitting(self, environment: Any, **_: Any) -> None:
        if self._trimmer is not None:
            self._trimmer.kill(block=False)
        if self.prefix is None:
            return
        errors = self.environment.shape_class.end.errors  # the soak run's (a LadderHook's shape)
        try:
            report = soak_report(self.prefix)
            paths = write_outputs(report)
        except (ConfigError, RecordFileError, OSError, ValueError) as e:
            errors.record("soak", f"soak: cannot judge the run: {e}", EXIT_NOT_RUN)
            return
        verdict = f"soak verdict {report.status.upper()} (exit code {report.exit_code})"
        lines = [f"soak: {line}" for line in (*report.reasons, *report.warnings)]
        if report.exit_code == 0:
            for line in (verdict, *lines):
                log.info("llmload: %s", line)
        else:  # errors of the run: in its run file too
            errors.record("soak", verdict, report.exit_code)
            for line in lines:
                errors.record("soak", line)
        log.info("llmload: soak report: %s", ", ".join(map(str, paths)))
        environment.process_exit_code = report.exit_code
