"""Self-calibration: is the load generator itself keeping up?

A saturated client reads its sockets late. Message times are the kernel's receive stamps where
the connection has them (llmload.loadgen.transport.receive_stamps), so that lateness does not
enter TTFT or E2EL; but chunks read together share one stamp (ITL suffers), TLS connections have
no stamps, and a client that reads late lets socket buffers fill until the server waits on it
(tokens/s deflates). Every process that runs users (the local process, or each worker) therefore
samples itself while a test runs:

- `cpu`: `psutil.Process().cpu_percent()` since the previous sample, in percent of one core;
- `rss`: resident memory, bytes;
- `lag_ms`: event-loop lag, the largest oversleep of a greenlet that sleeps `PROBE_S` again and
  again during the interval: how late a greenlet (a stream whose bytes just arrived) gets the CPU.

Samples go to the master as the custom message `llmload_health` (like the records) and are
written there to `<prefix>_health.jsonl`, one line each: {"t": epoch seconds at the end of the
interval, "worker": id, "cpu": percent of one core, "rss": bytes, "lag_ms": largest lag in the
interval}. The schema is shared with the soak reports: keep it.

Each sample also carries the machine's figures over its interval (`machine_cpu`: percent of all
cores busy, `steal`, `load1`, `cores`) and, on Linux, `wait`: the percent of the interval the
process's event loop was runnable but waited for a CPU; samples written before these existed lack
them. The generator's demand is its CPU plus that wait: what it wanted, not what it got.

Post-processing (`rung_health`) judges each rung from the samples of its one window
(llmload.analysis.run.window). A late
event loop (median per-interval lag above `LAG_SATURATED_MS`) has two causes that want opposite
remedies, told apart by who used the CPU:
- *saturated*: the generator itself is busy (some worker's mean CPU over the rung above
  `CPU_SATURATED_PCT` of a core), or its loop is late while it used more than
  `IDLE_GENERATOR_PCT` of a core and the machine had CPU to spare: the table marks the rung `^`
  and advises more processes. A nearly idle generator is never saturated, whatever its lag: a
  process that ran a few % of a core was held by the machine or by a moment's start-up work
  (the collection at each stage's go), which more processes would not cure;
- *machine busy*: the loop is late, the generator is nearly idle (CPU at most
  `IDLE_GENERATOR_PCT` of a core, so it is not itself a large part of the load), and the machine
  is busy (`machine_cpu` at least `MACHINE_BUSY_PCT`, or `steal` at least
  `STEAL_BUSY_PCT`): other processes or the hypervisor took the CPU, more processes would only
  add to it; the table says the figures may be late and why. Thresholds: docs/scaling.md. With kernel
stamps the records also carry each request's longest read delay (arrival -> read); its p99 per
rung is reported beside the samples' figures (`read_delay_p99_ms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.analysis.run.rung_tally import RungTally
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.files.jsonl import iter_jsonl
from llmload.core.files.run_files import RunFiles
from llmload.core.stats import mean, percentile

SAMPLE_INTERVAL_S = 1.0  # one sample per process per second (llmload.loadgen.monitor.health_sampler)
CPU_SATURATED_PCT = 85.0
LAG_SATURATED_MS = 10.0
MACHINE_BUSY_PCT = 90.0  # of all cores: no idle core left for the generator's next wake-up
IDLE_GENERATOR_PCT = 50.0  # of one core: above it the generator is a large part of a busy machine
STEAL_BUSY_PCT = 10.0
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
    machine: MachineLoad | None = None  # None for samples without the machine's figures
    wait_pct: float | None = None  # the busiest worker's mean run-queue wait, % of the time (None: unknown)

    @property
    def late(self) -> bool:
        return self.lag_ms > LAG_SATURATED_MS

    @property
    def machine_busy(self) -> bool:
        """The loop was late because the machine was busy, not the generator."""
        return (
            self.late
            and self.cpu_pct <= IDLE_GENERATOR_PCT
            and not (self.wait_pct is not None and self.demand_pct > CPU_SATURATED_PCT)
            and self.machine is not None
            and self.machine.busy
        )

    @property
    def demand_pct(self) -> float:
        """How much of a core the generator wanted: its CPU plus the time its loop waited, runnable,
        for a CPU (`wait_pct`; samples without it: its CPU alone)."""
        return self.cpu_pct + (self.wait_pct or 0.0)

    @property
    def saturated(self) -> bool:
        """The generator itself could not keep up: more processes would help. Only a generator
        that wanted much of its core can be (`demand_pct`): a late loop in a process that was
        nearly idle (at most IDLE_GENERATOR_PCT of a core) was held by something else (a busy
        machine, start-up work such as the garbage collection at each stage's go), which more
        processes would not cure."""
        if self.cpu_pct > CPU_SATURATED_PCT or (
            self.wait_pct is not None and self.demand_pct > CPU_SATURATED_PCT
        ):
            return True
        return self.late and self.demand_pct > IDLE_GENERATOR_PCT and not self.machine_busy

    def as_dict(self) -> dict[str, Any]:
        figures = {
            "cpu_pct": round(self.cpu_pct, 1),
            "lag_ms": round(self.lag_ms, 2),
            "lag_max_ms": round(self.lag_max_ms, 2),
            "worker": self.worker,
            "samples": self.samples,
            "saturated": self.saturated,
            "machine_busy": self.machine_busy,
        }
        if self.wait_pct is not None:
            figures["wait_pct"] = round(self.wait_pct, 1)
        if self.machine is not None:
            figures |= self.machine.as_dict()
        return figures


@dataclass(frozen=True, slots=True)
class MachineLoad:
    """The machine during a rung: the busiest per-worker means of its samples' figures."""

    cpu_pct: float  # percent of all cores busy
    steal_pct: float
    load1: float
    cores: int

    @property
    def busy(self) -> bool:
        return self.cpu_pct >= MACHINE_BUSY_PCT or self.steal_pct >= STEAL_BUSY_PCT

    def as_dict(self) -> dict[str, Any]:
        return {
            "machine_cpu_pct": round(self.cpu_pct, 1),
            "steal_pct": round(self.steal_pct, 1),
            "load1": round(self.load1, 2),
            "cores": self.cores,
        }


MACHINE_KEYS = ("machine_cpu", "steal", "load1", "cores")


def _machine_load(window: Sequence[dict[str, Any]]) -> MachineLoad | None:
    """The mean machine figures of a worker's samples in a rung; None if any lacks them."""
    try:
        values = [[float(s[key]) for key in MACHINE_KEYS] for s in window]
    except (KeyError, TypeError, ValueError):
        return None
    if not values:
        return None
    cpu, steal, load1, cores = (mean(column) for column in zip(*values, strict=True))
    return MachineLoad(cpu, steal, load1, int(round(cores)))


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
    machines: list[MachineLoad] = []
    for worker, own in by_worker.items():
        window = _in_window(own, start, end)
        if window:
            lags = [float(s["lag_ms"]) for s in window]
            cpu = mean([float(s["cpu"]) for s in window])
            waits = [float(s["wait"]) for s in window if isinstance(s.get("wait"), int | float)]
            wait = mean(waits) if len(waits) == len(window) else None
            figures.append((cpu, percentile(lags, 50.0), max(lags), worker, len(window), wait))
            machine = _machine_load(window)
            if machine is not None:
                machines.append(machine)
    if not figures:
        return None
    busiest = max(figures)
    return RungHealth(
        cpu_pct=busiest[0],
        lag_ms=max(f[1] for f in figures),
        lag_max_ms=max(f[2] for f in figures),
        worker=busiest[3],
        samples=sum(f[4] for f in figures),
        wait_pct=busiest[5],
        # every worker must have reported the machine, or the verdict would rest on part of it
        machine=max(machines, key=lambda m: m.cpu_pct) if len(machines) == len(figures) else None,
    )


def flag_saturated(
    rows: Sequence[SweepRow], rungs: Sequence[RungTally], samples: Sequence[dict[str, Any]]
) -> None:
    """Fill in each row's `generator` figures and `saturated` flag from the health samples
    taken during its rung's one window (`RungTally.window`), plus the p99 of the
    records' read delay (arrival in the kernel -> read by the generator, kernel stamps only)."""
    by_index = {r.index: r for r in rungs}
    for row in rows:
        rung = by_index[row.rung]
        window = rung.window
        health = rung_health(samples, window.start, window.end) if samples else None
        figures = health.as_dict() if health is not None else {}
        delays = rung.read_delays_ms
        if delays:
            figures["read_delay_p99_ms"] = round(percentile(delays, 99.0), 2)
        if figures:
            row.generator = figures
            row.saturated = health is not None and health.saturated
            row.machine_busy = health is not None and health.machine_busy


def loop_lag_ms(rows: Sequence[SweepRow]) -> dict[int, float]:
    """Rung index -> the largest event-loop lag of the rung (`lag_max_ms` of the row's generator
    figures, as `flag_saturated` filled them in); rungs without health samples are left out."""
    lags = {}
    for row in rows:
        lag = (row.generator or {}).get("lag_max_ms")
        if isinstance(lag, int | float):
            lags[row.rung] = float(lag)
    return lags


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
