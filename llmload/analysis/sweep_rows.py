"""The sweep table: records grouped into rungs, and one row of throughput figures per rung.

A rung is identified by its index in the ladder (`RequestRecord.rung`), never by its concurrency:
a ladder may repeat a concurrency. Warm-up records (phase "warmup") are excluded from everything.

Definitions (per rung):
- wall_s: first t_start to last t_end over all the rung's measured requests, failed ones too.
- tokens: output tokens of completed (outcome "ok") requests.
- agg_tok_s: tokens / wall_s.
- per_req_tok_s: mean over completed requests of output_tokens / (t_end - t_start).
- ttft_p50_ms: median of t_first - t_start over completed requests (linear interpolation).
- partial_tokens: output tokens received by failed requests; never counted in tokens or rates.
- estimated: at least one completed request had no usage: its tokens are estimated (see
  `StreamAccumulator.output_tokens`: max_tokens on finish_reason "length", else its chunks).
- partial: the rung did not finish (given by the caller, or fewer requests than expected).
- input_tokens: usage.prompt_tokens of completed requests (mean, min, max, p50, p99), the asked
  lengths (one, or drawn: their mean, p50, p99) and the mean's miss in %
  (llmload.analysis.reconcile.input_summary).
- rate: rate mode, the rung's target request rate (the table shows it in place of `conc`).
- new_connections: requests that opened a connection (`conn_reused` false); with keep-alive one
  per user plus the reconnects; None when the records do not say (older runs).
- saturated / generator: the load generator's own health during the rung (llmload.analysis.health),
  filled in by post-processing when the run has a health file.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmload.core.records import RequestRecord

WARMUP_PHASE = "warmup"


@dataclass(slots=True)
class Rung:
    """The measured requests of one rung of the ladder."""

    index: int
    users: int
    records: list[RequestRecord]

    @property
    def completed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def wall_s(self) -> float:
        return max(r.t_end for r in self.records) - min(r.t_start for r in self.records)

    @property
    def output_tokens(self) -> int:
        """Output tokens of completed requests (the tokens every rate counts)."""
        return sum(r.output_tokens for r in self.completed)

    @property
    def requests(self) -> int:
        return len(self.records)

    def row(self, *, partial: bool = False) -> SweepRow:
        return sweep_row(self, partial=partial)

    def per_second(self, amount: float) -> float:
        """`amount` divided by the rung's wall time (0 for a zero-length rung)."""
        wall = self.wall_s
        return amount / wall if wall > 0 else 0.0


def group_rungs(records: Iterable[RequestRecord]) -> list[Rung]:
    """Measured records grouped by rung index, in ladder order; warm-up records are dropped."""
    by_index: dict[int, list[RequestRecord]] = {}
    for rec in records:
        if rec.phase != WARMUP_PHASE:
            by_index.setdefault(rec.rung, []).append(rec)
    return [Rung(index=i, users=recs[0].users, records=recs) for i, recs in sorted(by_index.items())]


@dataclass(slots=True)
class SweepRow:
    """One row of the sweep table (full precision; rounding is the formatter's job)."""

    rung: int
    conc: int
    agg_tok_s: float
    per_req_tok_s: float | None  # None when no request completed
    tokens: int
    wall_s: float
    ttft_p50_ms: float | None
    requests: int
    failures: int
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    partial_tokens: int = 0
    estimated: bool = False
    partial: bool = False
    saturated: bool = False
    machine_busy: bool = False
    generator: dict[str, Any] | None = None
    new_connections: int | None = None  # requests that opened a connection; None: not recorded (issue 12)
    input_tokens: dict[str, Any] | None = None  # asked, mean, p50, p99, miss_pct... (reconcile.input_summary)
    timing_uncertainty: dict[str, Any] | None = None  # llmload.analysis.uncertainty; None: every time exact
    rate: float | None = None  # rate mode: the rung's target request rate (its users are client slots)


@dataclass(frozen=True, slots=True)
class MissingRung:
    """A rung of the ladder without a single measured record: it started but the run stopped before
    its first request ended (`started`), or the run stopped before it began. The table lists it,
    marked, so a stopped run never looks shorter than its ladder."""

    rung: int
    conc: int
    started: bool


def sweep_row(rung: Rung, *, partial: bool = False) -> SweepRow:
    """The sweep-table row of one rung (see the module docstring for the definitions), computed by
    its `llmload.analysis.rung_tally.RungTally`, the one implementation."""
    from llmload.analysis.rung_tally import tally_records  # the tally is built on this module

    return tally_records(rung.index, rung.users, rung.records).row(partial=partial)


class RowSource(Protocol):
    """A rung that gives its sweep row: a `Rung` of records or a `rung_tally.RungTally`."""

    index: int
    users: int

    @property
    def requests(self) -> int: ...

    def row(self, *, partial: bool = False) -> SweepRow: ...


def sweep_rows(
    rungs: Iterable[RowSource],
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
