"""Self-calibration: is the load generator itself keeping up?

A saturated client reads its sockets late. Message times are the kernel's receive stamps where
the connection has them (llmload.loadgen.receive_stamps), so that lateness does not enter TTFT or E2EL; but
chunks read together share one stamp (ITL suffers), TLS connections have no stamps, and a client
that reads late lets socket buffers fill until the server waits on it (tokens/s deflates). Every
process that runs users (the local process, or each worker) therefore samples itself while a
test runs:

- `cpu`: `psutil.Process().cpu_percent()` since the previous sample, in percent of one core;
- `rss`: resident memory, bytes;
- `lag_ms`: event-loop lag, the largest oversleep of a greenlet that sleeps `PROBE_S` again and
  again during the interval: how late a greenlet (a stream whose bytes just arrived) gets the CPU.

Samples go to the master as the custom message `llmload_health` (like the records) and are
written there to `<prefix>_health.jsonl`, one line each: {"t": epoch seconds at the end of the
interval, "worker": id, "cpu": percent of one core, "rss": bytes, "lag_ms": largest lag in the
interval}. The schema is shared with the soak reports: keep it.

Post-processing (`rung_health`) judges each rung from the samples of its time window: a rung is
*saturated* when some worker's mean CPU over the rung is above `CPU_SATURATED_PCT` or its median
per-interval lag is above `LAG_SATURATED_MS` (thresholds from benchmarks/overhead.py; see
docs/scaling.md). The table marks such a rung and advises more processes. With kernel
stamps the records also carry each request's longest read delay (arrival -> read); its p99 per
rung is reported beside the samples' figures (`read_delay_p99_ms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.analysis.rung_tally import RungTally
from llmload.analysis.sweep_rows import SweepRow
from llmload.core.jsonl import iter_jsonl
from llmload.core.run_files import RunFiles
from llmload.core.stats import mean, percentile

SAMPLE_INTERVAL_S = 1.0  # one sample per process per second (llmload.loadgen.health_sampler)
CPU_SATURATED_PCT = 85.0
LAG_SATURATED_MS = 10.0
MIN_OVERLAP = 0.5  # a sample speaks for a rung when at least half of its interval lies in it


def health_path(records_path: str | Path) -> Path:
    """`<prefix>_health.jsonl` next to `<prefix>_records.jsonl`."""
    return RunFiles.of_records(records_path).health


def read_health(path: str | Path) -> list[dict[str, Any]]:
    """Samples of a health file ([] if there is none); lines that are not samples are skipped."""
    samples = []
    for _, sample in iter_jsonl(path):
        if sample is None:
            continue
        try:
            float(sample["t"]), float(sample["cpu"]), float(sample["lag_ms"]), str(sample["worker"])
        except (ValueError, TypeError, KeyError):
            continue
        samples.append(sample)
    return samples


@dataclass(frozen=True, slots=True)
class RungHealth:
    """The generator's state during one rung: the worst worker's figures."""

    cpu_pct: float  # highest per-worker mean CPU over the rung, percent of one core
    lag_ms: float  # highest per-worker median of the per-interval largest lag
    lag_max_ms: float  # largest lag seen by any worker during the rung
    worker: str  # the worker with the highest CPU
    samples: int

    @property
    def saturated(self) -> bool:
        return self.cpu_pct > CPU_SATURATED_PCT or self.lag_ms > LAG_SATURATED_MS

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_pct": round(self.cpu_pct, 1),
            "lag_ms": round(self.lag_ms, 2),
            "lag_max_ms": round(self.lag_max_ms, 2),
            "worker": self.worker,
            "samples": self.samples,
            "saturated": self.saturated,
        }


def _in_window(samples: Sequence[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """Samples whose interval (t - SAMPLE_INTERVAL_S, t] lies at least MIN_OVERLAP in the window;
    for a rung shorter than that, the one sample that overlaps it most."""

    def overlap(s: dict[str, Any]) -> float:
        t = float(s["t"])
        return max(0.0, min(t, end) - max(t - SAMPLE_INTERVAL_S, start)) / SAMPLE_INTERVAL_S

    inside = [s for s in samples if overlap(s) >= MIN_OVERLAP]
    if inside:
        return inside
    best = max(samples, key=overlap, default=None)
    return [best] if best is not None and overlap(best) > 0 else []


def rung_health(samples: Iterable[dict[str, Any]], start: float, end: float) -> RungHealth | None:
    """The generator's health over [start, end] (a rung's window); None without samples."""
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_worker.setdefault(str(s["worker"]), []).append(s)
    figures = []
    for worker, own in by_worker.items():
        window = _in_window(own, start, end)
        if window:
            lags = [float(s["lag_ms"]) for s in window]
            cpu = mean([float(s["cpu"]) for s in window])
            figures.append((cpu, percentile(lags, 50.0), max(lags), worker, len(window)))
    if not figures:
        return None
    busiest = max(figures)
    return RungHealth(
        cpu_pct=busiest[0],
        lag_ms=max(f[1] for f in figures),
        lag_max_ms=max(f[2] for f in figures),
        worker=busiest[3],
        samples=sum(f[4] for f in figures),
    )


def flag_saturated(
    rows: Sequence[SweepRow], rungs: Sequence[RungTally], samples: Sequence[dict[str, Any]]
) -> None:
    """Fill in each row's `generator` figures and `saturated` flag from the health samples
    taken during its rung (first request sent to last response received), plus the p99 of the
    records' read delay (arrival in the kernel -> read by the generator, kernel stamps only)."""
    by_index = {r.index: r for r in rungs}
    for row in rows:
        rung = by_index[row.rung]
        health = rung_health(samples, rung.first_start, rung.last_end) if samples else None
        figures = health.as_dict() if health is not None else {}
        delays = rung.read_delays_ms
        if delays:
            figures["read_delay_p99_ms"] = round(percentile(delays, 99.0), 2)
        if figures:
            row.generator = figures
            row.saturated = health is not None and health.saturated


def timing_errors(
    requests: Iterable[tuple[str, float, Sequence[float]]], truth: Mapping[str, Mapping[str, Any]]
) -> tuple[list[float], list[float]]:
    """The client's timing error against a server's ground truth (the simulator's truth log).

    `requests` are (request id, t_start epoch, chunk times in s after t_start) as the client saw
    them. Returns (chunk delays, ITL errors) in seconds: for every content chunk, when the client
    got it minus when the server wrote it; for every gap between chunks, the client's gap minus
    the server's. Requests whose chunk count differs from the truth's are skipped."""
    delays: list[float] = []
    itl_errors: list[float] = []
    for request_id, t_start, chunk_times in requests:
        true_times = (truth.get(request_id) or {}).get("chunk_times") or []
        if not chunk_times or len(true_times) != len(chunk_times):
            continue
        seen = [t_start + c for c in chunk_times]
        delays.extend(s - t for s, t in zip(seen, true_times, strict=True))
        itl_errors.extend(
            (seen[i] - seen[i - 1]) - (true_times[i] - true_times[i - 1]) for i in range(1, len(seen))
        )
    return delays, itl_errors
