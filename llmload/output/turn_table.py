"""Presentation of a session run's tables: the metrics per turn
(`llmload.analysis.run.production_traffic.turn_metrics`), one row per rung and turn index, and
the figures per session (`llmload.analysis.sessions.figures`), one row per rung, in the table or
markdown format of the sweep table; the figures per session also as the sweep's `Extra` (the
`sessions` object of each json row, the `session_*` csv columns) and as cells of the web UI."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from llmload.analysis.run.production_traffic import TurnMetrics
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.sessions.figures import SessionFigures
from llmload.core.names import rung_name
from llmload.output.table import Extra
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid

COLUMNS = (
    "conc",
    "turn",
    "requests",
    "ttft_p50_ms",
    "ttft_content_p50_ms",
    "prompt_tokens",
    "cached_tokens",
    "cached_%",
)


def render_turns(rows: Sequence[TurnMetrics], fmt: str = "table") -> str:
    """The per-turn table, titled; empty when there are no session turns."""
    if not rows:
        return ""
    body = [
        [
            str(r.users),
            str(r.turn),
            str(r.requests),
            fmt_num(r.ttft_ms),
            fmt_num(r.ttft_content_ms),
            fmt_num(r.prompt_tokens),
            fmt_num(r.cached_tokens),
            fmt_pct(r.cached_share),
        ]
        for r in rows
    ]
    table = grid(COLUMNS, body, fmt, align=["right"] * len(COLUMNS))
    return f"sessions, by rung and turn (completed turns; medians, token means):\n{table}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _makespan(key: str) -> Callable[[SessionFigures], str]:
    return lambda f: fmt_num(None if f.makespan_s is None else f.makespan_s[key], 2)


# the figures per session: (csv column, table column, its cell); the table's sub-agent columns
# only when some rung fanned out
SESSION_CELLS: tuple[tuple[str, str, Callable[[SessionFigures], str]], ...] = (
    ("sessions", "sessions", lambda f: str(f.sessions)),
    ("sessions_finished", "finished", lambda f: str(f.finished)),
    ("sessions_failed", "failed", lambda f: str(f.failed)),
    ("sessions_unended", "unended", lambda f: str(f.unended)),
    ("session_makespan_p50_s", "makespan_p50_s", _makespan("p50")),
    ("session_makespan_p90_s", "makespan_p90_s", _makespan("p90")),
    ("session_makespan_p99_s", "makespan_p99_s", _makespan("p99")),
    ("session_turns_mean", "turns", lambda f: fmt_num(f.turns_mean)),
    ("session_turns_max", "turns_max", lambda f: _count(f.turns_max)),
    ("session_tool_calls_mean", "tool_calls", lambda f: fmt_num(f.tool_calls_mean)),
    ("session_tool_calls_max", "tool_calls_max", lambda f: _count(f.tool_calls_max)),
    ("session_sub_agents_mean", "sub_agents", lambda f: fmt_num(f.sub_agents_mean)),
    ("session_sub_agents_max", "sub_agents_max", lambda f: _count(f.sub_agents_max)),
    ("session_model_%", "model_%", lambda f: fmt_pct(f.model_share)),
    ("session_tool_%", "tool_%", lambda f: fmt_pct(f.tool_share)),
    ("session_other_%", "other_%", lambda f: fmt_pct(f.other_share)),
)
_SUB_AGENTS = ("session_sub_agents_mean", "session_sub_agents_max")


def session_cells(figures: SessionFigures | None) -> dict[str, str]:
    """A rung's figures per session by csv column, rounded as the table rounds them ('-' for a
    rung without sessions or a figure without a finished session)."""
    return {key: "-" if figures is None else cell(figures) for key, _, cell in SESSION_CELLS}


def render_sessions(
    figures: Mapping[int, SessionFigures], rows: Sequence[SweepRow], fmt: str = "table"
) -> str:
    """The table of figures per session, one line per rung of `rows` that has sessions, titled;
    empty when none has."""
    shown = [r for r in rows if r.rung in figures]
    if not shown:
        return ""
    fanned = any(f.sub_agents_max for f in figures.values())
    picked = [(key, title) for key, title, _ in SESSION_CELLS if fanned or key not in _SUB_AGENTS]
    header = ["rung", *(title for _, title in picked)]
    body = []
    for r in shown:
        cells = session_cells(figures[r.rung])
        body.append([rung_name(r.rung, r.conc), *(cells[key] for key, _ in picked)])
    table = grid(header, body, fmt, align=["right"] * len(header))
    return (
        "sessions, by rung (a session with its sub-agents; of the finished: makespan in s, turns, tool "
        f"calls and sub-agents per session: mean and max, shares of their time):\n{table}"
    )


def session_extra(figures: Mapping[int, SessionFigures]) -> Extra:
    """The figures per session as the sweep table's `Extra`: json and csv (its table is printed
    beside the per-turn table by `llmload.output.run_table.render_run`, not under the metrics)."""
    return Extra(
        key="sessions",
        json={rung: f.as_dict() for rung, f in figures.items()},
        csv=lambda rung: session_cells(figures.get(rung)),
        table=lambda fmt: "",
    )
