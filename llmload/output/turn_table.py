"""Presentation of session metrics per turn (`llmload.analysis.run.production_traffic.turn_metrics`):
one row per rung and turn index, in the table or markdown format of the sweep table."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.run.production_traffic import TurnMetrics
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
