"""The sweep table of the run in progress, kept up to date from the records the master receives.

The ladder (`LadderShape.record_hooks`) hands every record to `LiveSweep.add` after writing it, so
the master of a distributed run sees the records of all workers. Each rung is a `RungTally`:
running sums (requests, tokens, first start, last end, failures by kind) and the raw values that a
mean or a percentile needs (per-request tok/s; TTFT and TPOT in ms, kept sorted). The figures use
the post-processor's definitions (`llmload.analysis.sweep_rows`), its per-request functions
(`llmload.analysis.metrics.ttft_ms` / `tpot_ms`), its statistics (`llmload.core.stats.mean` /
`percentile`) and its rounding (`llmload.output.table.fmt_num`), so at the end of a run they equal
`llmload table` on the run's files, digit for digit (tests/test_webui.py checks it on real runs).

Why not keep the records and call `sweep_row`: the tab is recomputed at every poll of the page
(every 2 s), in the process that may also run the users; recomputing a 50k-request rung took
~1.1 s here, and a record with its chunk times weighs ~2.7 KB (59 chunks). A tally costs about
100 bytes per request and milliseconds per poll.

The running rung also gets a live rate, `now_tok_s`: output tokens of its completed requests
divided by the seconds since the rung's common start (see `llmload.loadgen.ladder`); unlike agg_tok/s it
keeps moving between request completions.
"""

from __future__ import annotations

import math
import time
from bisect import insort
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llmload.analysis.metrics import tpot_ms, ttft_ms
from llmload.analysis.reconcile import input_summary
from llmload.analysis.sweep_rows import WARMUP_PHASE, SweepRow
from llmload.core.names import WARMUP_RUNG, rung_name
from llmload.core.records import RequestRecord
from llmload.core.stats import mean, percentile
from llmload.loadgen.ladder import RunState
from llmload.output.table import fmt_num


@dataclass(slots=True)
class RungTally:
    """One rung's figures as running sums and the raw values its percentiles and mean need
    (about 100 bytes per request); `row()` is the sweep row the post-processor computes from the
    same records: the definitions of `llmload.analysis.sweep_rows`, the functions of `llmload.core.stats`."""

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
    inputs: list[int] = field(default_factory=list)  # usage.prompt_tokens, completed requests
    inputs_asked: int | None = None
    new_connections: int | None = None  # None until a record says how it got its connection

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
            ttft_p50_ms=_percentile(self.ttfts_ms, 50.0),
            requests=self.requests,
            failures=sum(self.failures.values()),
            failures_by_kind=dict(sorted(self.failures.items())),
            partial_tokens=self.partial_tokens,
            estimated=self.estimated,
            input_tokens=input_summary(self.inputs, self.inputs_asked),
            new_connections=self.new_connections,
        )

    def cells(self, *, state: str, now_tok_s: float | None) -> dict[str, str]:
        """The tab's row: display strings rounded as `scripts/sweep_table.py` rounds them."""
        row = self.row()
        return {
            "rung": rung_name(row.rung, row.conc),
            "users": str(row.conc),
            "state": state,
            "agg_tok_s": fmt_num(row.agg_tok_s),
            "per_req_tok_s": fmt_num(row.per_req_tok_s),
            "ttft_p50_ms": fmt_num(row.ttft_p50_ms),
            "ttft_p99_ms": fmt_num(_percentile(self.ttfts_ms, 99.0)),
            "tpot_p50_ms": fmt_num(_percentile(self.tpots_ms, 50.0)),
            "tokens": str(row.tokens),
            "requests": str(row.requests),
            "failures": str(row.failures),
            "now_tok_s": "" if now_tok_s is None else fmt_num(now_tok_s),
        }


def _percentile(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


class LiveSweep:
    """The current run's rungs as tallies, fed with the records as they arrive."""

    def __init__(self) -> None:
        self.run: RunState | None = None
        self.rungs: dict[int, RungTally] = {}

    def follow(self, run: RunState | None) -> None:
        """Start over when the ladder began a new run (a new start from the web UI)."""
        if run is not None and run is not self.run:
            self.run = run
            self.rungs = {}

    def add(self, run: RunState, data: dict[str, Any]) -> None:
        """A record as the ladder received it (the `LadderShape.record_hooks` signature)."""
        self.follow(run)
        if data["phase"] == WARMUP_PHASE:
            return
        rec = RequestRecord.from_dict(data)
        tally = self.rungs.get(rec.rung)
        if tally is None:
            tally = self.rungs[rec.rung] = RungTally(rec.rung, rec.users)
        tally.add(rec)

    def _finished(self) -> set[int]:
        """Rungs the ladder finished (what `<prefix>_run.json` says at the end of the run)."""
        if self.run is None:
            return set()
        return {p.stage.rung for p in self.run.progress if p.finished is not None}

    def running_rung(self, active: bool) -> int | None:
        """Index of the rung being measured now; None between rungs or when the run is over.
        `active`: whether the ladder still runs this run (it forgets a run when it ends)."""
        current = self.run.current if self.run is not None and active else None
        if current is None or current.finished is not None or current.stage.start_at is None:
            return None
        return None if current.stage.rung == WARMUP_RUNG else current.stage.rung

    def table(self, active: bool) -> list[dict[str, str]]:
        """One row of display strings per rung (the Tokens tab), in ladder order."""
        running = self.running_rung(active)
        finished = self._finished()
        rows = []
        for index in sorted(self.rungs):
            tally = self.rungs[index]
            if index == running:
                assert self.run is not None and self.run.current is not None
                since = time.time() - (self.run.current.stage.start_at or 0.0)
                rows.append(tally.cells(state="running", now_tok_s=tally.completed_tokens_per_s(since)))
            else:
                rows.append(tally.cells(state="done" if index in finished else "stopped", now_tok_s=None))
        return rows
