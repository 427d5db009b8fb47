"""The Amdahl budget's report (`llmload budget`): the table of llmload.analysis.budget's rows (100
columns wide; `wide` adds the measured extras), the step time fitted over the rungs, what was
measured and how, and the conclusion at the highest concurrency."""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmload.analysis.budget import BudgetRow, CostModel, fit_step_model
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid

COUNTERS_DIFFER = 0.05  # the counters' acceptance this far from the stream's is named


def speedup_label(speedup: float | None) -> str:
    if speedup is None:
        return "k"
    return "inf" if math.isinf(speedup) else f"{speedup:g}"


def _table(rows: Sequence[BudgetRow], speedup: float | None, fmt: str, wide: bool) -> str:
    free = speedup is not None and math.isinf(speedup)
    header = ["conc", "agg_tok/s", "batch", "step_ms", "tok/step", "comp_ms", "share_%"]
    header += [] if free else [f"gain_{speedup_label(speedup)}x_%"]
    header += ["gain_free_%"]
    if wide:
        header += ["batch_tok", "waited", "ctr_accept", "measured"]
    body = []
    for r in rows:
        cells = [str(r.conc), fmt_num(r.agg_tok_s), fmt_num(r.batch), fmt_num(r.step_ms)]
        cells += [fmt_num(r.accept_len, 2), fmt_num(r.component_ms, 2), fmt_pct(r.share, 2)]
        cells += [] if free else [fmt_pct(r.gain_speedup, 2)]
        cells += [fmt_pct(r.gain_free, 2)]
        if wide:
            s = r.steps
            cells += [fmt_num(r.tokens_per_step), "-" if s is None else str(s.waited)]
            cells += [fmt_num(None if s is None else s.counters_accept, 2), "yes" if r.measured else "no"]
        body.append(cells)
    return grid(header, body, fmt, align=["right"] * len(header))


def measured_notes(rows: Sequence[BudgetRow], accept_given: bool) -> list[str]:
    """What was measured and how, the counters' acceptance where it differs from the stream's,
    and the rungs whose requests waited."""
    measured = [r for r in rows if r.measured]
    if not measured:
        return []
    server = any(r.steps is not None and r.steps.batch_source == "server" for r in measured)
    lines = [
        "step_ms: the median of the server's steps, from the streams' chunks; batch: "
        + ("the requests the server's metrics say it ran" if server else "the streams decoding at once")
        + "; tok/step: tokens a step gives each sequence, from the streams"
    ]
    if accept_given:
        lines.append("--accept-len is not used: the run's streams measured each rung's step")
    for r in measured:
        s = r.steps
        if s is None:
            continue
        if s.counters_accept and abs(s.counters_accept - r.accept_len) > COUNTERS_DIFFER * r.accept_len:
            lines.append(
                f"conc {r.conc}: the server's counters say {s.counters_accept:.2f} tokens a step (1 + "
                f"accepted / drafts: only steps that had a draft), the streams {r.accept_len:.2f} (every "
                "step): the step above is the streams'"
            )
        if s.waited or s.server_waiting:
            lines.append(
                f"conc {r.conc}: {s.waited} of {s.streams} requests waited for a place: the server ran "
                f"{r.batch:g} at once, and the step is that batch's"
            )
    return lines


def render_budget(
    rows: Sequence[BudgetRow],
    cost: CostModel,
    speedup: float | None,
    fmt: str = "table",
    *,
    wide: bool = False,
    accept_given: bool = False,
) -> str:
    """The budget table, what was measured, the fitted step-time line and the conclusion at the
    highest concurrency."""
    lines = [f"component: {cost.name}, {cost.describe()}", ""]
    lines.append(_table(rows, speedup, fmt, wide))
    lines += measured_notes(rows, accept_given)
    fit = fit_step_model(rows)
    if fit is not None:
        lines.append(f"step time fitted over the rungs: step_ms = {fit[0]:.1f} + {fit[1]:.2f} * batch")
    top = max(rows, key=lambda r: r.conc)
    verdict = (
        f"at conc {top.conc}: {top.tokens_per_step:.0f} tokens per step, {top.step_ms:.1f} ms per step; "
        f"{cost.name} costs {top.component_ms:.2f} ms = {fmt_pct(top.share, 2)} % of it"
    )
    if top.gain_speedup is not None and speedup is not None and not math.isinf(speedup):
        verdict += f"; {speedup:g}x faster gains {fmt_pct(top.gain_speedup, 2)} % end to end"
    lines.append(verdict + f" (at most {fmt_pct(top.gain_free, 2)} % if it were free)")
    return "\n".join(lines)
