"""One rung's figures as running tallies, fed one record at a time: the one home of a rung's wall
time and rates, the sweep row (`row()`, and `sweep_rows` for a run's rungs) and the latency
metrics (`metrics()`).

A `RungTally` keeps running sums (requests, tokens, first start, last end, failures by kind, token
reconciliation counts, goodput), the per-request values a mean or a percentile needs as 8-byte
floats (`array('d')`: TTFT, TPOT, E2EL, per-request tok/s, ...) and the pooled per-chunk values
(ITL) as a histogram: value -> count. The records themselves are not kept, so a rung of a million
requests of 256 chunks costs tens of MB, not gigabytes (the ITL histogram grows with the distinct
gaps, which are microsecond multiples: chunk times are recorded to the microsecond). The
definitions are those of `llmload.analysis.run.sweep_rows` and `llmload.analysis.run.metrics` (their
per-request functions are used here) and the statistics those of `llmload.core.stats`.

Readers: the post-processor (`llmload.analysis.run.postprocess.load_run`, one pass over the records
file), records held in memory (`tally_rungs`, `tally_records`), the web UI's Tokens tab and
charts (`llmload.loadgen.webui.live_sweep`) and the terminal progress line (`llmload.runner.progress`).
A tally costs milliseconds per poll of the web page.
"""

from __future__ import annotations

import contextlib
import math
import struct
from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import repeat
from operator import add
from typing import Any, cast

import numpy as np

from llmload.analysis.interval import RungSlices, interval_dict
from llmload.analysis.run.metrics import (
    LATENCY_NAMES,
    SCHEDULED_NAMES,
    WAITED_MS,
    RungMetrics,
    connect_ms,
    e2el_ms,
    e2el_sched_ms,
    gaps_us,
    itl_is_per_chunk,
    itl_ms,
    meets_slo,
    queue_wait_ms,
    reasoned,
    think_ms,
    tls_ms,
    tpot_ms,
    ttfo_ms,
    ttft_ms,
    ttft_sched_ms,
    ttftc_ms,
    unanswered,
)
from llmload.analysis.run.reconcile import Tally
from llmload.analysis.run.steps import waited_requests
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.run.uncertainty import Uncertainty
from llmload.analysis.run.window import STEADY, RungWindow, TokenTimeline, WindowEvents, span_window
from llmload.core.files.chunk_index import last_micros
from llmload.core.files.records import OUTCOME_OK, RequestRecord
from llmload.core.names import DETERMINISM_PHASE, MEASURE_PHASE, WARMUP_PHASE, WARMUP_RUNG
from llmload.core.stats import (
    DEFAULT_PERCENTILES,
    Summary,
    mean,
    percentile,
    percentiles_of_array,
    summarize,
    summarize_counts,
)

# per-request latencies (ms) of completed requests (those of every measured request: `RungTally.add`)
_COMPLETED_VALUES = {
    "ttft": ttft_ms,
    "ttfo": ttfo_ms,
    "ttftc": ttftc_ms,
    "think": think_ms,
    "tpot": tpot_ms,
    "e2el": e2el_ms,
    "ttft_sched": ttft_sched_ms,
    "e2el_sched": e2el_sched_ms,
}


def _floats() -> array[float]:
    return array("d")


def _indices() -> array[int]:
    return array("q")


class _Batch:
    """Requests' chunk times packed one after another (`itemsize` bytes each), and where each
    request's times end (in bytes), until counted."""

    def __init__(self, itemsize: int) -> None:
        self.itemsize = itemsize
        self.packed = bytearray()
        self.ends: list[int] = []

    def add(self, packed: bytes) -> int:
        """Add one request's times; how many the batch holds."""
        self.packed += packed
        self.ends.append(len(self.packed))
        return len(self.packed) // self.itemsize

    def clear(self) -> list[int]:
        """Where each request's times ended, in items; the batch is empty again (no view of
        `packed` may be alive)."""
        ends = [end // self.itemsize for end in self.ends]
        del self.packed[:]
        self.ends = []
        return ends


class _Scratch:
    """Work arrays for the batches' arithmetic, shared by every histogram of the process and
    reused: fresh 2 MB arrays for every batch cost more in page faults than the arithmetic."""

    def __init__(self) -> None:
        self.scaled = np.empty(0, dtype=np.float64)
        self.micros = np.empty(0, dtype=np.int64)
        self.gaps = np.empty(0, dtype=np.int64)

    def arrays(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(scaled, micros, gaps) of `size` items each."""
        if self.micros.size < size:
            self.scaled = np.empty(size, dtype=np.float64)
            self.micros = np.empty(size, dtype=np.int64)
            self.gaps = np.empty(size, dtype=np.int64)
        return self.scaled[:size], self.micros[:size], self.gaps[:size]


_SCRATCH = _Scratch()


class GapHistogram:
    """Per-chunk ITL gaps in whole microseconds -> how many, fed one request's chunk times at a
    time. The arithmetic of `metrics.itl_gaps_us` (times * 1e6 rounded half to even, successive
    differences) is done by numpy on batches of about a quarter million chunk times; gaps under
    `DENSE_US` are counted in a dense array (2 MB; a batch without a longer or negative gap is
    counted by one `np.bincount`), longer ones in a dict. Each request's times are packed into C
    doubles as they come (`struct`: 3x faster than numpy's conversion of a list; and the float
    objects are freed at once: holding a batch of them made the decoding of 1M records twice as
    slow). Times already in microseconds (`add_micros`: a records file's chunk index) are batched
    as they are, int32."""

    BATCH = 1 << 18  # chunk times per batch
    DENSE_US = 1 << 18  # gaps under ~262 ms: dense counts
    INT64_S = 9e12  # times (s) whose microseconds fit in int64: numpy's arithmetic; beyond, Python's

    def __init__(self) -> None:
        self._seconds = _Batch(8)  # each request's chunk times (s), as C doubles
        self._micros = _Batch(4)  # each request's chunk times (µs), as int32
        self._dense: np.ndarray | None = None
        self._sparse: Counter[int] = Counter()

    def add(self, chunk_times: list[float]) -> None:
        if self._seconds.add(struct.pack(f"{len(chunk_times)}d", *chunk_times)) >= self.BATCH:
            self._flush()

    def add_micros(self, micros: bytes) -> None:
        """One request's chunk times in whole microseconds, as little-endian int32."""
        if self._micros.add(micros) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._seconds.packed:
            seconds = np.frombuffer(self._seconds.packed, dtype="=f8")
            scaled, micros, gaps = _SCRATCH.arrays(seconds.size)
            fits = seconds.max() < self.INT64_S and seconds.min() > -self.INT64_S  # nan: False
            exact = None if fits else seconds.tolist()  # a hand-made file's huge times: Python's ints
            if fits:
                np.multiply(seconds, 1e6, out=scaled)
            del seconds
            ends = self._seconds.clear()
            if exact is None:
                np.copyto(micros, np.rint(scaled, out=scaled), casting="unsafe")
                self._count(micros, gaps, ends)
            else:
                self._count_exactly(exact, ends)
        if self._micros.packed:
            packed = np.frombuffer(self._micros.packed, dtype="<i4")
            _, micros, gaps = _SCRATCH.arrays(packed.size)
            np.copyto(micros, packed)
            del packed
            self._count(micros, gaps, self._micros.clear())

    def _count(self, micros: np.ndarray, work: np.ndarray, ends: list[int]) -> None:
        """Count the gaps within each request of a batch (`ends`: where each one's times end;
        `work`: as many items as `micros`, for the gaps)."""
        if micros.size < 2:
            return
        gaps = np.subtract(micros[1:], micros[:-1], out=work[:-1])
        between = np.asarray(ends[:-1], dtype=np.int64) - 1  # last of one request -> first of next
        between = np.unique(between[(between >= 0) & (between < gaps.size)])  # requests without times
        gaps[between] = 0  # no gaps: counted as 0 here, then taken off that count
        if gaps.min() >= 0 and gaps.max() < self.DENSE_US:  # the usual batch: no sparse gap
            counted = np.bincount(gaps)
        else:
            dense = (gaps >= 0) & (gaps < self.DENSE_US)
            counted = np.bincount(gaps[dense])
            values, times = np.unique(gaps[~dense], return_counts=True)
            self._sparse.update(dict(zip(values.tolist(), times.tolist(), strict=True)))
        if between.size:
            counted[0] -= between.size
        if self._dense is None:
            self._dense = np.zeros(self.DENSE_US, dtype=np.int64)
        self._dense[: counted.size] += counted

    def _count_exactly(self, seconds: list[float], ends: list[int]) -> None:
        """Count the batch's gaps request by request on Python's ints (`metrics.gaps_us`: times
        beyond int64 microseconds), into the dict."""
        start = 0
        for end in ends:
            with contextlib.suppress(OverflowError):  # times of 1.8e302 s and more: no µs, no gap
                self._sparse.update(gaps_us(seconds[start:end]))
            start = end

    def merge(self, other: GapHistogram) -> None:
        """Add the counts of `other` (its requests follow ours; counts add up exactly)."""
        self._flush()
        other._flush()
        if other._dense is not None:
            self._dense = other._dense.copy() if self._dense is None else self._dense + other._dense
        self._sparse.update(other._sparse)

    def counts(self) -> Counter[int]:
        """Gap (µs) -> how many, of every request added so far."""
        self._flush()
        out = Counter(self._sparse)
        if self._dense is not None:
            (nonzero,) = np.nonzero(self._dense)
            out.update(dict(zip(nonzero.tolist(), self._dense[nonzero].tolist(), strict=True)))
        return out


@dataclass(slots=True)
class RungTally:
    """One rung's figures as running sums, per-request values and an ITL histogram (module
    docstring); `row()` is its sweep row and `metrics()` its latency metrics."""

    index: int
    users: int
    slo: dict[str, float] = field(default_factory=dict)  # goodput SLOs (metrics.SLO_KEYS)
    requests: int = 0
    tokens: int = 0
    partial_tokens: int = 0
    estimated: bool = False
    first_start: float = math.inf
    last_end: float = -math.inf
    failures: Counter[str] = field(default_factory=Counter)
    rates: array[float] = field(default_factory=_floats)  # output_tokens / E2E s, completed requests
    values: dict[str, array[float]] = field(default_factory=dict)  # per-request latencies, ms
    itl: bool = True  # tally the ITL (off: the sweep row alone does not need it)
    itl_us: GapHistogram = field(default_factory=GapHistogram)  # per-chunk ITL (whole µs) -> how many
    itl_token_ms: Counter[float] = field(default_factory=Counter)  # per-token ITL (ms) -> how many
    itl_per_chunk: bool = False
    counts: Tally = field(default_factory=Tally)  # token reconciliation and input tokens
    prompt_tokens: int = 0  # usage.prompt_tokens of completed requests, summed
    prompt_known: bool = True  # every completed request has prompt_tokens
    good: int = 0  # completed requests meeting every SLO
    e2e: array[float] = field(default_factory=_floats)  # E2E seconds of every measured request
    rate: float | None = None  # rate mode: the target request rate, from the first record that says it
    read_delays_ms: array[float] = field(default_factory=_floats)  # kernel stamps: read delays
    ttft_warm_ms: array[float] = field(default_factory=_floats)  # TTFT less own setup, ms
    uncertainty: Uncertainty = field(default_factory=Uncertainty)  # times a late read left uncertain
    trace_late_ms: array[float] = field(default_factory=_floats)  # trace replay: lateness per request
    new_connections: int | None = None  # None until a record says whether it reused a connection
    sessions: bool = False  # a record carries a session turn
    # reasoning models (completed requests): reasoning tokens, requests that reasoned, of those
    # the client counted and those that never answered; odd stream events of every request
    reasoning_tokens: int = 0
    reasoning_requests: int = 0
    reasoning_counted: int = 0
    unanswered: int = 0
    odd: Counter[str] = field(default_factory=Counter)
    # replies with tool calls (completed requests): how many, their calls, replies of several calls,
    # calls whose arguments are not a JSON object (llmload.loadgen.stream.tool_calls)
    tools: Counter[str] = field(default_factory=Counter)
    # completed streams of two or more chunks: send, first and last chunk (epoch s), mean gap (s),
    # four floats each: whether requests waited for a place in the batch (steps.waited_requests)
    spans: array[float] = field(default_factory=_floats)
    slices: RungSlices = field(default_factory=RungSlices)  # the interval's (llmload.analysis.interval)
    cached: array[float] = field(default_factory=_floats)  # completed, cache reported: cached tokens
    cached_of: array[float] = field(default_factory=_floats)  # and their prompt tokens
    # tools and structured output (completed requests that carried them): of them stopped before
    # max_tokens, and the answers checked against the schema (reply_valid) and found valid
    structured: int = 0
    structured_stopped: int = 0
    replies_checked: int = 0
    replies_valid: int = 0
    # the rung's window (llmload.analysis.run.window): every request's start and end, the
    # completed requests' tokens by arrival time; per request, in the order added: completed,
    # met the SLOs, prompt tokens (completed, reported; else 0); for each per-request value of
    # `values` (and `rates`: "rate") the index of its request, so the window's requests are chosen
    events: WindowEvents = field(default_factory=lambda: WindowEvents(0, 0))
    timeline: TokenTimeline = field(default_factory=TokenTimeline)
    ok: array[int] = field(default_factory=lambda: array("b"))
    met: array[int] = field(default_factory=lambda: array("b"))
    prompts: array[float] = field(default_factory=_floats)
    owners: dict[str, array[int]] = field(default_factory=dict)
    _window: RungWindow | None = None  # the window, until the next record

    def __post_init__(self) -> None:
        for name in (*LATENCY_NAMES, *SCHEDULED_NAMES):
            self.values.setdefault(name, _floats())
        for name in (*LATENCY_NAMES, *SCHEDULED_NAMES, "rate"):
            self.owners.setdefault(name, _indices())
        self.events.rung, self.events.users = self.index, self.users

    def _keep(self, name: str, value: float, index: int) -> None:
        """A per-request value of the request `index` (`values`, or `rates`: "rate")."""
        (self.rates if name == "rate" else self.values[name]).append(value)
        self.owners[name].append(index)

    def add(
        self, rec: RequestRecord, data: Mapping[str, Any] | None = None, micros: bytes | None = None
    ) -> None:
        """Tally one measured record; `data`: the JSON object it was read from, when there is one;
        `micros`: its chunk times as int32 microseconds, when they come from the records file's
        chunk index (then `rec.chunk_times` is empty and it has no `chunk_tokens`)."""
        index = self.requests
        self.requests += 1
        self.events.add(rec)
        self._window = None
        t_start, t_end = rec.t_start, rec.t_end
        if t_start < self.first_start:
            self.first_start = t_start
        if t_end > self.last_end:
            self.last_end = t_end
        e2e = t_end - t_start  # rec.e2e_s
        self.e2e.append(e2e)
        if rec.turn is not None:
            self.sessions = True
        if self.rate is None:
            self.rate = rec.rate
        if rec.conn_reused is not None:
            self.new_connections = (self.new_connections or 0) + (not rec.conn_reused)
        if rec.read_delay_ms is not None:
            self.read_delays_ms.append(rec.read_delay_ms)
        values = self.values
        if (wait := queue_wait_ms(rec)) is not None:
            self._keep("queue_wait", wait, index)
            if rec.trace_line is not None:
                self.trace_late_ms.append(wait)
        if (connect := connect_ms(rec)) is not None:
            self._keep("connect", connect, index)
        if (tls := tls_ms(rec)) is not None:
            self._keep("tls", tls, index)
        completed = rec.outcome == OUTCOME_OK
        self.ok.append(completed)
        self.prompts.append(rec.prompt_tokens or 0 if completed else 0)
        self.met.append(completed and (not self.slo or meets_slo(rec, self.slo)))
        if data is None:
            self.counts.add_record(rec)
        else:
            self.counts.add(data)
        if rec.odd_stream:
            self.odd.update(set(rec.odd_stream.split()))
        if rec.outcome != OUTCOME_OK:
            self.failures[rec.outcome] += 1
            self.partial_tokens += rec.output_tokens
            return
        self.tokens += rec.output_tokens
        self.timeline.add(rec, micros)
        if rec.reasoning_tokens is not None or rec.t_first_reasoning is not None:
            self._add_reasoning(rec)
        if rec.tool_calls:
            self.tools.update(
                requests=1,
                calls=rec.tool_calls,
                parallel=rec.tool_calls > 1,
                invalid=rec.tool_calls_invalid or 0,
            )
        if rec.structured:
            self._add_structured(rec)
        if rec.tokens_estimated:
            self.estimated = True
        if rec.prompt_tokens is None:
            self.prompt_known = False
        else:
            self.prompt_tokens += rec.prompt_tokens
            if rec.cached_tokens is not None:
                self.cached.append(rec.cached_tokens)
                self.cached_of.append(rec.prompt_tokens)
        if e2e > 0:
            self._keep("rate", rec.output_tokens / e2e, index)
        found = {}
        for name, fn in _COMPLETED_VALUES.items():
            if (v := fn(rec)) is not None:
                self._keep(name, v, index)
            found[name] = v is not None
        if (ttft := values["ttft"]) and found["ttft"]:  # TTFT without its connection's own setup
            own = rec.handshake_ms if rec.handshake_ms is not None else connect
            self.ttft_warm_ms.append(ttft[-1] - (own or 0.0) - (tls or 0.0))
        self.uncertainty.add(rec, found["ttft"], found["tpot"])
        first, last, chunks = chunk_span(rec, micros)
        ttft_now = values["ttft"][-1] if found["ttft"] else None
        self.slices.add(t_start + first, ttft_now, e2e)
        if rec.stream and chunks >= 2:  # a completed stream's send, first and last chunk, mean gap
            self.spans.extend((t_start, t_start + first, t_start + last, (last - first) / (chunks - 1)))
        if self.itl:
            if micros is not None:
                self.itl_us.add_micros(micros)
            elif rec.chunk_tokens is not None and len(rec.chunk_tokens) == len(rec.chunk_times):
                self.itl_token_ms.update(itl_ms(rec))
            else:
                self.itl_us.add(rec.chunk_times)
        if not self.itl_per_chunk:
            self.itl_per_chunk = itl_is_per_chunk(rec)
        self.good += self.met[-1]  # no SLO: every request is good

    def _add_reasoning(self, rec: RequestRecord) -> None:
        """A completed request that says anything of reasoning (its count may be 0)."""
        self.reasoning_tokens += rec.reasoning_tokens or 0
        if reasoned(rec):
            self.reasoning_requests += 1
            self.reasoning_counted += rec.reasoning_counted
            self.unanswered += unanswered(rec)

    def tool_summary(self) -> dict[str, Any] | None:
        """The rung's replies with tool calls (definitions: docs/metrics.md): `requests` (completed
        requests whose reply made a tool call), `calls`, `parallel` (replies of several calls),
        `invalid` (calls whose arguments are not a JSON object) and `valid_share` (1 - invalid /
        calls); None when no reply made one."""
        if not self.tools["requests"]:
            return None
        t = self.tools
        return {
            "requests": t["requests"],
            "calls": t["calls"],
            "parallel": t["parallel"],
            "invalid": t["invalid"],
            "valid_share": (t["calls"] - t["invalid"]) / t["calls"],
        }

    def _add_structured(self, rec: RequestRecord) -> None:
        """A completed request that carried tools or a response_format."""
        self.structured += 1
        self.structured_stopped += rec.finish_reason != "length" and rec.output_tokens < rec.max_tokens
        if rec.reply_valid is not None:
            self.replies_checked += 1
            self.replies_valid += rec.reply_valid

    def structured_summary(self) -> dict[str, Any] | None:
        """Tools and structured output (definitions: docs/agent-traffic.md), None when no completed
        request carried them: `requests`, of them `stopped` before max_tokens (their replies end
        on their own) and its `stopped_share`; `checked` answers (response_format), of them
        `valid` (parsed and fit the schema) and `valid_share` (None when none was checked)."""
        if not self.structured:
            return None
        checked = self.replies_checked
        return {
            "requests": self.structured,
            "stopped": self.structured_stopped,
            "stopped_share": self.structured_stopped / self.structured,
            "checked": checked,
            "valid": self.replies_valid,
            "valid_share": self.replies_valid / checked if checked else None,
        }

    def scheduled_summary(self) -> dict[str, Any] | None:
        """Rate mode's latencies from the intended time (definitions: `metrics`), None without a
        scheduled arrival: the p50 and p99 of TTFT and E2EL from it and of `queue_wait`, the
        requests that `waited` (sent more than WAITED_MS late) and their share of the window's."""
        waits = self.kept("queue_wait")
        if not waits.size:
            return None
        out: dict[str, Any] = {}
        for name, values in (("ttft", "ttft_sched"), ("e2el", "e2el_sched"), ("queue_wait", "queue_wait")):
            found = percentiles_of_array(kept, (50.0, 99.0)) if (kept := self.kept(values)).size else {}
            out |= {f"{name}_p50_ms": found.get(50.0), f"{name}_p99_ms": found.get(99.0)}
        waited = int((waits > WAITED_MS).sum())
        return out | {"waited": waited, "waited_share": waited / waits.size}

    def reasoning_summary(self) -> dict[str, Any] | None:
        """A reasoning model's figures of the rung (definitions: docs/reasoning.md), None when no
        completed request reasoned and no stream was odd: `tokens` (reasoning tokens, the
        server's count or the client's), `share` (of the output tokens), `requests` that
        reasoned, of them `counted` by the client and `unanswered`, the p50 of `ttfo_ms` and
        `think_ms`, and `odd` (requests per odd stream event, failed ones too)."""
        if not self.reasoning_requests and not self.odd:
            return None
        ttfo, think = (self.kept(name) for name in ("ttfo", "think"))
        return {
            "tokens": self.reasoning_tokens,
            "share": self.reasoning_tokens / self.tokens if self.tokens else None,
            "requests": self.reasoning_requests,
            "counted": self.reasoning_counted,
            "unanswered": self.unanswered,
            "ttfo_p50_ms": _median(ttfo),
            "think_p50_ms": _median(think),
            "odd": dict(sorted(self.odd.items())),
        }

    def waited(self) -> tuple[int, int] | None:
        """(requests that waited for a place in the batch, most decoding at once), or None
        without streams to tell (`llmload.analysis.run.steps.waited_requests`)."""
        if not self.spans:
            return None
        s = self.spans
        return waited_requests(s[0::4], s[1::4], s[2::4], s[3::4], self.users)

    @property
    def completed(self) -> int:
        return self.counts.completed

    @property
    def ttfts_ms(self) -> Sequence[float]:
        return self.values["ttft"]

    @property
    def tpots_ms(self) -> Sequence[float]:
        return self.values["tpot"]

    @property
    def e2e_s(self) -> float:
        """E2E seconds of every measured request, summed in order (achieved concurrency)."""
        return reduce(add, self.e2e, 0.0)

    @property
    def window(self) -> RungWindow:
        """The rung's one window (llmload.analysis.run.window)."""
        if self._window is None:  # a timeline that cannot hold the rung: its whole span
            self._window = self.events.window(held=not self.timeline.overflowed)
        return self._window

    @property
    def wall_s(self) -> float:
        return self.window.seconds

    def per_second(self, amount: float) -> float:
        """`amount` divided by the rung's wall time (0 for a zero-length rung)."""
        wall = self.wall_s
        return amount / wall if wall > 0 else 0.0

    def completed_tokens_per_s(self, seconds: float) -> float:
        return self.tokens / seconds if seconds > 0 else 0.0

    @property
    def steady(self) -> bool:
        """The window is the rung's steady part (not its requests' whole span)."""
        return self.window.rule == STEADY

    def window_tokens(self) -> tuple[float, float, float]:
        """The completed requests' output tokens that arrived before the window (the ramp), in
        it and after it (the drain); a whole-span window holds every one."""
        w = self.window
        if not self.steady or w.ramp_s == w.drain_s == 0.0:  # the whole span: every token, exactly
            return 0.0, float(self.tokens), 0.0
        return self.timeline.split(w.start, w.end)

    def _overlapping(self) -> np.ndarray:
        """Per request: it overlaps the window (in flight when it opened, or started in it)."""
        starts = np.frombuffer(self.events.starts, dtype=np.float64)
        if not self.steady:
            return np.ones(starts.size, dtype=bool)
        ends = np.frombuffer(self.events.ends, dtype=np.float64)
        w = self.window
        return (starts < w.end) & (ends > w.start)

    def _ended_inside(self) -> np.ndarray:
        """Per request: it ended inside the window (the window's request rates)."""
        ends = np.frombuffer(self.events.ends, dtype=np.float64)
        if not self.steady:
            return np.ones(ends.size, dtype=bool)
        return (ends >= self.window.start) & (ends <= self.window.end)

    def kept(self, name: str) -> np.ndarray:
        """The per-request values `name` (of `values`, or "rate") of the window's requests, in order."""
        return self._of_window(self.rates if name == "rate" else self.values[name], name)

    def _of_window(self, values: array[float], owned_as: str) -> np.ndarray:
        """Those of per-request `values` whose requests (`owners[owned_as]`) overlap the window."""
        kept = np.frombuffer(values, dtype=np.float64).copy()  # no view: the array may grow
        chosen: np.ndarray = kept[self._owned_mask(owned_as)]
        return chosen

    def _owned_mask(self, owned_as: str) -> np.ndarray:
        """Per value of `owners[owned_as]`: its request overlaps the window."""
        mask: np.ndarray = self._overlapping()[np.frombuffer(self.owners[owned_as], dtype=np.int64)]
        return mask

    def in_flight_s(self) -> float:
        """The requests' seconds in flight inside the window, summed (achieved concurrency)."""
        if not self.steady:
            return self.e2e_s
        w = self.window
        starts = np.maximum(np.frombuffer(self.events.starts, dtype=np.float64), w.start)
        ends = np.minimum(np.frombuffer(self.events.ends, dtype=np.float64), w.end)
        return math.fsum(np.maximum(ends - starts, 0.0).tolist())

    def _window_counts(self) -> tuple[int, int, float]:
        """The completed requests that ended inside the window, of them those that met the
        SLOs, and their prompt tokens."""
        inside = self._ended_inside()
        ok = np.frombuffer(self.ok, dtype=np.int8).astype(bool) & inside
        met = np.frombuffer(self.met, dtype=np.int8).astype(bool) & inside
        prompt = math.fsum(np.frombuffer(self.prompts, dtype=np.float64)[ok].tolist())
        return int(ok.sum()), int(met.sum()), prompt

    def window_summary(self) -> dict[str, Any]:
        """The json row's `window`: its edges, rule, ramp and drain seconds, and the output
        tokens before it, in it and after it."""
        ramp, inside, drain = self.window_tokens()
        return self.window.as_dict() | {"tokens": inside, "ramp_tokens": ramp, "drain_tokens": drain}

    def row(self, *, partial: bool = False) -> SweepRow:
        """The sweep-table row (definitions: `llmload.analysis.run.sweep_rows`)."""
        waited = self.waited()
        return SweepRow(
            rung=self.index,
            conc=self.users,
            agg_tok_s=self.per_second(self.window_tokens()[1]),
            per_req_tok_s=mean(rates.tolist()) if (rates := self.kept("rate")).size else None,
            tokens=self.tokens,
            wall_s=self.wall_s,
            window=self.window_summary(),
            interval=interval_dict(self.slices.intervals(self.window.start, self.window.end, self.timeline)),
            ttft_p50_ms=_median(self.kept("ttft")),
            requests=self.requests,
            failures=sum(self.failures.values()),
            failures_by_kind=dict(sorted(self.failures.items())),
            partial_tokens=self.partial_tokens,
            estimated=self.estimated,
            partial=partial,
            input_tokens=self.counts.inputs.summary(),
            output_tokens=self.counts.outputs.summary(counted_by=True),
            new_connections=self.new_connections,
            connect_ttft_ms=self._connect_ttft_ms(),
            timing_uncertainty=self.uncertainty.summary(),
            rate=self.rate,
            reasoning=self.reasoning_summary(),
            structured=self.structured_summary(),
            tool_calls=self.tool_summary(),
            scheduled=self.scheduled_summary(),
            waited=None if waited is None else waited[0],
            decoding_max=None if waited is None else waited[1],
            chunks_lower_bound=self.itl_per_chunk,
        )

    def _connect_ttft_ms(self) -> float | None:
        """How much the connections opened in the rung raise its TTFT p50: the p50 less the p50 of
        TTFT without their own setup (the kernel's handshake round trip, else the connect's wall
        time, plus TLS); None when no request opened one. The connect's wall time also holds the
        turns of users that started at once, which a pooled connection would not have saved."""
        ttft = self.kept("ttft")
        if not self.new_connections or not ttft.size:
            return None
        warm = self._of_window(self.ttft_warm_ms, "ttft")  # one per TTFT
        return cast("float", _median(ttft)) - cast("float", _median(warm))

    def merge(self, other: RungTally) -> None:
        """Add the tally of the same rung's requests that follow ours in the records file (the
        second part of a file read in two): every figure comes out as if one tally had read both
        parts in order (values concatenated, counts and histograms added)."""
        for name, owners in other.owners.items():
            self.owners[name].extend((np.frombuffer(owners, dtype=np.int64) + self.requests).tolist())
        self.events.merge(other.events)
        self.timeline.merge(other.timeline)
        self.ok.extend(other.ok)
        self.met.extend(other.met)
        self.prompts.extend(other.prompts)
        self._window = None
        self.requests += other.requests
        self.tokens += other.tokens
        self.partial_tokens += other.partial_tokens
        self.estimated = self.estimated or other.estimated
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)
        self.failures.update(other.failures)
        self.slices.merge(other.slices)
        for mine, theirs in (
            (self.rates, other.rates),
            (self.e2e, other.e2e),
            (self.read_delays_ms, other.read_delays_ms),
            (self.ttft_warm_ms, other.ttft_warm_ms),
            (self.trace_late_ms, other.trace_late_ms),
            (self.spans, other.spans),
            (self.cached, other.cached),
            (self.cached_of, other.cached_of),
            *((self.values[name], other.values[name]) for name in (*LATENCY_NAMES, *SCHEDULED_NAMES)),
        ):
            mine.extend(theirs)
        self.itl_us.merge(other.itl_us)
        self.uncertainty.merge(other.uncertainty)
        self.itl_token_ms.update(other.itl_token_ms)
        self.itl_per_chunk = self.itl_per_chunk or other.itl_per_chunk
        self.counts.merge(other.counts)
        self.prompt_tokens += other.prompt_tokens
        self.prompt_known = self.prompt_known and other.prompt_known
        self.good += other.good
        self.rate = other.rate if self.rate is None else self.rate
        if other.new_connections is not None:
            self.new_connections = (self.new_connections or 0) + other.new_connections
        self.sessions = self.sessions or other.sessions
        self.reasoning_tokens += other.reasoning_tokens
        self.reasoning_requests += other.reasoning_requests
        self.reasoning_counted += other.reasoning_counted
        self.unanswered += other.unanswered
        self.odd.update(other.odd)
        self.tools.update(other.tools)
        self.structured += other.structured
        self.structured_stopped += other.structured_stopped
        self.replies_checked += other.replies_checked
        self.replies_valid += other.replies_valid

    def cache(self, shared: SharedPrefix | None = None) -> dict[str, Any] | None:
        """The prefix cache's share of the rung's prompts, from the requests whose usage said
        (`cached_tokens`: `usage.prompt_tokens_details.cached_tokens` or llama.cpp's `cache_n`):
        requests, cached and prompt tokens, share = cached / prompt tokens; with the run's
        `shared` prefix bound, `over_shared`: requests served more than any prompt of the run
        shares with another (`SharedPrefix`), None without a bound. None when no request said."""
        if not self.cached:
            return None
        cached, prompt = math.fsum(self.cached), math.fsum(self.cached_of)
        over = None
        if shared is not None:
            over = sum(c > shared.bound(p) for c, p in zip(self.cached, self.cached_of, strict=True))
        return {
            "requests": len(self.cached),
            "cached_tokens": int(cached),
            "prompt_tokens": int(prompt),
            "share": cached / prompt if prompt else 0.0,
            "over_shared": over,
            "shared_tokens_max": None if shared is None else shared.describe(),
        }

    def itl_counts(self) -> Counter[float]:
        """The pooled ITL values (ms) -> how many (`metrics.itl_ms`)."""
        if not self.itl and self.completed:
            raise ValueError("this tally was built without the ITL (itl=False)")
        counts = Counter({gap / 1000.0: n for gap, n in self.itl_us.counts().items()})
        counts.update(self.itl_token_ms)
        return counts

    def metrics(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> RungMetrics:
        """Latency summaries, rates, goodput and token reconciliation (`llmload.analysis.run.metrics`)."""
        latencies = {
            name: summarize_counts(self.itl_counts(), percentiles)
            if name == "itl"
            else summarize_array(self.kept(name), percentiles)
            for name in LATENCY_NAMES
        }
        completed, good, prompt = self._window_counts()
        tokens = self.window_tokens()[1]
        return RungMetrics(
            rung=self.index,
            conc=self.users,
            completed=self.completed,
            latencies=latencies,
            itl_per_chunk=self.itl_per_chunk,
            output_tok_s=self.per_second(tokens),
            total_tok_s=self.per_second(prompt + tokens) if self.prompt_known else None,
            request_s=self.per_second(completed),
            achieved_concurrency=self.per_second(self.in_flight_s()),
            slo=dict(self.slo),
            good_requests=self.good,
            goodput_request_s=self.per_second(good),
            stopped_early=self.counts.stopped_early,
            chunks_over_tokens=self.counts.kinds.get("chunks_over_tokens", 0),
            disagree=self.counts.disagree,
            rate=self.rate,
            input_tokens=summarize_counts(cast("Mapping[float, int]", self.counts.inputs.sent), percentiles),
            wall_s=self.wall_s,
            reasoning=self.reasoning_summary(),
            tool_calls=self.tool_summary(),
        )


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """How many prompt tokens a request of the run may share with another (so a prefix cache may
    serve them in a run that repeats no prompt): `tokens` of every prompt (synthetic prompts: the
    calibrated overhead, BOS and chat template, plus the shared prefix's words), or all but the
    `distinct_words` of a tagged `prompt` (each word is at least one token)."""

    tokens: int | None = None
    distinct_words: int | None = None

    def bound(self, prompt_tokens: float) -> float:
        if self.tokens is not None:
            return self.tokens
        return prompt_tokens - (self.distinct_words or 0)

    def describe(self) -> str:
        if self.tokens is not None:
            return str(self.tokens)
        return f"prompt_tokens - {self.distinct_words}"

    @classmethod
    def of(cls, prompts: Mapping[str, Any] | None) -> SharedPrefix | None:
        """From a run file's `prompts` (None: the run repeats prompts on purpose, or is older)."""
        if prompts is None:
            return None
        tokens, words = prompts.get("shared_tokens"), prompts.get("distinct_words")
        if type(tokens) is int:
            return cls(tokens=tokens)
        return cls(distinct_words=words) if type(words) is int else None


SAFE_MAGNITUDE = 1e300  # no sum of a million such values overflows a float


def summarize_array(values: np.ndarray, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> Summary | None:
    """`llmload.core.stats.summarize` of a numpy array (floats, or ints under 2**63): the same
    figures, bit for bit, without a sort or a Python loop. The percentiles read the ranks they
    interpolate between from one `np.partition` (the same values a sort puts there); the mean is
    `math.fsum` of the same values; the std sums, with `math.fsum`, the same squared deviations
    (numpy subtracts as Python does; the squares are Python's `**`, libm's pow, as `summarize`
    takes them). 250,000 values: ~25 ms, against ~150 ms for `summarize`."""
    n = values.size
    if not n:
        return None
    if values.dtype.kind == "f" and not (np.abs(values) <= SAFE_MAGNITUDE).all():
        # fsum's answer to inf, nan and values whose sum can overflow depends on the order it
        # meets them in (an inf before two huge values: inf; after them: OverflowError); only
        # hand-made files hold such times, so they take summarize's own path on the sorted
        # values it was given
        return summarize(np.sort(values).tolist(), percentiles)
    m = math.fsum(values.tolist()) / n
    std = math.sqrt(math.fsum(map(pow, _minus(values, m).tolist(), repeat(2))) / n)
    pct = percentiles_of_array(values, (50.0, *percentiles))
    return Summary(count=n, mean=m, median=pct[50.0], std=std, percentiles={q: pct[q] for q in percentiles})


def chunk_span(rec: RequestRecord, micros: bytes | None) -> tuple[float, float, int]:
    """A completed request's first and last chunk (s after its start) and its chunks, from the
    records file's index (`micros`) or its own times; no chunk: both its end, 0."""
    if micros is not None and len(micros) >= 4:
        first = int.from_bytes(micros[:4], "little", signed=True) / 1e6
        return first, last_micros(micros) / 1e6, len(micros) // 4
    times = rec.chunk_times
    if times:
        return times[0], times[-1], len(times)
    return rec.e2e_s, rec.e2e_s, 0


def _minus(values: np.ndarray, m: float) -> np.ndarray:
    """values - m, as Python subtracts (inf or nan without a warning, like a float's `-`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values - m


def _median(values: np.ndarray) -> float | None:
    """The median of the values (`percentile` of them, 50), None for no values."""
    return percentiles_of_array(values, (50.0,))[50.0] if values.size else None


def percentile_or_none(values: Sequence[float], q: float) -> float | None:
    """`llmload.core.stats.percentile`, None for no values."""
    return percentile(values, q) if values else None


def tally_records(
    index: int, users: int, records: Iterable[RequestRecord], slo: Mapping[str, float] | None = None
) -> RungTally:
    """A rung's tally from its records."""
    tally = RungTally(index, users, dict(slo or {}))
    for rec in records:
        tally.add(rec)
    return tally


def tally_rungs(records: Iterable[RequestRecord], slo: Mapping[str, float] | None = None) -> list[RungTally]:
    """The measured records as rung tallies, in ladder order (other phases dropped)."""
    rungs: dict[int, RungTally] = {}
    for rec in records:
        if rec.phase != MEASURE_PHASE:
            continue
        if rec.rung not in rungs:
            rungs[rec.rung] = RungTally(rec.rung, rec.users, dict(slo or {}))
        rungs[rec.rung].add(rec)
    return [rungs[i] for i in sorted(rungs)]


def sweep_rows(
    rungs: Iterable[RungTally],
    *,
    partial_rungs: Collection[int] = (),
    requests_per_user: int | None = None,
) -> list[SweepRow]:
    """Rows of the sweep table. A rung is flagged partial when its index is in `partial_rungs`,
    or, when `requests_per_user` is given, when it has fewer than users * requests_per_user
    measured requests."""
    rows = []
    for rung in rungs:
        short = requests_per_user is not None and rung.requests < rung.users * requests_per_user
        rows.append(rung.row(partial=rung.index in partial_rungs or short))
    return rows


class SweepTally:
    """The rungs of one run as tallies, fed with records as plain dicts (as the ladder receives
    them and as the records file holds them); the other phases' requests are only counted."""

    def __init__(self, slo: Mapping[str, float] | None = None, *, itl: bool = False) -> None:
        self.rungs: dict[int, RungTally] = {}
        self.warmup_requests = 0
        self.probe_requests = 0  # the greedy-determinism check's probes
        self.warmup_tokens = 0  # output tokens the warm-up's requests received (server cross-check)
        self.warmup_span = (0, math.inf, -math.inf)  # the warm-up's users, first start and last end
        self.slo = dict(slo or {})
        self.itl = itl  # tally the ITL too (the latency metrics need it; the sweep rows do not)

    def add(
        self, data: dict[str, Any], rec: RequestRecord | None = None, micros: bytes | None = None
    ) -> RungTally | None:
        """Tally one record (`rec`: the same record, when the caller has already built it;
        `micros`: `RungTally.add`); returns its rung's tally, None for a request of another phase."""
        if data["phase"] != MEASURE_PHASE:
            self._other(
                data["phase"],
                data.get("output_tokens"),
                (data.get("users"), data.get("t_start"), data.get("t_end")),
            )
            return None
        rec = RequestRecord.from_dict(data) if rec is None else rec
        tally = self.rungs.get(rec.rung)
        if tally is None:
            tally = self.rungs[rec.rung] = RungTally(rec.rung, rec.users, self.slo, itl=self.itl)
        tally.add(rec, data, micros)
        return tally

    def add_record(self, rec: RequestRecord) -> RungTally | None:
        """`add` of a record without its dict (as the ladder receives them)."""
        if rec.phase != MEASURE_PHASE:
            self._other(rec.phase, rec.output_tokens, (rec.users, rec.t_start, rec.t_end))
            return None
        tally = self.rungs.get(rec.rung)
        if tally is None:
            tally = self.rungs[rec.rung] = RungTally(rec.rung, rec.users, self.slo, itl=self.itl)
        tally.add(rec)
        return tally

    def _other(self, phase: str, output_tokens: Any, span: tuple[Any, Any, Any]) -> None:
        """Count a request of a phase that makes no rung's figures; `span`: its (users, t_start,
        t_end), the warm-up's window."""
        if phase == WARMUP_PHASE:
            self.warmup_requests += 1
            self.warmup_tokens += output_tokens if type(output_tokens) is int else 0
            if all(isinstance(v, int | float) for v in span):
                self._warm(span)
        elif phase == DETERMINISM_PHASE:
            self.probe_requests += 1

    def _warm(self, span: tuple[Any, Any, Any]) -> None:
        users, start, end = self.warmup_span
        self.warmup_span = (max(users, int(span[0])), min(start, float(span[1])), max(end, float(span[2])))

    def windows(self) -> list[RungWindow]:
        """The warm-up's window (when it had requests) and each measured rung's, in ladder order."""
        users, start, end = self.warmup_span
        warmup = [span_window(WARMUP_RUNG, users, start, end)] if start <= end else []
        return warmup + [self.rungs[i].window for i in sorted(self.rungs)]

    def merge(self, other: SweepTally) -> None:
        """Add the tallies of the records that follow ours in the file (`RungTally.merge`)."""
        self.warmup_requests += other.warmup_requests
        self.warmup_tokens += other.warmup_tokens
        self._warm(other.warmup_span)
        self.probe_requests += other.probe_requests
        for index, theirs in other.rungs.items():
            if index in self.rungs:
                self.rungs[index].merge(theirs)
            else:
                self.rungs[index] = theirs
