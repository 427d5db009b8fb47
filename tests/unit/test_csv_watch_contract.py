"""Contract of `llmload.loadgen.csv_watch` with Locust: a CSV writer that cannot write (its files
point at /dev/full) dies, Locust logs that on `locust.main` with the traceback through its stats
module, and the handler stops the ladder run with WRITE_FAILED, naming the CSVs and the errno."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from locust import stats
from locust.log import greenlet_exception_logger

from llmload.core.exit_codes import WRITE_FAILED
from llmload.loadgen.csv_watch import LOCUST_LOGGER, watch_csv_writer
from llmload.loadgen.run.run_end import RunEnd


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_csv_writer_that_cannot_write_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    prefix = tmp_path / "run"
    for suffix in ("_stats.csv", "_stats_history.csv", "_failures.csv", "_exceptions.csv"):
        Path(f"{prefix}{suffix}").symlink_to("/dev/full")  # every write: ENOSPC
    monkeypatch.setattr(stats, "CSV_STATS_FLUSH_INTERVAL_SEC", 0)
    environment = SimpleNamespace(
        shape_class=SimpleNamespace(end=RunEnd()),
        parsed_options=SimpleNamespace(csv_prefix=str(prefix)),
        process_exit_code=None,
        runner=None,
    )
    runner = SimpleNamespace(stats=stats.RequestStats(), environment=environment)
    environment.runner = runner
    writer = stats.StatsCSVFileWriter(
        environment, stats.PERCENTILES_TO_REPORT, str(prefix), full_history=False
    )
    handler = watch_csv_writer(environment)
    try:
        greenlet = gevent.spawn(writer.stats_writer)
        greenlet.link_exception(greenlet_exception_logger(logging.getLogger(LOCUST_LOGGER)))
        for _ in range(300):  # one CSV interval and its flush: at once (FLUSH_INTERVAL 0), at most 3 s
            gevent.sleep(0.01)
            if environment.shape_class.end.failed:
                break
        greenlet.kill()
    finally:
        logging.getLogger(LOCUST_LOGGER).removeHandler(handler)
    end = environment.shape_class.end
    assert end.write_failed and end.failed
    assert environment.process_exit_code == WRITE_FAILED
    assert f"cannot write {prefix}_*.csv (Locust's CSVs): [Errno 28 ENOSPC]" in end.error
