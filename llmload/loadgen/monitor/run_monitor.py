"""The master's run monitor: writes the run's environment and scrapes the server's `/metrics`.

Runs on the master (or the local process), never on workers, while a ladder run is in progress:
at `test_start` the ladder has begun its run (the shape's first tick comes before Locust fires
`test_start`), so the run's file prefix is known. A greenlet then writes `<prefix>_env.json`
and scrapes every `--scrape-interval` seconds and at every stage boundary (announced, started,
finished), so each rung's counters are bracketed by samples taken while the server was idle.
`test_stop` takes a last sample and closes the file. Scraping is on by default at
`<host>/metrics` and silently off when that URL does not answer; an explicit `--metrics-url`
that does not answer is logged. With `gpu_metrics` a DCGM exporter is scraped at the same
instants into its own file (llmload.analysis.run.gpu_metrics).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, ClassVar

import gevent

from llmload.analysis.run.gpu_metrics import GPU_NAMES, gpu_metrics_path, gpu_url
from llmload.analysis.run.server_metrics import metrics_path
from llmload.core.config import NVML
from llmload.core.run_environment import collect_environment, env_path, write_environment
from llmload.loadgen.monitor.nvml import NvmlSampler
from llmload.loadgen.monitor.scraper import MetricsScraper
from llmload.loadgen.run.ladder import LadderHook
from llmload.loadgen.run.run_state import RunState
from llmload.loadgen.transport.server_pages import server_version

log = logging.getLogger("llmload")
POLL_S = 0.1  # how often the greenlet looks for a stage change
GPU_TIMEOUT_S = 1.0  # a DCGM exporter answers in milliseconds; a hung one delays the server's scrapes


def run_prefix(run: RunState) -> str:
    return str(run.files.prefix)


def _stage_mark(run: RunState) -> tuple[int, float | None, float | None]:
    current = run.current
    if current is None:
        return (0, None, None)
    return (len(run.progress), current.stage.start_at, current.finished)


class RunMonitor(LadderHook):
    """Environment file and server-metrics scraping for one process's runs (see module docstring)."""

    LISTENS: ClassVar[dict[str, str]] = {"test_start": "on_test_start", "test_stop": "on_test_stop"}

    scraper: MetricsScraper | None = None  # set per run (instance attributes from then on)
    gpu_scraper: MetricsScraper | None = None
    greenlet: gevent.Greenlet | None = None

    def on_test_start(self, **_: Any) -> None:
        run = self.environment.shape_class.run
        if run is not None and self.greenlet is None:
            self.greenlet = gevent.spawn(self._watch, run)

    def on_test_stop(self, **_: Any) -> None:
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None
        for name in ("scraper", "gpu_scraper"):
            scraper = getattr(self, name)
            if scraper is None:
                continue
            setattr(self, name, None)
            try:
                scraper.sample(time.time())
                scraper.close()
            except OSError as e:
                self.environment.shape_class.end.cannot_write(e, e.filename or str(scraper.path))

    def _metrics_url(self, host: str) -> tuple[str, bool]:
        """(URL, explicit): --metrics-url, else <host>/metrics; '' when scraping is off."""
        options = self.environment.parsed_options
        if getattr(options, "scrape_interval", 1.0) <= 0:
            return "", False
        explicit = getattr(options, "metrics_url", "") or ""
        return (explicit or host.rstrip("/") + "/metrics"), bool(explicit)

    def _watch(self, run: RunState) -> None:
        prefix = run_prefix(run)
        try:
            self._scrape(run, prefix)
        except OSError as e:  # the environment file or the scrapes: the run stops at once
            written = env_path(prefix) if self.scraper is None else metrics_path(prefix)
            self.environment.shape_class.end.cannot_write(e, e.filename or str(written))

    def _scrape(self, run: RunState, prefix: str) -> None:
        write_environment(
            prefix, collect_environment(run.host or "", server_version(run.host) if run.host else None)
        )
        self.gpu_scraper = self._gpu_scraper(run, prefix)
        url, explicit = self._metrics_url(run.host or "")
        scraper = MetricsScraper(url, metrics_path(prefix)) if url else None
        if scraper is not None and not scraper.sample(time.time()):
            scraper.close()
            Path(scraper.path).unlink(missing_ok=True)
            if explicit:
                log.warning("llmload: --metrics-url %s does not answer; no server metrics", url)
            scraper = None
        self.scraper = scraper  # from here a failed write is the scrapes'
        scrapers = [s for s in (self.scraper, self.gpu_scraper) if s is not None]
        if not scrapers:
            return
        interval = self.environment.parsed_options.scrape_interval
        interval = interval if interval > 0 else math.inf  # 0: the GPUs' at the stage boundaries only
        mark, last = _stage_mark(run), time.time()
        while True:
            gevent.sleep(POLL_S)
            now = time.time()
            if _stage_mark(run) != mark or now - last >= interval:
                mark, last = _stage_mark(run), now
                for each in scrapers:
                    each.sample(now)

    def _gpu_scraper(self, run: RunState, prefix: str) -> MetricsScraper | None:
        """The DCGM exporter's scraper (`gpu_metrics`), or None when not asked for or when its first
        scrape failed: that failure stays in the file, and the table's one note says what to do."""
        configured = run.config.gpu_metrics
        if not configured:
            return None
        if configured == NVML:
            scraper: MetricsScraper = NvmlSampler(gpu_metrics_path(prefix))
        else:
            url = gpu_url(configured, run.host or "")
            scraper = MetricsScraper(url, gpu_metrics_path(prefix), timeout=GPU_TIMEOUT_S, names=GPU_NAMES)
        if scraper.sample(time.time()):
            return scraper
        scraper.close()
        return None
