"""One rung's figures as running tallies, fed one record at a time: the one implementation of the
sweep row (`row()`) and of the latency metrics (`metrics()`).

A `RungTally` keeps running sums (requests, tokens, first start, last end, failures by kind, token
reconciliation counts, goodput), the per-request values a mean or a percentile needs as 8-byte
floats (`array('d')`: TTFT, TPOT, E2EL, per-request tok/s, ...) and the pooled per-chunk values
(ITL) as a histogram: value -> count. The records themselves are not kept, so a rung of a million
requests of 256 chunks costs tens of MB, not gigabytes (the ITL histogram grows with the distinct
gaps, which are microsecond multiples: chunk times are recorded to the microsecond). The
definitions are those of `llmload.analysis.sweep_rows` and `llmload.analysis.metrics` (their
per-request functions are used here) and the statistics those of `llmload.core.stats`.

Readers: the post-processor (`llmload.analysis.postprocess.load_run`, one pass over the records
file), `sweep_rows.sweep_row` and `metrics.rung_metrics` (a `Rung` of records fed to a tally),
the web UI's Tokens tab and charts (`llmload.loadgen.live_sweep`) and the terminal progress line
(`llmload.cli.progress`). A tally costs milliseconds per poll of the web page.
"""

from __future__ import annotations

import contextlib
import math
import struct
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import repeat
from operator import add
from typing import Any

import numpy as np

from llmload.analysis.metrics import (
    LATENCY_NAMES,
    RungMetrics,
    connect_ms,
    e2el_ms,
    gaps_us,
    itl_is_per_chunk,
    itl_ms,
    meets_slo,
    queue_wait_ms,
    tls_ms,
    tpot_ms,
    ttft_content_ms,
    ttft_ms,
)
from llmload.analysis.reconcile import Tally, input_summary
from llmload.analysis.sweep_rows import WARMUP_PHASE, SweepRow
from llmload.core.records import RequestRecord
from llmload.core.stats import (
    DEFAULT_PERCENTILES,
    Summary,
    mean,
    percentile,
    percentile_of_ranks,
    percentile_ranks,
    summarize,
    summarize_counts,
)

# per-request latencies (ms) of completed requests, and of every measured request
_COMPLETED_VALUES = {"ttft": ttft_ms, "ttft_content": ttft_content_ms, "tpot": tpot_ms, "e2el": e2el_ms}
_ALL_VALUES = {"queue_wait": queue_wait_ms, "connect": connect_ms, "tls": tls_ms}


def _floats() -> array[float]:
    return array("d")


class GapHistogram:
    """Per-chunk ITL gaps in whole microseconds -> how many, fed one request's chunk times at a
    time. The arithmetic of `metrics.itl_gaps_us` (times * 1e6 rounded half to even, successive
    differences) is done by numpy on batches of about a quarter million chunk times; gaps under
    `DENSE_US` are counted in a dense array (2 MB; a batch without a longer or negative gap is
    counted by one `np.bincount`), longer ones in a dict. Each request's times
    are packed into C doubles as they come (`struct`: 3x faster than numpy's conversion of a list;
    and the float objects are freed at once: holding a batch of them made the decoding of 1M
    records twice as slow)."""

    BATCH = 1 << 18  # chunk times per batch
    DENSE_US = 1 << 18  # gaps under ~262 ms: dense counts
    INT64_S = 9e12  # times (s) whose microseconds fit in int64: numpy's arithmetic; beyond, Python's

    def __init__(self) -> None:
        self._times: list[bytes] = []  # each request's chunk times (s), as C doubles
        self._ends: list[int] = []  # where each request's chunk times end in the batch
        self._count = 0  # chunk times in the batch
        self._dense: np.ndarray | None = None
        self._sparse: Counter[int] = Counter()

    def add(self, chunk_times: list[float]) -> None:
        self._times.append(struct.pack(f"{len(chunk_times)}d", *chunk_times))
        self._count += len(chunk_times)
        self._ends.append(self._count)
        if self._count >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._times:
            return
        seconds = np.frombuffer(b"".join(self._times), dtype=np.float64)
        if not (np.abs(seconds) < self.INT64_S).all():  # a hand-made file's huge times: Python's ints
            self._count_exactly(seconds.tolist())
            return
        gaps = np.diff(np.rint(seconds * 1e6).astype(np.int64))
        between = np.asarray(self._ends[:-1], dtype=np.int64) - 1  # last of one request -> first of next
        between = np.unique(between[(between >= 0) & (between < gaps.size)])  # requests without times
        self._times.clear()
        self._ends.clear()
        self._count = 0
        if not gaps.size:
            return
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

    def _count_exactly(self, seconds: list[float]) -> None:
        """Count the batch's gaps request by request on Python's ints (`metrics.gaps_us`: times
        beyond int64 microseconds), into the dict."""
        start = 0
        for end in self._ends:
            with contextlib.suppress(OverflowError):  # times of 1.8e302 s and more: no µs, no gap
                self._sparse.update(gaps_us(seconds[start:end]))
            start = end
        self._times.clear()
        self._ends.clear()
        self._count = 0

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
    trace_late_ms: array[float] = field(default_factory=_floats)  # trace replay: lateness per request
    inputs_asked: int | None = None  # the asked prompt_tokens, from the first record that says it
    new_connections: int | None = None  # None until a record says whether it reused a connection
    sessions: bool = False  # a record carries a session turn
    checked: bool = False  # a record carries a greedy-determinism text hash

    def __post_init__(self) -> None:
        for name in LATENCY_NAMES:
            self.values.setdefault(name, _floats())

    def add(self, rec: RequestRecord, data: Mapping[str, Any] | None = None) -> None:
        """Tally one measured record; `data`: the JSON object it was read from, when there is one."""
        self.requests += 1
        self.first_start = min(self.first_start, rec.t_start)
        self.last_end = max(self.last_end, rec.t_end)
        self.e2e.append(rec.e2e_s)
        self.inputs_asked = self.inputs_asked or rec.prompt_tokens_asked
        self.sessions = self.sessions or rec.turn is not None
        self.checked = self.checked or rec.text_hash is not None
        if self.rate is None:
            self.rate = rec.rate
        if rec.conn_reused is not None:
            self.new_connections = (self.new_connections or 0) + (not rec.conn_reused)
        if rec.read_delay_ms is not None:
            self.read_delays_ms.append(rec.read_delay_ms)
        for name, fn in _ALL_VALUES.items():
            if (v := fn(rec)) is not None:
                self.values[name].append(v)
                if name == "queue_wait" and rec.trace_line is not None:
                    self.trace_late_ms.append(v)
        self.counts.add(rec.to_dict() if data is None else data)
        if not rec.ok:
            self.failures[rec.outcome] += 1
            self.partial_tokens += rec.output_tokens
            return
        self.tokens += rec.output_tokens
        self.estimated = self.estimated or rec.tokens_estimated
        self.prompt_known = self.prompt_known and rec.prompt_tokens is not None
        self.prompt_tokens += rec.prompt_tokens or 0
        if rec.e2e_s > 0:
            self.rates.append(rec.output_tokens / rec.e2e_s)
        for name, fn in _COMPLETED_VALUES.items():
            if (v := fn(rec)) is not None:
                self.values[name].append(v)
        if self.itl:
            if rec.chunk_tokens is not None and len(rec.chunk_tokens) == len(rec.chunk_times):
                self.itl_token_ms.update(itl_ms(rec))
            else:
                self.itl_us.add(rec.chunk_times)
        self.itl_per_chunk = self.itl_per_chunk or itl_is_per_chunk(rec)
        self.good += not self.slo or meets_slo(rec, self.slo)  # no SLO: every request is good

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
    def wall_s(self) -> float:
        return self.last_end - self.first_start

    def per_second(self, amount: float) -> float:
        """`amount` divided by the rung's wall time (0 for a zero-length rung)."""
        wall = self.wall_s
        return amount / wall if wall > 0 else 0.0

    def completed_tokens_per_s(self, seconds: float) -> float:
        return self.tokens / seconds if seconds > 0 else 0.0

    def row(self, *, partial: bool = False) -> SweepRow:
        """The sweep-table row (definitions: `llmload.analysis.sweep_rows`)."""
        return SweepRow(
            rung=self.index,
            conc=self.users,
            agg_tok_s=self.completed_tokens_per_s(self.wall_s),
            per_req_tok_s=mean(self.rates) if self.rates else None,
            tokens=self.tokens,
            wall_s=self.wall_s,
            ttft_p50_ms=_median(self.values["ttft"]),
            requests=self.requests,
            failures=sum(self.failures.values()),
            failures_by_kind=dict(sorted(self.failures.items())),
            partial_tokens=self.partial_tokens,
            estimated=self.estimated,
            partial=partial,
            input_tokens=input_summary(self.counts.inputs, self.inputs_asked),
            new_connections=self.new_connections,
        )

    def merge(self, other: RungTally) -> None:
        """Add the tally of the same rung's requests that follow ours in the records file (the
        second part of a file read in two): every figure comes out as if one tally had read both
        parts in order (values concatenated, counts and histograms added)."""
        self.requests += other.requests
        self.tokens += other.tokens
        self.partial_tokens += other.partial_tokens
        self.estimated = self.estimated or other.estimated
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)
        self.failures.update(other.failures)
        for mine, theirs in (
            (self.rates, other.rates),
            (self.e2e, other.e2e),
            (self.read_delays_ms, other.read_delays_ms),
            (self.trace_late_ms, other.trace_late_ms),
            *((self.values[name], other.values[name]) for name in LATENCY_NAMES),
        ):
            mine.extend(theirs)
        self.itl_us.merge(other.itl_us)
        self.itl_token_ms.update(other.itl_token_ms)
        self.itl_per_chunk = self.itl_per_chunk or other.itl_per_chunk
        self.counts.merge(other.counts)
        self.prompt_tokens += other.prompt_tokens
        self.prompt_known = self.prompt_known and other.prompt_known
        self.good += other.good
        self.rate = other.rate if self.rate is None else self.rate
        self.inputs_asked = self.inputs_asked or other.inputs_asked
        if other.new_connections is not None:
            self.new_connections = (self.new_connections or 0) + other.new_connections
        self.sessions = self.sessions or other.sessions
        self.checked = self.checked or other.checked

    def itl_counts(self) -> Counter[float]:
        """The pooled ITL values (ms) -> how many (`metrics.itl_ms`)."""
        if not self.itl and self.completed:
            raise ValueError("this tally was built without the ITL (itl=False)")
        counts = Counter({gap / 1000.0: n for gap, n in self.itl_us.counts().items()})
        counts.update(self.itl_token_ms)
        return counts

    def metrics(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> RungMetrics:
        """Latency summaries, rates, goodput and token reconciliation (`llmload.analysis.metrics`)."""
        latencies = {
            name: summarize_counts(self.itl_counts(), percentiles)
            if name == "itl"
            else summarize_array(np.frombuffer(self.values[name], dtype=np.float64), percentiles)
            for name in LATENCY_NAMES
        }
        return RungMetrics(
            rung=self.index,
            conc=self.users,
            completed=self.completed,
            latencies=latencies,
            itl_per_chunk=self.itl_per_chunk,
            output_tok_s=self.per_second(self.tokens),
            total_tok_s=self.per_second(self.prompt_tokens + self.tokens) if self.prompt_known else None,
            request_s=self.per_second(self.completed),
            achieved_concurrency=self.per_second(self.e2e_s),
            slo=dict(self.slo),
            good_requests=self.good,
            goodput_request_s=self.per_second(self.good),
            stopped_early=self.counts.stopped_early,
            chunks_over_tokens=self.counts.kinds.get("chunks_over_tokens", 0),
            disagree=self.counts.disagree,
            rate=self.rate,
            input_tokens=_summarize_ints(self.counts.inputs, percentiles),
            wall_s=self.wall_s,
        )


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
    m = math.fsum(values.tolist()) / n  # in summarize's order: the same error first, if any
    std = math.sqrt(math.fsum(map(pow, _minus(values, m).tolist(), repeat(2))) / n)
    pct = _percentiles_of(values, (50.0, *percentiles))
    return Summary(count=n, mean=m, median=pct[50.0], std=std, percentiles={q: pct[q] for q in percentiles})


def _minus(values: np.ndarray, m: float) -> np.ndarray:
    """values - m, as Python subtracts (inf or nan without a warning, like a float's `-`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values - m


def _percentiles_of(values: np.ndarray, wanted: Sequence[float]) -> dict[float, float]:
    """The `wanted` percentiles of a non-empty array (`llmload.core.stats.percentile`), from one
    `np.partition` at the ranks they interpolate between."""
    n = values.size
    part = np.partition(values, sorted({r for q in wanted for r in percentile_ranks(n, q)}))
    return {q: percentile_of_ranks(n, q, lambda rank: part[rank].item()) for q in wanted}


def _summarize_ints(values: list[int], percentiles: Sequence[float]) -> Summary | None:
    """`summarize` of ints (by `summarize_array` when they fit in int64)."""
    try:
        packed = np.array(values, dtype=np.int64)
    except OverflowError:  # a huge count in a hand-made file
        return summarize(values, percentiles)
    return summarize_array(packed, percentiles)


def _median(values: array[float]) -> float | None:
    """The median of the values (`percentile` of them, 50), None for no values."""
    return _percentiles_of(np.frombuffer(values, dtype=np.float64), (50.0,))[50.0] if values else None


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
    """The measured records as rung tallies, in ladder order (`sweep_rows.group_rungs`, tallied)."""
    rungs: dict[int, RungTally] = {}
    for rec in records:
        if rec.phase == WARMUP_PHASE:
            continue
        if rec.rung not in rungs:
            rungs[rec.rung] = RungTally(rec.rung, rec.users, dict(slo or {}))
        rungs[rec.rung].add(rec)
    return [rungs[i] for i in sorted(rungs)]


class SweepTally:
    """The rungs of one run as tallies, fed with records as plain dicts (as the ladder receives
    them and as the records file holds them); warm-up requests are only counted."""

    def __init__(self, slo: Mapping[str, float] | None = None, *, itl: bool = False) -> None:
        self.rungs: dict[int, RungTally] = {}
        self.warmup_requests = 0
        self.slo = dict(slo or {})
        self.itl = itl  # tally the ITL too (the latency metrics need it; the sweep rows do not)

    def add(self, data: dict[str, Any], rec: RequestRecord | None = None) -> RungTally | None:
        """Tally one record (`rec`: the same record, when the caller has already built it);
        returns its rung's tally, None for a warm-up request."""
        if data["phase"] == WARMUP_PHASE:
            self.warmup_requests += 1
            return None
        rec = RequestRecord.from_dict(data) if rec is None else rec
        tally = self.rungs.get(rec.rung)
        if tally is None:
            tally = self.rungs[rec.rung] = RungTally(rec.rung, rec.users, self.slo, itl=self.itl)
        tally.add(rec, data)
        return tally

    def merge(self, other: SweepTally) -> None:
        """Add the tallies of the records that follow ours in the file (`RungTally.merge`)."""
        self.warmup_requests += other.warmup_requests
        for index, theirs in other.rungs.items():
            if index in self.rungs:
                self.rungs[index].merge(theirs)
            else:
                self.rungs[index] = theirs
