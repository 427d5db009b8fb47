"""The Amdahl budget's report (`llmload budget`): the table of llmload.analysis.budget's rows, the
step time fitted over the rungs and the conclusion at the highest concurrency."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.budget import BudgetRow, CostModel, fit_step_model
from llmload.output.grid import report_grid


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}"


def render_budget(
    rows: Sequence[BudgetRow], cost: CostModel, speedup: float | None, fmt: str = "table"
) -> str:
    """The budget table, the fitted step-time line and the conclusion at the highest concurrency."""
    gain_col = f"gain_{speedup:g}x_%" if speedup is not None else "gain_kx_%"
    header = [
        "conc",
        "agg_tok/s",
        "accept_len",
        "tok/step",
        "step_ms",
        "comp_ms",
        "share_%",
        gain_col,
        "gain_free_%",
    ]
    body = [
        [
            str(r.conc),
            f"{r.agg_tok_s:.1f}",
            f"{r.accept_len:.2f}",
            f"{r.tokens_per_step:.1f}",
            f"{r.step_ms:.1f}",
            f"{r.component_ms:.2f}",
            _pct(r.share),
            _pct(r.gain_speedup),
            _pct(r.gain_free),
        ]
        for r in rows
    ]
    lines = [f"component: {cost.name}, {cost.describe()}", ""]
    lines.append(report_grid(header, body, fmt, colalign=["right"] * len(header)))
    fit = fit_step_model(rows)
    if fit is not None:
        lines.append(f"step time fitted over the rungs: step_ms = {fit[0]:.1f} + {fit[1]:.2f} * batch")
    top = max(rows, key=lambda r: r.conc)
    verdict = (
        f"at conc {top.conc}: {top.tokens_per_step:.0f} tokens per step, {top.step_ms:.1f} ms per step; "
        f"{cost.name} costs {top.component_ms:.2f} ms = {top.share * 100:.2f} % of it"
    )
    if top.gain_speedup is not None:
        verdict += f"; {speedup:g}x faster gains {top.gain_speedup * 100:.2f} % end to end"
    lines.append(verdict + f" (at most {top.gain_free * 100:.2f} % if it were free)")
    return "\n".join(lines)
