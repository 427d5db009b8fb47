"""Running tallies of a sweep in progress: the sweep rows of the records seen so far, fed one
record at a time.

Each rung is a `RungTally`: running sums (requests, tokens, first start, last end, failures by
kind) and the raw values that a mean or a percentile needs (per-request tok/s; TTFT and TPOT in
ms, kept sorted). The figures use the post-processor's definitions (`llmload.analysis.sweep_rows`),
its per-request functions (`llmload.analysis.metrics.ttft_ms` / `tpot_ms`) and its statistics
(`llmload.core.stats.mean` / `percentile`), so at the end of a run `row()` equals `sweep_row` on
the run's files. Two readers share it: the web UI's Tokens tab and charts
(`llmload.loadgen.live_sweep`, fed by the ladder on the master) and the terminal progress line
(`llmload.cli.progress`, fed from the growing records file).

Why not keep the records and call `sweep_row`: the tab is recomputed at every poll of the page
(every 2 s), in the process that may also run the users; recomputing a 50k-request rung took
~1.1 s here, and a record with its chunk times weighs ~2.7 KB (59 chunks). A tally costs about
100 bytes per request and milliseconds per poll.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llmload.analysis.metrics import tpot_ms, ttft_ms
from llmload.analysis.reconcile import input_summary
from llmload.analysis.sweep_rows import WARMUP_PHASE, SweepRow
from llmload.core.records import RequestRecord
from llmload.core.stats import mean, percentile


@dataclass(slots=True)
class RungTally:
    """One rung's figures as running sums and the raw values its percentiles and mean need
    (about 100 bytes per request); `row()` is the sweep row the post-processor computes from the
    same records."""

    index: int
    users: int
    requests: int = 0
    tokens: int = 0
    partial_tokens: int = 0
    estimated: bool = False
    first_start: float = math.inf
    last_end: float = -math.inf
    failures: Counter[str] = field(default_factory=Counter)
    rates: list[float] = field(default_factory=list)  # output_tokens / E2E s, completed requests
    ttfts_ms: list[float] = field(default_factory=list)  # sorted
    tpots_ms: list[float] = field(default_factory=list)  # sorted
    inputs: list[int] = field(default_factory=list)  # usage.prompt_tokens of completed requests
    inputs_asked: int | None = None  # the asked prompt_tokens, from the first record that says it
    new_connections: int | None = None  # None until a record says whether it reused a connection

    def add(self, rec: RequestRecord) -> None:
        self.requests += 1
        self.first_start = min(self.first_start, rec.t_start)
        self.last_end = max(self.last_end, rec.t_end)
        self.inputs_asked = self.inputs_asked or rec.prompt_tokens_asked
        if rec.conn_reused is not None:
            self.new_connections = (self.new_connections or 0) + (not rec.conn_reused)
        if not rec.ok:
            self.failures[rec.outcome] += 1
            self.partial_tokens += rec.output_tokens
            return
        self.tokens += rec.output_tokens
        self.estimated = self.estimated or rec.tokens_estimated
        if rec.prompt_tokens is not None:
            self.inputs.append(rec.prompt_tokens)
        if rec.e2e_s > 0:
            self.rates.append(rec.output_tokens / rec.e2e_s)
        ttft = ttft_ms(rec)
        if ttft is not None:
            insort(self.ttfts_ms, ttft)
        tpot = tpot_ms(rec)
        if tpot is not None:
            insort(self.tpots_ms, tpot)

    @property
    def wall_s(self) -> float:
        return self.last_end - self.first_start

    def completed_tokens_per_s(self, seconds: float) -> float:
        return self.tokens / seconds if seconds > 0 else 0.0

    def row(self) -> SweepRow:
        return SweepRow(
            rung=self.index,
            conc=self.users,
            agg_tok_s=self.completed_tokens_per_s(self.wall_s),
            per_req_tok_s=mean(self.rates) if self.rates else None,
            tokens=self.tokens,
            wall_s=self.wall_s,
            ttft_p50_ms=percentile_or_none(self.ttfts_ms, 50.0),
            requests=self.requests,
            failures=sum(self.failures.values()),
            failures_by_kind=dict(sorted(self.failures.items())),
            partial_tokens=self.partial_tokens,
            estimated=self.estimated,
            input_tokens=input_summary(self.inputs, self.inputs_asked),
            new_connections=self.new_connections,
        )


def percentile_or_none(values: list[float], q: float) -> float | None:
    """`llmload.core.stats.percentile`, None for no values."""
    return percentile(values, q) if values else None


class SweepTally:
    """The rungs of one run as tallies, fed with records as plain dicts (as the ladder receives
    them and as the records file holds them); warm-up requests are only counted."""

    def __init__(self) -> None:
        self.rungs: dict[int, RungTally] = {}
        self.warmup_requests = 0

    def add(self, data: dict[str, Any]) -> RungTally | None:
        """Tally one record; returns its rung's tally, None for a warm-up request."""
        if data["phase"] == WARMUP_PHASE:
            self.warmup_requests += 1
            return None
        rec = RequestRecord.from_dict(data)
        tally = self.rungs.get(rec.rung)
        if tally is None:
            tally = self.rungs[rec.rung] = RungTally(rec.rung, rec.users)
        tally.add(rec)
        return tally
