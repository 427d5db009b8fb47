"""The what-if twin's report (`llmload twin`): the fitted parameters, the measured-vs-twin table of
the replay and the prediction's table, in table or markdown, and the JSON document. The figures,
the verdict and the change are llmload.analysis.twin.replay's; this module only lays them out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmload.analysis.run.steps import RungSteps
from llmload.analysis.twin.decision import Decision, RungDecision, figure_cells, pct
from llmload.analysis.twin.fit import TwinFit, TwinParams
from llmload.analysis.twin.replay import FIGURES, SHOWN, Change, TwinRow, amdahl_bound, step_at
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid

NARROW = ("agg_tok_s", "ttft_p50_ms", "tpot_p50_ms")  # the figures of the 100-column tables


def _keys(rows: Sequence[TwinRow], wide: bool = True) -> list[str]:
    present = {k for r in rows for k in r.model} | {k for r in rows for k in (r.measured or {})}
    return [k for k in FIGURES if k in present and (wide or k in NARROW)]


def params_line(params: TwinParams) -> str:
    """The step model in one line."""
    limit = params.max_num_seqs if params.max_num_seqs is not None else "none reached"
    return (
        f"step_ms = {params.base_ms:.2f} + {params.per_seq_ms:.3f} x batch + "
        f"{params.prefill_ms_per_token:.4f} x prompt tokens admitted; accept_len {params.accept_len:.2f}; "
        f"max_num_seqs {limit}"
    )


def fit_lines(fit: TwinFit, sim_file: Path) -> list[str]:
    """The fit: its parameters, what they were fitted from, its notes and the simulator settings."""
    lines = [f"fitted: {params_line(fit.params)}"]
    idle = f" ({fit.idle_steps} steps that started an idle server)" if fit.idle_steps else ""
    lines.append(
        f"  from {fit.decode_steps} decode steps (rms {fit.residual_ms:.2f} ms around the line) and "
        f"{fit.admit_steps} admitting steps{idle}; {fit.queued_requests} requests waited for a place"
    )
    if fit.params.sim_accept_len is not None:
        lines.append(
            f"  the simulator realizes accept_len {fit.params.accept_len:.2f} on this workload's prompts "
            f"at its setting {fit.params.sim_accept_len:.2f} (calibrated)"
        )
    if fit.accept_from_counters is not None:
        lines.append(
            f"  the server's counters: accept_len {fit.accept_from_counters:.2f} (1 + accepted / drafts)"
        )
    lines += [f"  note: {n}" for n in fit.notes]
    lines.append(f"  simulator settings: {sim_file} (llmload sweep --sim-file {sim_file})")
    return lines


def _header(keys: Sequence[str], model: str, change: str, wide: bool = True) -> list[str]:
    if wide:
        return ["conc"] + [f"{SHOWN[k]} {part}" for k in keys for part in ("meas", model, change)]
    return ["conc"] + [part for k in keys for part in (SHOWN[k], model, change)]


def _figure_cells(row: TwinRow, keys: Sequence[str]) -> list[str]:
    """Each figure's measured, model and change-% cells."""
    errors = row.errors()
    cells = []
    for k in keys:
        cells += [
            fmt_num((row.measured or {}).get(k)),
            fmt_num(row.model.get(k)),
            fmt_num(errors.get(k), sign=True),
        ]
    return cells


def replay_table(rows: Sequence[TwinRow], fmt: str, wide: bool = False) -> str:
    """Measured, twin and error % of each figure, rung by rung (`!`: a rung not every request of
    which completed); 100 columns unless `wide` (every figure)."""
    keys = _keys(rows, wide)
    body = [[str(r.conc) + ("!" if r.partial else ""), *_figure_cells(r, keys)] for r in rows]
    return grid(_header(keys, "twin", "err%", wide), body, fmt, align="right")


def prediction_table(
    rows: Sequence[TwinRow],
    params: TwinParams,
    change: Change,
    fmt: str,
    steps: Mapping[int, RungSteps] | None = None,
    wide: bool = False,
) -> str:
    """Measured, predicted and gain % of each figure, and the Amdahl bound on the rung's measured
    step (`steps` by rung index: the first rung of its conc) when the change is a component made
    faster; `*`: extrapolated."""
    keys = _keys(rows, wide)
    header = _header(keys, "pred", "gain%", wide)
    if change.cost is not None:
        header.append("amdahl%")
    body = []
    for r in rows:
        cells = [str(r.conc) + ("*" if r.extrapolated else ""), *_figure_cells(r, keys)]
        if change.cost is not None:
            bound = amdahl_bound(r, params, change, step_at(steps or {}, r.conc))
            cells.append(fmt_pct(bound, sign=True))
        body.append(cells)
    out = grid(header, body, fmt, align="right")
    if any(r.extrapolated for r in rows):
        out += "\n*: extrapolated (a rung the run did not measure)"
    return out


def _gain_cell(r: RungDecision) -> str:
    """A rung's predicted gain with its interval, as the decision's line writes them."""
    return "-" if r.gain is None else f"{pct(r.gain)} [{pct(r.low)}, {pct(r.high)}]"


def decision_table(decision: Decision, fmt: str) -> str:
    """The decision block: per production rung the measured step, the bound, the predicted gain
    with its interval, TTFT and TPOT with theirs, and the verdict; then the decision's line."""
    header = ["conc", "step_ms", "bound%", "agg gain% [95%]", "ttft_p50 [95%]", "tpot_p50 [95%]", "verdict"]
    body = []
    for r in decision.rungs:
        body.append(
            [
                str(r.conc),
                fmt_num(r.step_ms),
                pct(r.bound),
                _gain_cell(r),
                figure_cells(r.figures, "ttft_p50_ms", 0),
                figure_cells(r.figures, "tpot_p50_ms", 1),
                verdict_cell(r),
            ]
        )
    return grid(header, body, fmt, align="right") + "\n" + f"decision: {decision.line}"


def verdict_cell(r: RungDecision) -> str:
    """A production rung's verdict, and whether it is past the ladder's knee (queueing)."""
    return f"{r.verdict}, queueing" if r.queueing else r.verdict


def decision_table_html(decision: Decision) -> str:
    """The decision as an HTML table (a row a production rung) and its line."""
    import html

    header = ["conc", "step_ms", "bound %", "agg tok/s gain % [95 %]", "TTFT p50 ms [95 %]"]
    header += ["TPOT p50 ms [95 %]", "verdict"]
    rows = []
    for r in decision.rungs:
        cells = [str(r.conc), fmt_num(r.step_ms), pct(r.bound), _gain_cell(r)]
        cells += [figure_cells(r.figures, "ttft_p50_ms", 0), figure_cells(r.figures, "tpot_p50_ms", 1)]
        cells.append(verdict_cell(r))
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
    return (
        f"<table class='decision'>{head}{''.join(rows)}</table>"
        f"<p><b>decision:</b> {html.escape(decision.line)}</p>"
    )


DECISION_STYLE = (
    "table.decision{border-collapse:collapse}"
    "table.decision td,table.decision th{padding:.2em .8em;text-align:right}"
    "table.decision tr:nth-child(even){background:#f4f4f4}"
)


def decision_html(decision: Decision, title: str) -> str:
    """The decision as a self-contained HTML page: a real table, then the decision's line."""
    import html

    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>body{{font-family:sans-serif;margin:2em}}{DECISION_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{decision_table_html(decision)}</body></html>\n"
    )


def render_json(document: Mapping[str, Any]) -> str:
    """The `--format json` document (paths as strings; a non-finite number is an error)."""
    return json.dumps(document, indent=2, allow_nan=False, default=str)
