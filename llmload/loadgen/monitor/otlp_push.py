"""The live metrics pushed over OTLP/HTTP (`--otlp URL`), with OpenTelemetry's SDK.

`OtlpPush` is an exporter of `llmload.loadgen.monitor.live_series`: the same series as the
Prometheus endpoint (counters under their names without `_total`, as OpenTelemetry names them;
histograms with the same bucket bounds; the gauges observed from the tally at each export),
cumulative, exported every `EXPORT_INTERVAL_S` and once more when the run's process quits
(`close`). The SDK and its OTLP/HTTP exporter are the optional extra `llmload[otlp]`: imported
only when `--otlp` is given (which `llmload.loadgen.options.otlp_url` checks is installed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llmload.loadgen.monitor.live_series import SERIES, GaugeValue, Labels, Series

EXPORT_INTERVAL_S = 5.0
EXPORT_TIMEOUT_S = 5.0


def metrics_endpoint(url: str) -> str:
    """The collector's metrics path: the URL as given, or `/v1/metrics` on a URL without a path."""
    return url if url.rstrip("/").count("/") > 2 else url.rstrip("/") + "/v1/metrics"


class OtlpPush:
    """A meter provider pushing the live series to one OTLP/HTTP endpoint."""

    def __init__(self, url: str, gauges: Callable[[], list[GaugeValue]]) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        exporter = OTLPMetricExporter(endpoint=metrics_endpoint(url), timeout=EXPORT_TIMEOUT_S)
        reader = PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=EXPORT_INTERVAL_S * 1000,
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
        self.provider = MeterProvider(
            metric_readers=[reader], resource=Resource.create({"service.name": "llmload"})
        )
        meter = self.provider.get_meter("llmload")
        self.instruments: dict[str, Any] = {}

        def observe(series: Series) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_: CallbackOptions) -> Iterable[Observation]:
                return [Observation(value, labels) for s, labels, value in gauges() if s is series]

            return callback

        for series in SERIES:
            if series.kind == "counter":
                self.instruments[series.name] = meter.create_counter(series.base, description=series.help)
            elif series.kind == "histogram":
                self.instruments[series.name] = meter.create_histogram(
                    series.name,
                    unit="s",
                    description=series.help,
                    explicit_bucket_boundaries_advisory=series.buckets,
                )
            else:
                meter.create_observable_gauge(
                    series.name, callbacks=[observe(series)], description=series.help
                )

    def add(self, series: Series, labels: Labels, amount: float) -> None:
        self.instruments[series.name].add(amount, labels)

    def observe(self, series: Series, labels: Labels, values: Sequence[float]) -> None:
        histogram = self.instruments[series.name]
        for value in values:
            histogram.record(value, labels)

    def close(self) -> None:
        """Export what is left, then stop the exporter (its failures are the SDK's log lines)."""
        self.provider.shutdown(timeout_millis=EXPORT_TIMEOUT_S * 1000)
