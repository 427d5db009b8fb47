"""The sweep of the run in progress, kept up to date from the records the master receives: the
Tokens tab's rows and the figures its charts draw.

The ladder (`LadderShape.record_hooks`) hands every record to `LiveSweep.add` after writing it, so
the master of a distributed run sees the records of all workers. The figures come from
`llmload.analysis.run.rung_tally` (the post-processor's definitions on running sums) with the sweep
table's rounding (`llmload.output.toolkit.cells.fmt_num`), so at the end of a run they equal
`llmload table` on the run's files, digit for digit (tests/e2e/test_webui.py checks it on real
runs).

The running rung also gets a live rate, `now_tok_s`: output tokens of its completed requests
divided by the seconds since the rung's common start (see `llmload.loadgen.run.ladder`); unlike agg_tok/s it
keeps moving between request completions.

With the server's `/metrics` scraped (llmload.loadgen.monitor.run_monitor), each row also shows
the server's view of its rung so far (`server_view`): the means of running, waiting and KV usage
over the scrapes inside the rung's one window (llmload.analysis.run.window; a running rung's ends
now) and the acceptance length of its counters, as `llmload
table --metrics` computes them at the end (llmload.analysis.run.server_metrics); '-' without them.

A session run's rows also show its figures per session so far (`llmload.analysis.sessions.figures`
on the rung's records received: finished sessions and their makespan p50 and p99); a session
still playing counts as unended until its last turn comes.

The charts' time series (`history`) samples each rung's agg and per-request tok/s as they stand
after its latest record: one point per rung whose tally changed, at that rung's latest request
end (`t`, epoch s), at most every `SAMPLE_S` seconds while records arrive, and whenever the series
is read (so the last point of a rung is always its final figures).
"""

from __future__ import annotations

import time
from typing import Any

from llmload.analysis.run.rung_tally import RungTally, SweepTally, percentile_or_none
from llmload.analysis.run.server_metrics import (
    Sample,
    ServerRungMetrics,
    read_samples,
    rung_server_metrics,
)
from llmload.analysis.run.window import span_window
from llmload.analysis.sessions.figures import SessionEnds, SessionFigures, SessionTally
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE, rung_name
from llmload.loadgen.run.run_state import RunState
from llmload.output.table import server_view_cells
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.turn_table import session_cells

SESSION_COLUMNS = ("sessions_finished", "session_makespan_p50_s", "session_makespan_p99_s")

SAMPLE_S = 2.0  # Locust's own pages poll every 2 s


def tab_cells(
    tally: RungTally,
    *,
    state: str,
    now_tok_s: float | None,
    server: ServerRungMetrics | None = None,
    sessions: SessionFigures | None = None,
) -> dict[str, str]:
    """The Tokens tab's row: display strings rounded as `llmload table` rounds them (the server's
    figures as its `--metrics` server view does, the figures per session as its session table)."""
    row = tally.row()
    cache = tally.cache()
    view = server_view_cells(None if server is None else server.as_dict())
    per_session = session_cells(sessions)
    return {
        "rung": rung_name(row.rung, row.conc),
        "users": str(row.conc),
        "state": state,
        "agg_tok_s": fmt_num(row.agg_tok_s),
        "per_req_tok_s": fmt_num(row.per_req_tok_s),
        "valid_pct": fmt_pct((row.structured or {}).get("valid_share")),
        "calls_valid_pct": fmt_pct((row.tool_calls or {}).get("valid_share")),
        "ttft_p50_ms": fmt_num(row.ttft_p50_ms),
        "ttft_p99_ms": fmt_num(percentile_or_none(tally.ttfts_ms, 99.0)),
        "tpot_p50_ms": fmt_num(percentile_or_none(tally.tpots_ms, 50.0)),
        "ttfo_p50_ms": fmt_num(percentile_or_none(tally.values["ttfo"], 50.0)),  # the first answer token
        "think_pct": _share(row.reasoning),
        "tokens": str(row.tokens),
        "requests": str(row.requests),
        "failures": str(row.failures),
        "cache_pct": fmt_pct(None if cache is None else cache["share"]),
        "srv_running": view["running"],
        "srv_waiting": view["waiting"],
        "kv_usage_pct": view["kv_usage"],
        "accept_len": view["accept_len"],
        **{key: per_session[key] for key in SESSION_COLUMNS},
        "now_tok_s": "" if now_tok_s is None else fmt_num(now_tok_s),
    }


def _share(reasoning: dict[str, Any] | None) -> str:
    """The reasoning share of a rung's output tokens, % ('-' for a rung that did not reason)."""
    share = None if reasoning is None or not reasoning["requests"] else reasoning["share"]
    return fmt_pct(share)


def chart_point(tally: RungTally) -> dict[str, Any]:
    """A rung's figures as numbers (the charts' JSON): agg and per-request tok/s, requests, tokens."""
    row = tally.row()
    return {
        "rung": rung_name(row.rung, row.conc),
        "users": row.conc,
        "agg_tok_s": row.agg_tok_s,
        "per_req_tok_s": row.per_req_tok_s,
        "requests": row.requests,
        "tokens": row.tokens,
    }


class LiveSweep:
    """The current run's rungs as tallies, fed with the records as they arrive."""

    def __init__(self) -> None:
        self.run: RunState | None = None
        self.runs_seen = 0
        self._reset()

    def _reset(self) -> None:
        self.tally = SweepTally()
        self.sessions: dict[int, SessionTally] = {}  # session runs: each rung's session trees
        self.history: list[dict[str, Any]] = []
        self._sampled_requests: dict[int, int] = {}
        self._sampled_at = 0.0
        self._scrapes: tuple[int, list[Sample]] = (-1, [])  # the scrape file's size when read, its samples

    @property
    def rungs(self) -> dict[int, RungTally]:
        return self.tally.rungs

    def follow(self, run: RunState | None) -> None:
        """Start over when the ladder began a new run (a new start from the web UI)."""
        if run is not None and run is not self.run:
            self.run = run
            self.runs_seen += 1
            self._reset()

    def add(self, run: RunState, rec: RequestRecord) -> None:
        """A record as the ladder received it (the `LadderShape.record_hooks` signature)."""
        self.follow(run)
        tally = self.tally.add_record(rec)
        if tally is not None and rec.session is not None:
            self.sessions.setdefault(rec.rung, SessionTally(rec.rung, rec.users)).add(rec)
        if tally is not None and time.time() - self._sampled_at >= SAMPLE_S:
            self.sample()

    def sample(self) -> None:
        """Add a history point for each rung whose tally changed since its last point."""
        self._sampled_at = time.time()
        for index in sorted(self.rungs):
            tally = self.rungs[index]
            if self._sampled_requests.get(index) != tally.requests:
                self._sampled_requests[index] = tally.requests
                self.history.append({"t": tally.last_end, **chart_point(tally)})

    def _finished(self) -> set[int]:
        """Rungs the ladder finished (what `<prefix>_run.json` says at the end of the run)."""
        if self.run is None:
            return set()
        done = (p.stage for p in self.run.progress if p.finished is not None)
        return {stage.rung for stage in done if stage.phase == MEASURE_PHASE}

    def running_rung(self, active: bool) -> int | None:
        """Index of the rung being measured now; None between rungs or when the run is over.
        `active`: whether the ladder still runs this run (it forgets a run when it ends)."""
        current = self.run.current if self.run is not None and active else None
        if current is None or current.finished is not None or current.stage.start_at is None:
            return None
        return current.stage.rung if current.stage.phase == MEASURE_PHASE else None

    def states(self, active: bool) -> dict[int, str]:
        """Each tallied rung's state, in ladder order: running, done or stopped (the run was
        stopped before the rung finished)."""
        running = self.running_rung(active)
        finished = self._finished()
        return {
            index: "running" if index == running else "done" if index in finished else "stopped"
            for index in sorted(self.rungs)
        }

    def server_view(self) -> dict[int, ServerRungMetrics]:
        """The server's figures of each measured rung so far, by rung index (module docstring): from
        the run's scrape file, read again only when it grew; a running rung's window ends now."""
        run = self.run
        path = None if run is None else run.files.server_metrics
        try:
            size = -1 if path is None else path.stat().st_size
        except OSError:
            size = -1
        if size != self._scrapes[0]:
            self._scrapes = (size, read_samples(path)[1] if path is not None and size > 0 else [])
        samples = self._scrapes[1]
        if run is None or not samples:
            return {}
        now, finished = time.time(), self._finished()
        windows = [
            t.window if i in finished else span_window(i, t.users, t.first_start, now)
            for i, t in sorted(self.rungs.items())
        ]
        return {m.rung: m for m in rung_server_metrics(samples, windows, {})}

    def _session_ends(self) -> SessionEnds:
        """When the run's sessions end (its `sessions:` section; a session run has a run)."""
        return SessionEnds.of(None if self.run is None else self.run.config.sessions)

    def table(self, active: bool) -> list[dict[str, str]]:
        """One row of display strings per rung (the Tokens tab), in ladder order."""
        rows = []
        server = self.server_view()
        for index, state in self.states(active).items():
            now_tok_s = None
            if state == "running":
                assert self.run is not None and self.run.current is not None
                since = time.time() - (self.run.current.stage.start_at or 0.0)
                now_tok_s = self.rungs[index].completed_tokens_per_s(since)
            sessions = self.sessions.get(index)
            cells = tab_cells(
                self.rungs[index],
                state=state,
                now_tok_s=now_tok_s,
                server=server.get(index),
                sessions=None if sessions is None else sessions.figures(self._session_ends()),
            )
            rows.append(cells)
        return rows

    def charts(self, active: bool, since: int = 0) -> dict[str, Any]:
        """The charts' data: the sweep curve (one point per rung, with its state) and the time
        series from point `since` on (a page that has the first `since` points asks for the rest)."""
        self.sample()
        return {
            "run": self.runs_seen,
            "sweep": [{**chart_point(self.rungs[i]), "state": s} for i, s in self.states(active).items()],
            "history_length": len(self.history),
            "history": self.history[since:],
        }
