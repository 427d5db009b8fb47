"""A post-processed run (`llmload.analysis.run.postprocess.RunResult`) as text: the sweep table and,
for session runs, the per-turn table and the figures per session. Shared by `llmload table`,
`llmload sweep` and the web UI's results download; rendering lives here, in the output layer, so
analysis never imports output."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.identity.determinism import divergence_notes
from llmload.analysis.knee import Knee, sweep_knee
from llmload.analysis.run.clocks import clock_notes
from llmload.analysis.run.postprocess import RunResult
from llmload.analysis.run.production_traffic import turn_metrics
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.config import RUNG_END_KEYS
from llmload.core.names import rung_name
from llmload.core.stats import DEFAULT_PERCENTILES
from llmload.output.gpu_report import gpu_extra, gpu_notes
from llmload.output.table import Extra, render, table_notes
from llmload.output.turn_table import render_sessions, render_turns, session_extra


def render_run(
    result: RunResult,
    fmt: str = "table",
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    wide: bool = False,
) -> str:
    """The run's table(s) in fmt, without the warnings; with session turns, the session tables
    (table, markdown; json and csv carry the figures per session in their rows); the ladder's knee
    in each json row and csv row (`knee_extra`) and its line under the table."""
    knee = sweep_knee(result.rows)
    text = render(
        result.rows,
        fmt,
        metrics=result.metrics,
        percentiles=percentiles,
        wide=wide,
        missing=result.missing,
        notes=extra_notes(result, knee),
        determinism=result.divergence or None,
        extras=[
            *([] if result.gpu is None else [gpu_extra(result.gpu, result.rows)]),
            *([session_extra(result.sessions)] if result.sessions else []),
            *([] if knee is None else [knee_extra(knee, result)]),
        ],
    )
    if fmt not in ("table", "markdown") or not result.sessions:
        return text
    return "\n\n".join([text, session_tables(result, fmt)])


def session_tables(result: RunResult, fmt: str = "table") -> str:
    """A session run's tables in fmt (table or markdown): per turn, then per session."""
    turns = render_turns(turn_metrics(result.iter_records()), fmt)
    return "\n\n".join(filter(None, [turns, render_sessions(result.sessions, result.rows, fmt)]))


def run_notes(result: RunResult) -> list[str]:
    """The notes of the run's table (`llmload.output.table.table_notes`): printed under the table in
    `table` output; in the formats made for pasting or parsing (markdown, csv, json) the commands
    print them on stderr, so they never mix with the data."""
    return table_notes(result.rows, result.missing, extra_notes(result, sweep_knee(result.rows)))


def extra_notes(result: RunResult, knee: Knee | None) -> list[str]:
    """The notes of the run's other checks: the ladder's early stop (over-saturation) and its knee
    (llmload.analysis.knee), greedy determinism, the GPUs, the workers' clocks."""
    stopped = result.run_info.stopped_early if result.run_info is not None else None
    held = result.run_info.recorded(*RUNG_END_KEYS) if result.run_info is not None else None
    asked = held.rung_precision if held is not None else None
    short = None if asked is None else precision_note(result.rows, asked)
    return [
        *([] if stopped is None else [stopped]),
        *([] if short is None else [short]),
        *([] if knee is None else [knee.line()]),
        *divergence_notes(result.divergence),
        *gpu_notes(result.gpu),
        *clock_notes(result.run_info),
    ]


def precision_note(rows: Sequence[SweepRow], asked: float) -> str | None:
    """The held rungs whose interval over their whole window is wider than their precision
    (`precision`, docs/precision.md: a cap ended them, or the rule's last check over their
    completed requests read narrower): each one's agg tok/s +- % and its requests, and what to do;
    None when every rung reached it (the table's `±%` column shows what each reached)."""
    short = []
    for row in rows:
        pct = (row.interval or {}).get("agg_tok_s_pct")
        if pct is None or pct > asked:
            shown = "no interval" if pct is None else f"+-{pct:.1f} %"
            short.append(f"{rung_name(row.rung, row.conc)} {shown} in {row.requests} requests")
    if not short:
        return None
    return (
        f"precision +-{asked:g} % not reached over the rung's window: "
        + "; ".join(short)
        + " (Locust's log says whether a cap ended it): raise precision_max_s or "
        "precision_max_requests, or ask a narrower --precision to run it longer"
    )


def knee_extra(knee: Knee, result: RunResult) -> Extra:
    """The knee in each json row (`knee`: the ladder's, with `past`: this rung is past it) and the
    csv's `past_knee` column; no table of its own (its line is a note)."""
    past = {r.rung: knee.past(r.conc) for r in result.rows}
    return Extra(
        key="knee",
        json={rung: knee.as_dict() | {"past": p} for rung, p in past.items()},
        csv=lambda rung: {"past_knee": str(past.get(rung, False))},
        table=lambda fmt: "",
    )
