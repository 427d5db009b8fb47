"""Live metrics of a run in progress, on the master (or the local process): `--metrics-port`, `--otlp`.

`LiveMetrics.install` (from `events.init`; never on a worker) makes a
`llmload.loadgen.monitor.live_series.LiveTally` with its exporters (the Prometheus endpoint on
`--metrics-port`, `llmload.loadgen.monitor.prometheus_endpoint`; the OTLP push to `--otlp`,
`llmload.loadgen.monitor.otlp_push`), and feeds it from the ladder: every record the run receives
(`LadderShape.record_hooks`: after the run's own sinks, so after the record was written) and
every health sample (`LadderShape.health_hooks`). The series live as long as the process, one
label per run, so a web UI's second run adds its own.

When the process quits, the endpoint waits (`PrometheusEndpoint.wait_for_scrapes`) for the first
scrape after the end by each scraper that scraped it regularly until then (told apart by address
and user agent; at most two of the slowest one's intervals, and `LINGER_MAX_S`), so the last
rung's final counts reach Prometheus; the OTLP push exports once more.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Self

from llmload.core.config import ConfigError
from llmload.core.files.records import RequestRecord
from llmload.loadgen.monitor.live_series import Exporter, LiveTally
from llmload.loadgen.monitor.otlp_push import OtlpPush
from llmload.loadgen.monitor.prometheus_endpoint import PrometheusEndpoint
from llmload.loadgen.run.ladder import LadderHook
from llmload.loadgen.run.run_state import RunState

LINGER_MAX_S = 60.0  # the longest wait for a last scrape (Prometheus scrapes every 15-60 s)


class LiveMetrics(LadderHook):
    """The live tally of one process's runs and its exporters (see the module docstring)."""

    LISTENS: ClassVar[dict[str, str]] = {"quitting": "on_quitting"}

    endpoint: PrometheusEndpoint | None = None
    push: OtlpPush | None = None

    @classmethod
    def install(cls, environment: Any) -> Self | None:
        """The hook when --metrics-port or --otlp is given on a master or local process; ConfigError
        (one line) when the port cannot be served."""
        options = environment.parsed_options
        port = getattr(options, "metrics_port", 0) or 0
        otlp = getattr(options, "otlp", "") or ""
        if not port and not otlp:
            return None
        hook = super().install(environment)
        if hook is not None:
            hook.start(port, otlp)
        return hook

    def start(self, port: int, otlp: str) -> None:
        shape = self.environment.shape_class
        self.tally = LiveTally([], self.stage_now)
        exporters: list[Exporter] = []
        if port:
            self.endpoint = PrometheusEndpoint(self.tally.gauges)
            try:
                self.endpoint.serve(port)
            except OSError as e:
                raise ConfigError(
                    f"--metrics-port {port}: cannot serve /metrics there: {e.strerror or e}"
                ) from None
            exporters.append(self.endpoint)
        if otlp:
            self.push = OtlpPush(otlp, self.tally.gauges)
            exporters.append(self.push)
        self.tally.exporters = exporters
        shape.record_hooks.append(self.on_record)
        shape.health_hooks.append(self.on_health)

    def stage_now(self) -> tuple[str, int, int] | None:
        run = self.environment.shape_class.run
        current = None if run is None else run.current
        if run is None or current is None:
            return None
        return run.run_id, current.stage.rung, current.stage.users

    def on_record(self, run: RunState, record: RequestRecord) -> None:
        self.tally.record(record)

    def on_health(self, run: RunState, sample: dict[str, Any]) -> None:
        self.tally.health(run.run_id, sample)

    def on_quitting(self, **_: Any) -> None:
        if self.endpoint is not None:
            self.endpoint.wait_for_scrapes(time.time(), LINGER_MAX_S)
            self.endpoint.stop()
        if self.push is not None:
            self.push.close()
