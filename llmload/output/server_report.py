"""The server's own counters per stage (llmload.analysis.run.server_metrics) as a table with its notes,
in table or markdown: the HTML report's server section."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.run.server_metrics import ServerMetrics, ServerRungMetrics
from llmload.core.names import rung_name
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid

SERVER_COLUMNS = (
    "rung",
    "server_tokens",
    "client_tokens",
    "running",
    "waiting",
    "kv_usage_%",
    "accept_len",
    "samples",
)


def server_rows(metrics: Sequence[ServerRungMetrics]) -> list[list[str]]:
    """One row of preformatted cells per stage, in SERVER_COLUMNS order."""
    return [
        [
            rung_name(m.rung, m.conc),
            fmt_num(m.generation_tokens, 0) + (" ~" if m.overlap else ""),
            str(m.client_tokens),
            fmt_num(m.running, 2),
            fmt_num(m.waiting, 2),
            fmt_pct(m.kv_usage, 2),
            fmt_num(m.accept_len, 2),
            str(m.samples),
        ]
        for m in metrics
    ]


def server_table_notes(server: ServerMetrics) -> list[str]:
    """Lines printed under the server table: what it shows, the overlap mark, the warnings."""
    notes = [f"server metrics ({server.family}); running, waiting, kv usage: means over the rung's scrapes"]
    if any(m.overlap for m in server.rungs):
        notes.append("~ the scrapes around this rung also cover another stage: an upper bound")
    return notes + [f"warning: {w}" for w in server.warnings]


def render_server_metrics(server: ServerMetrics, fmt: str = "table") -> str:
    """The per-stage server table (table or markdown) followed by its notes."""
    table = grid(SERVER_COLUMNS, server_rows(server.rungs), fmt)
    return "\n".join([table, *server_table_notes(server)])
