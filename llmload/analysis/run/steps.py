"""The decode step and the batch as the server ran them, measured per rung: what `llmload budget`,
the twin's Amdahl column and the sweep's note on queued requests read, instead of assuming that
every user is in the batch and that every step advances each sequence by the acceptance length.

Per rung, from its measured, completed, streamed requests (docs/integrate.md defines each):

- **step_ms**: the median of the server's steps. Every running sequence gets its tokens at the
  end of a step, so the gap between a stream's consecutive steps is one step. A step at batch b is
  seen by b streams: each gap is weighted by 1 / (the streams decoding at its middle), so every
  step counts once, as the server's own log of its steps counts it (the simulator's truth log).
  A chunk is a step unless the server sends several chunks a step (llama.cpp and TGI send each
  speculative token in its own chunk): then more than `GROUPED_SHARE` of the rung's gaps are
  under `GROUP_SHARE` of its 90th-percentile gap, and chunks closer than that are one step.
  Their mean (each step once: the rung's busy time per step) is the step of the Amdahl bound:
  a change that removes d from every step removes d x steps from that busy time.
- **batch**: the sequences in a step: with the server's metrics scraped, the most `running` it
  reported in the rung's window (the batch when full); else the streams decoding at once (first
  step to last), the same weighted median as the step.
- **tokens_per_step**: per sequence, from the streams: their tokens over their steps (the last
  step of a request is cut at what it has left, so short outputs read a little low). The
  server's counters (1 + accepted / drafts) are shown beside it: they count only steps that had a
  draft, the stream counts every step.
- **waited**: requests that waited for a place in the batch (`waited_requests`); with metrics,
  also the most `waiting` the server reported while its batch was at its fullest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from llmload.analysis.run.server_metrics import Sample, metrics_path, read_samples
from llmload.analysis.run.window import RungWindow, record_windows
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE
from llmload.core.stats import percentiles_of_array

GROUP_SHARE = 0.2  # gaps under this share of the 90th-percentile gap are inside one step ...
GROUPED_SHARE = 0.10  # ... when more than this share of the gaps are such
WAIT_STEPS = 2.0  # a request waited when its TTFT is this many of its steps beyond the shortest


@dataclass(frozen=True, slots=True)
class RungSteps:
    """One rung's step and batch as measured (module docstring); None: not measurable."""

    rung: int
    conc: int
    streams: int  # completed streamed requests with chunk times
    step_ms: float | None
    chunks_per_step: float  # 1: a chunk is a step
    batch: float | None
    batch_source: str  # "server" (its running gauge) or "streams" (decoding at once)
    decoding_max: int  # most streams decoding at once
    tokens_per_step: float | None  # per sequence, from the streams
    waited: int  # requests that waited for a place
    server_waiting: float | None = None  # most waiting the server reported while its batch was full
    counters_accept: float | None = None  # the server's 1 + accepted / drafts, when scraped
    step_mean_ms: float | None = None  # the mean of the server's steps, each once (the Amdahl bound's)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def queued(self) -> bool:
        return self.waited > 0 or bool(self.server_waiting)


def stepped(rec: RequestRecord) -> bool:
    """A request whose chunks are the server's steps, the records every step figure reads (here,
    the twin's fit and its replay): measured, completed, streamed, with at least one chunk time
    (a one-chunk request was in one step's batch; it has no gap between steps)."""
    return rec.ok and rec.phase == MEASURE_PHASE and rec.stream and len(rec.chunk_times) > 0


def _step_times(times: np.ndarray, merge_below: float) -> np.ndarray:
    """A stream's step times (absolute s): its chunks, those closer than `merge_below` to the one
    before taken as one step (the step's time is its first chunk's)."""
    if merge_below <= 0 or times.size < 2:
        return times
    keep = np.concatenate(([True], np.diff(times) >= merge_below))
    return times[keep]


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][int(np.searchsorted(cumulative, cumulative[-1] / 2.0))])


def decoding_at(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of the intervals [starts, ends] hold each time of `t` (starts and ends sorted)."""
    return np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="left")


def most_at_once(starts: Sequence[float], ends: Sequence[float]) -> int:
    """The most intervals [start, end] that hold one instant."""
    if not starts:
        return 0
    s, e = np.sort(np.asarray(starts)), np.sort(np.asarray(ends))
    return int(decoding_at(s, e, s).max())


def waited_requests(
    sends: Sequence[float],
    firsts: Sequence[float],
    lasts: Sequence[float],
    steps_s: Sequence[float],
    users: int,
) -> tuple[int, int]:
    """(requests that waited for a place in the batch, the most decoding at once), from each
    request's send, first and last step (absolute s) and its own step (s). A request waited when
    the rung never decoded all of its users at once (the most at once, D, is below `users`), the
    batch was full (D decoding) at some time between its send and the step that gave its first
    tokens, and its TTFT is more than `WAIT_STEPS` of its steps beyond the rung's shortest TTFT
    (its prefill and the step in progress account for that much)."""
    most = most_at_once(firsts, lasts)
    if not sends or most >= users:
        return 0, most
    starts, ends = np.sort(np.asarray(firsts)), np.sort(np.asarray(lasts))
    at_start = decoding_at(starts, ends, starts)  # decoding right after each stream's first step
    shortest = min(f - s for s, f in zip(sends, firsts, strict=True))
    waited = 0
    for send, first, step in zip(sends, firsts, steps_s, strict=True):
        if first - send <= shortest + WAIT_STEPS * step:
            continue
        lo, hi = np.searchsorted(starts, [send, first - step], side="right")
        full = int(decoding_at(starts, ends, np.asarray([send]))[0]) >= most
        if full or (hi > lo and int(at_start[lo:hi].max()) >= most):
            waited += 1
    return waited, most


def measure_rung(rung: int, users: int, records: Iterable[RequestRecord]) -> RungSteps:
    """The rung's step, batch, tokens per step and queued requests from its records."""
    streams = [r for r in records if stepped(r)]
    chunks = [r.t_start + np.asarray(r.chunk_times, dtype=np.float64) for r in streams]
    gaps = np.concatenate([np.diff(c) for c in chunks]) if chunks else np.empty(0)
    gaps = gaps[gaps > 0]
    merge_below = 0.0
    if gaps.size:
        below = GROUP_SHARE * percentiles_of_array(gaps, (90.0,))[90.0]
        if np.count_nonzero(gaps < below) > GROUPED_SHARE * gaps.size:
            merge_below = below
    steps = [_step_times(c, merge_below) for c in chunks]
    if not streams:
        return RungSteps(rung, users, 0, None, 1.0, None, "streams", 0, None, 0)
    firsts = [float(s[0]) for s in steps]
    lasts = [float(s[-1]) for s in steps]
    starts, ends = np.sort(np.asarray(firsts)), np.sort(np.asarray(lasts))
    values, mids = [], []
    for s in steps:
        d = np.diff(s)
        ok = d > 0
        values.append(d[ok])
        mids.append((s[1:] + s[:-1])[ok] / 2.0)
    gap_s = np.concatenate(values) if values else np.empty(0)
    mid_s = np.concatenate(mids) if mids else np.empty(0)
    step_ms = batch = step_mean_ms = None
    if gap_s.size:
        at_once = np.maximum(decoding_at(starts, ends, mid_s), 1).astype(np.float64)
        step_ms = _weighted_median(gap_s, 1.0 / at_once) * 1000.0
        step_mean_ms = float(np.average(gap_s, weights=1.0 / at_once)) * 1000.0
        batch = _weighted_median(at_once, 1.0 / at_once)
    own = [(float(s[-1] - s[0]) / (s.size - 1)) if s.size > 1 else 0.0 for s in steps]
    waited, most = waited_requests([r.t_start for r in streams], firsts, lasts, own, users)
    n_steps = sum(int(s.size) for s in steps)
    return RungSteps(
        rung=rung,
        conc=users,
        streams=len(streams),
        step_ms=step_ms,
        chunks_per_step=sum(len(c) for c in chunks) / n_steps,
        batch=batch,
        batch_source="streams",
        decoding_max=most,
        tokens_per_step=sum(r.output_tokens for r in streams) / n_steps,
        waited=waited,
        step_mean_ms=step_mean_ms,
    )


def _peak_batch(samples: Sequence[Sample], window: RungWindow) -> tuple[float | None, float | None]:
    """(the most running, the most waiting while running was at that most) in the window."""
    inside = [s.values for s in samples if window.start <= s.t <= window.end and "running" in s.values]
    if not inside:
        return None, None
    most = max(v["running"] for v in inside)
    if most <= 0:
        return None, None
    waiting = [v["waiting"] for v in inside if v["running"] >= most and "waiting" in v]
    return most, (max(waiting) if waiting else None)


def measure_run(
    records: Iterable[RequestRecord],
    prefix: str | None = None,
    accept_by_rung: Mapping[int, float | None] | None = None,
) -> list[RungSteps]:
    """Every measured rung's steps (`measure_rung`), with the server's running and waiting in the
    rung's window when `prefix` has a scrape file, and its counters' acceptance (`accept_by_rung`)."""
    by_rung: dict[int, list[RequestRecord]] = {}
    users: dict[int, int] = {}
    for rec in records:
        if rec.phase == MEASURE_PHASE:
            by_rung.setdefault(rec.rung, []).append(rec)
            users[rec.rung] = max(users.get(rec.rung, 0), rec.users)
    samples: list[Sample] = []
    if prefix is not None and metrics_path(prefix).exists():
        samples = read_samples(metrics_path(prefix))[1]
    windows = record_windows(rec for recs in by_rung.values() for rec in recs) if samples else {}
    out = []
    for index in sorted(by_rung):
        measured = measure_rung(index, users[index], by_rung[index])
        running, waiting = _peak_batch(samples, windows[index]) if index in windows else (None, None)
        changes: dict[str, Any] = {"counters_accept": (accept_by_rung or {}).get(index)}
        if running is not None:
            changes |= {"batch": running, "batch_source": "server", "server_waiting": waiting}
        out.append(_replace(measured, changes))
    return out


def _replace(steps: RungSteps, changes: Mapping[str, Any]) -> RungSteps:
    return RungSteps(**{**asdict(steps), **changes})
