"""The sweep table of the run in progress, kept up to date from the records the master receives.

The ladder (`LadderShape.record_hooks`) hands every record to `LiveSweep.add` after writing it, so
the master of a distributed run sees the records of all workers. The figures are computed by the
post-processor's own functions (`llmload.sweep.sweep_rows`, `llmload.metrics.rung_metrics`,
`llmload.table.fmt_num`) over the same records, so at the end of a run they equal
`scripts/sweep_table.py` on its files, digit for digit.

Memory: a record is kept without its chunk lists, request id and error text (the table needs
none of them), about 0.4 KB each. A rung's figures are recomputed only when it got new records.

The running rung also gets a live rate, `now_tok_s`: output tokens of its completed requests
divided by the seconds since the rung's common start (see `llmload.ladder`); unlike agg_tok/s it
keeps moving between request completions.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from llmload.entries import WARMUP_RUNG, rung_name
from llmload.ladder import RunState
from llmload.metrics import RungMetrics, rung_metrics
from llmload.records import RequestRecord
from llmload.sweep import WARMUP_PHASE, SweepRow, group_rungs, sweep_rows
from llmload.table import fmt_num

PERCENTILES = (50.0, 99.0)
_NO_CHUNKS: list[float] = []  # shared by every kept record; nothing appends to a record's chunk list


def slim_record(data: dict[str, Any]) -> RequestRecord:
    """The record without what the table never reads (chunk lists, id, error text)."""
    rec = RequestRecord.from_dict(data)
    rec.chunk_times = _NO_CHUNKS
    rec.chunk_tokens = None
    rec.request_id = ""
    rec.error = None
    rec.worker = ""
    rec.phase = sys.intern(rec.phase)
    rec.endpoint = sys.intern(rec.endpoint)
    rec.outcome = sys.intern(rec.outcome)
    if rec.finish_reason is not None:
        rec.finish_reason = sys.intern(rec.finish_reason)
    return rec


@dataclass(frozen=True, slots=True)
class _Computed:
    count: int
    partial: bool
    row: SweepRow
    metrics: RungMetrics


class LiveSweep:
    """Records of the current run per rung, and the table computed from them."""

    def __init__(self) -> None:
        self.run: RunState | None = None
        self._records: dict[int, list[RequestRecord]] = {}
        self._computed: dict[int, _Computed] = {}

    def follow(self, run: RunState | None) -> None:
        """Start over when the ladder began a new run (a new start from the web UI)."""
        if run is not None and run is not self.run:
            self.run = run
            self._records.clear()
            self._computed.clear()

    def add(self, run: RunState, data: dict[str, Any]) -> None:
        """A record as the ladder received it (the `LadderShape.record_hooks` signature)."""
        self.follow(run)
        if data["phase"] != WARMUP_PHASE:
            self._records.setdefault(data["rung"], []).append(slim_record(data))

    def _unfinished(self) -> set[int]:
        """Rungs the ladder started and has not finished (as `<prefix>_run.json` records them)."""
        if self.run is None:
            return set()
        return {p.stage.rung for p in self.run.progress if p.finished is None and p.stage.rung != WARMUP_RUNG}

    def computed(self) -> list[_Computed]:
        """Sweep row and metrics of each rung with records, in ladder order."""
        unfinished = self._unfinished()
        out = []
        for index in sorted(self._records):
            records = self._records[index]
            partial = index in unfinished
            cached = self._computed.get(index)
            if cached is None or cached.count != len(records) or cached.partial != partial:
                (rung,) = group_rungs(records)
                (row,) = sweep_rows([rung], partial_rungs=unfinished)
                cached = _Computed(len(records), partial, row, rung_metrics(rung, percentiles=PERCENTILES))
                self._computed[index] = cached
            out.append(cached)
        return out

    def running_rung(self, active: bool) -> int | None:
        """Index of the rung being measured now; None between rungs or when the run is over.
        `active`: whether the ladder still runs this run (it forgets a run when it ends)."""
        current = self.run.current if self.run is not None and active else None
        if current is None or current.finished is not None or current.stage.start_at is None:
            return None
        return None if current.stage.rung == WARMUP_RUNG else current.stage.rung

    def now_tok_s(self, index: int) -> float:
        """Live rate of the running rung: its completed output tokens / seconds since its start."""
        assert self.run is not None and self.run.current is not None
        elapsed = time.time() - (self.run.current.stage.start_at or 0.0)
        tokens = sum(r.output_tokens for r in self._records.get(index, ()) if r.ok)
        return tokens / elapsed if elapsed > 0 else 0.0

    def table(self, active: bool) -> list[dict[str, str]]:
        """One row of display strings per rung (the Tokens tab), rounded as sweep_table.py."""
        running = self.running_rung(active)
        rows = []
        for c in self.computed():
            row, latencies = c.row, c.metrics.latencies
            ttft, tpot = latencies["ttft"], latencies["tpot"]
            state = "running" if row.rung == running else ("stopped" if c.partial else "done")
            rows.append(
                {
                    "rung": rung_name(row.rung, row.conc),
                    "users": str(row.conc),
                    "state": state,
                    "agg_tok_s": fmt_num(row.agg_tok_s),
                    "per_req_tok_s": fmt_num(row.per_req_tok_s),
                    "ttft_p50_ms": fmt_num(row.ttft_p50_ms),
                    "ttft_p99_ms": fmt_num(None if ttft is None else ttft.percentiles[99.0]),
                    "tpot_p50_ms": fmt_num(None if tpot is None else tpot.median),
                    "tokens": str(row.tokens),
                    "requests": str(row.requests),
                    "failures": str(row.failures),
                    "now_tok_s": fmt_num(self.now_tok_s(row.rung)) if state == "running" else "",
                }
            )
        return rows
