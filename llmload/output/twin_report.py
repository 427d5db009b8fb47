"""The what-if twin's report (`llmload twin`): the fitted parameters, the measured-vs-twin table of
the replay and the prediction's table, in table or markdown, and the JSON document. The figures,
the verdict and the change are llmload.analysis.twin.replay's; this module only lays them out."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmload.analysis.twin.fit import TwinFit, TwinParams
from llmload.analysis.twin.replay import FIGURES, SHOWN, Change, TwinRow, amdahl_bound
from llmload.output.grid import report_grid
from llmload.output.table import fmt_num


def _num(value: float | None, decimals: int = 1) -> str:
    # a non-finite figure (a ratio over no time) is shown as missing, where fmt_num would print inf
    return fmt_num(value if value is None or math.isfinite(value) else None, decimals)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _keys(rows: Sequence[TwinRow]) -> list[str]:
    present = {k for r in rows for k in r.model} | {k for r in rows for k in (r.measured or {})}
    return [k for k in FIGURES if k in present]


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


def _header(keys: Sequence[str], model: str, change: str) -> list[str]:
    return ["conc"] + [f"{SHOWN[k]} {part}" for k in keys for part in ("meas", model, change)]


def _figure_cells(row: TwinRow, keys: Sequence[str]) -> list[str]:
    """Each figure's measured, model and change-% cells."""
    errors = row.errors()
    cells = []
    for k in keys:
        cells += [_num((row.measured or {}).get(k)), _num(row.model.get(k)), _pct(errors.get(k))]
    return cells


def replay_table(rows: Sequence[TwinRow], fmt: str) -> str:
    """Measured, twin and error % of each figure, rung by rung (`!`: a rung not every request of
    which completed)."""
    keys = _keys(rows)
    body = [[str(r.conc) + ("!" if r.partial else ""), *_figure_cells(r, keys)] for r in rows]
    return report_grid(_header(keys, "twin", "err%"), body, fmt, stralign="right")


def prediction_table(rows: Sequence[TwinRow], params: TwinParams, change: Change, fmt: str) -> str:
    """Measured, predicted and gain % of each figure, and the Amdahl bound when the change is a
    component made faster."""
    keys = _keys(rows)
    header = _header(keys, "pred", "gain%")
    if change.cost is not None:
        header.append("amdahl%")
    body = []
    for r in rows:
        cells = [str(r.conc) + (" (extrapolated)" if r.extrapolated else ""), *_figure_cells(r, keys)]
        if change.cost is not None:
            bound = amdahl_bound(r, params, change)
            cells.append(_pct(None if bound is None else bound * 100.0))
        body.append(cells)
    return report_grid(header, body, fmt, stralign="right")


def render_json(document: Mapping[str, Any]) -> str:
    """The `--format json` document (paths as strings; a non-finite number is an error)."""
    return json.dumps(document, indent=2, allow_nan=False, default=str)
