"""The live metrics' series and the tally that feeds them: one definition for every exporter.

While a run is in progress, the master (or the local process) hands each record it receives (the
same record `<prefix>_records.jsonl` holds, after it was written) to `LiveTally.record`, and each
health sample of a users' process to `LiveTally.health`. The tally turns them into increments of
the series of `SERIES` on every exporter it was given (`Exporter`: the Prometheus endpoint,
`llmload.loadgen.monitor.prometheus_endpoint`, and the OTLP push,
`llmload.loadgen.monitor.otlp_push`); the gauges (the running rung and its users, the client's
health) are read when an exporter collects (`LiveTally.gauges`). Definitions of every series:
docs/watching.md.

- `llmload_output_tokens_total{run,rung,phase}`: output tokens of completed (outcome "ok")
  requests, as the table's `tokens` (`llmload.analysis.run.sweep_rows`).
- `llmload_requests_total{run,rung,phase,outcome}`: requests by outcome ("ok" or the failure's kind).
- `llmload_ttft_seconds`, `llmload_itl_seconds`, `llmload_e2e_seconds` `{run,rung,phase}`:
  histograms of the completed requests' TTFT, inter-token latencies and end-to-end latency, as the
  table's (`llmload.analysis.run.metrics`).
- `llmload_rung{run}`, `llmload_rung_users{run}`: the stage running now (its rung index, -1 for the
  warm-up) and its users.
- `llmload_client_cpu_percent{run,worker}`, `llmload_client_loop_lag_seconds{run,worker}`: the last
  health sample of each users' process (`llmload.loadgen.monitor.health_sampler`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llmload.analysis.run.metrics import itl_ms, ttft_ms
from llmload.core.files.records import RequestRecord

Labels = dict[str, str]
RUNG_LABELS = ("run", "rung", "phase")

# LLM latencies: a first token in milliseconds to a minute (a long queue), a token gap in
# milliseconds, a whole request up to ten minutes (as vLLM's own histograms)
TTFT_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1,
    1.5,
    2,
    3,
    5,
    10,
    20,
    30,
    60,
)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
               0.2, 0.3, 0.5, 1)  # fmt: skip
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)


@dataclass(frozen=True, slots=True)
class Series:
    """One series: its name as Prometheus shows it (a counter's with `_total`), kind, help, labels,
    and a histogram's bucket bounds."""

    name: str
    kind: str  # "counter", "histogram" or "gauge"
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def base(self) -> str:
        """The name without a counter's `_total` (the name prometheus_client and OTLP take)."""
        return self.name.removesuffix("_total")


TOKENS = Series("llmload_output_tokens_total", "counter", "output tokens of completed requests", RUNG_LABELS)
REQUESTS = Series(
    "llmload_requests_total",
    "counter",
    "requests by outcome (ok or the failure's kind)",
    (*RUNG_LABELS, "outcome"),
)
TTFT = Series(
    "llmload_ttft_seconds",
    "histogram",
    "time to first token of completed requests",
    RUNG_LABELS,
    TTFT_BUCKETS,
)
ITL = Series(
    "llmload_itl_seconds",
    "histogram",
    "inter-token latencies of completed requests",
    RUNG_LABELS,
    ITL_BUCKETS,
)
E2E = Series(
    "llmload_e2e_seconds", "histogram", "end-to-end latency of completed requests", RUNG_LABELS, E2E_BUCKETS
)
RUNG = Series("llmload_rung", "gauge", "the running stage's rung index (-1: the warm-up)", ("run",))
USERS = Series("llmload_rung_users", "gauge", "the running stage's users", ("run",))
CPU = Series(
    "llmload_client_cpu_percent", "gauge", "a users' process's CPU, percent of one core", ("run", "worker")
)
LAG = Series(
    "llmload_client_loop_lag_seconds", "gauge", "a users' process's worst event-loop lag", ("run", "worker")
)
SERIES = (TOKENS, REQUESTS, TTFT, ITL, E2E, RUNG, USERS, CPU, LAG)


class Exporter(Protocol):
    """Where the tally's increments go (every series of SERIES is declared by the exporter)."""

    def add(self, series: Series, labels: Labels, amount: float) -> None: ...

    def observe(self, series: Series, labels: Labels, values: Sequence[float]) -> None: ...


GaugeValue = tuple[Series, Labels, float]
StageNow = Callable[[], tuple[str, int, int] | None]
"""The running stage as (run id, rung, users); None between runs."""


class LiveTally:
    """The records and health samples of one process's runs, as increments of the live series."""

    def __init__(self, exporters: Sequence[Exporter], stage: StageNow) -> None:
        self.exporters = list(exporters)
        self.stage = stage
        self.last_health: dict[str, tuple[str, dict[str, Any]]] = {}  # worker -> (run, its last sample)

    def record(self, rec: RequestRecord) -> None:
        """One record of the run (with the run's id, as written)."""
        labels = {"run": rec.run_id or "", "rung": str(rec.rung), "phase": rec.phase}
        ok = rec.ok
        for exporter in self.exporters:
            exporter.add(REQUESTS, {**labels, "outcome": rec.outcome}, 1)
            if not ok:
                continue
            exporter.add(TOKENS, labels, rec.output_tokens)
            exporter.observe(E2E, labels, (rec.e2e_s,))
            ttft = ttft_ms(rec)
            if ttft is not None:
                exporter.observe(TTFT, labels, (ttft / 1000.0,))
            exporter.observe(ITL, labels, [gap / 1000.0 for gap in itl_ms(rec)])

    def health(self, run_id: str, sample: dict[str, Any]) -> None:
        """A health sample of a users' process during run `run_id`."""
        self.last_health[str(sample.get("worker", ""))] = (run_id, sample)

    def gauges(self) -> list[GaugeValue]:
        """The gauges' values now: the running stage, each users' process's last health sample."""
        values: list[GaugeValue] = []
        stage = self.stage()
        if stage is not None:
            run_id, rung, users = stage
            values += [(RUNG, {"run": run_id}, float(rung)), (USERS, {"run": run_id}, float(users))]
        for worker, (run_id, sample) in sorted(self.last_health.items()):
            labels = {"run": run_id, "worker": worker}
            if isinstance(sample.get("cpu"), int | float):
                values.append((CPU, labels, float(sample["cpu"])))
            if isinstance(sample.get("lag_ms"), int | float):
                values.append((LAG, labels, sample["lag_ms"] / 1000.0))
        return values
