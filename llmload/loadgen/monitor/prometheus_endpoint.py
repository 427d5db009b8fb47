"""The live metrics as a Prometheus `/metrics` endpoint (`--metrics-port`), served by gevent.

`PrometheusEndpoint` is an exporter of `llmload.loadgen.monitor.live_series`: it declares every
series of `SERIES` in its own prometheus-client registry (counters and histograms incremented by
the tally, the gauges read from the tally at each scrape) and serves the registry's text with
gevent's WSGI server on all interfaces (as Locust's web UI), so a Prometheus in a cluster can
scrape the master. It keeps the times of each scraper's last scrapes (`scrapes`, by address and
user agent), so the end of a run can wait for the first scrape after it by each scraper that was
scraping regularly (`wait_for_scrapes`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmload.loadgen.monitor.live_series import SERIES, GaugeValue, Labels, Series

KEEP_SCRAPES = 4  # the times of each scraper's last scrapes kept (the end of a run reads two)
KEEP_SCRAPERS = 64  # the scrapers remembered (the oldest is forgotten first)
POLL_S = 0.05
disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series: Prometheus has the start


class _Gauges(Collector):
    """The tally's gauges, read at each scrape."""

    def __init__(self, read: Callable[[], list[GaugeValue]]) -> None:
        self.read = read

    def collect(self) -> Iterable[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for series in SERIES:
            if series.kind == "gauge":
                families[series.name] = GaugeMetricFamily(series.name, series.help, labels=series.labels)
        for series, labels, value in self.read():
            families[series.name].add_metric([labels[name] for name in series.labels], value)
        return list(families.values())


class PrometheusEndpoint:
    """The registry of the live series and its HTTP server (started by `serve`)."""

    def __init__(self, gauges: Callable[[], list[GaugeValue]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.metrics: dict[str, Any] = {}
        for series in SERIES:
            if series.kind == "counter":
                self.metrics[series.name] = Counter(
                    series.base, series.help, series.labels, registry=self.registry
                )
            elif series.kind == "histogram":
                self.metrics[series.name] = Histogram(
                    series.name, series.help, series.labels, registry=self.registry, buckets=series.buckets
                )
        self.registry.register(_Gauges(gauges))
        self.scrapes: dict[tuple[str, str], list[float]] = {}
        self.server: WSGIServer | None = None

    def add(self, series: Series, labels: Labels, amount: float) -> None:
        self.metrics[series.name].labels(**labels).inc(amount)

    def observe(self, series: Series, labels: Labels, values: Sequence[float]) -> None:
        if values:
            histogram = self.metrics[series.name].labels(**labels)
            for value in values:
                histogram.observe(value)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        answer = self._metrics_app(environ, start_response)
        who = (str(environ.get("REMOTE_ADDR", "")), str(environ.get("HTTP_USER_AGENT", "")))
        times = self.scrapes.pop(who, [])  # re-inserted last: the dict keeps the scrapers by recency
        self.scrapes[who] = [*times[-KEEP_SCRAPES + 1 :], time.time()]
        if len(self.scrapes) > KEEP_SCRAPERS:
            del self.scrapes[next(iter(self.scrapes))]
        return iter(answer)

    def serve(self, port: int) -> None:
        """Serve /metrics on `port` of every interface; OSError when the port cannot be bound."""
        self._metrics_app = make_wsgi_app(self.registry)
        server = WSGIServer(("", port), self._app, log=None, error_log=None)
        server.start()
        self.server = server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None

    def wait_for_scrapes(self, ended: float, longest: float) -> None:
        """Wait for the first scrape after `ended` by each scraper still scraping regularly (its
        last scrape within two of its intervals, plus a second, of `ended`): at most two of the
        slowest one's intervals plus a second, and `longest` seconds; not at all without one."""
        intervals = {
            who: times[-1] - times[-2]
            for who, times in self.scrapes.items()
            if len(times) >= 2 and ended - times[-1] <= 2.0 * (times[-1] - times[-2]) + 1.0
        }
        if not intervals:
            return
        deadline = ended + min(2.0 * max(intervals.values()) + 1.0, longest)
        while any(self.scrapes[who][-1] < ended for who in intervals) and time.time() < deadline:
            gevent.sleep(POLL_S)
