"""What `llmload twin` prints and writes once its replays are done, as one piece.

`Shown`: everything the report shows (the replay's rows and verdict, the prediction, the change,
the measured steps by rung index, the intervals, the decision); `render_twin` lays it out as the
JSON document or as text (`llmload.output.twin_report`'s tables); `render_fit` is the report of
`--fit-only`; `write_decision` writes the decision beside the replays (decision.json and its
HTML page, `llmload.core.files.run_files`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.analysis.run.steps import RungSteps
from llmload.analysis.twin.decision import Decision
from llmload.analysis.twin.fit import TwinFit, TwinParams
from llmload.analysis.twin.replay import Change, TwinRow, Verdict, amdahl_bound, row_dict, step_at
from llmload.core.files import run_files
from llmload.output.twin_report import (
    decision_html,
    decision_table,
    fit_lines,
    params_line,
    prediction_table,
    render_json,
    replay_table,
)


@dataclass(frozen=True, slots=True)
class Shown:
    """What the twin prints after its replays."""

    rows: list[TwinRow]
    verdict: Verdict
    prediction: list[TwinRow] | None
    predicted: TwinParams
    change: Change
    sim_file: Path
    steps: dict[int, RungSteps]  # by measured rung index
    intervals: dict[int, dict[str, tuple[float, float, float]]]
    decision: Decision | None


def render_fit(fmt: str, fit: TwinFit, sim_file: Path) -> str:
    """The fit alone (--fit-only): its parameters and whether the model holds."""
    if fmt == "json":
        return render_json({"fit": fit.as_dict(), "sim_file": str(sim_file)})
    lines = fit_lines(fit, sim_file)
    if fit.problems:
        lines.append("the model does not hold: " + "; ".join(fit.problems))
    return "\n".join(lines)


def render_twin(fmt: str, fit: TwinFit, shown: Shown, wide: bool) -> str:
    """The fit, the replay against the run, the prediction (when the twin fits) and the decision."""
    if fmt == "json":
        return render_json(_document(fit, shown))
    verdict, prediction, change = shown.verdict, shown.prediction, shown.change
    lines = fit_lines(fit, shown.sim_file) + ["", "measured vs twin (replay of the run's ladder):"]
    lines += [replay_table(shown.rows, fmt, wide), verdict.line()]
    if prediction is not None:
        lines.append("")
        if not verdict.fits:
            lines.append(f"no prediction ({change.describe()}): the twin does not fit the run")
        else:
            lines.append(f"predicted with {change.describe()}: {params_line(shown.predicted)}")
            lines.append(prediction_table(prediction, shown.predicted, change, fmt, shown.steps, wide))
            if change.cost is not None:
                lines.append("amdahl%: the bound on the rung's measured step (llmload budget)")
    if shown.decision is not None:
        lines += ["", decision_table(shown.decision, fmt)]
    return "\n".join(lines)


def _document(fit: TwinFit, shown: Shown) -> dict[str, Any]:
    verdict, prediction = shown.verdict, shown.prediction
    doc: dict[str, Any] = {
        "fit": fit.as_dict(),
        "sim_file": str(shown.sim_file),
        "rows": [row_dict(r, "twin") for r in shown.rows],
        "verdict": {"fits": verdict.fits, "breaks": verdict.breaks},
        "steps": {str(rung): s.as_dict() for rung, s in shown.steps.items()},
    }
    if prediction is not None:
        rows = None
        if verdict.fits and prediction:
            rows = [
                row_dict(r, "predicted")
                | {"interval": {k: [lo, hi] for k, (_, lo, hi) in shown.intervals.get(r.rung, {}).items()}}
                | {"amdahl_pct": _bound_pct(r, shown)}
                for r in prediction
            ]
        doc["prediction"] = {
            "change": shown.change.describe(),
            "parameters": shown.predicted.as_dict(),
            "rows": rows,
        }
    if shown.decision is not None:
        doc["decision"] = shown.decision.as_dict()
    return doc


def _bound_pct(row: TwinRow, shown: Shown) -> float | None:
    bound = amdahl_bound(row, shown.predicted, shown.change, step_at(shown.steps, row.conc))
    return None if bound is None else bound * 100.0


def write_decision(run_dir: Path, decision: Decision, source: str) -> None:
    """The decision as decision.json and its HTML page, in the twin's folder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / run_files.DECISION).write_text(render_json(decision.as_dict()) + "\n")
    (run_dir / run_files.DECISION_HTML).write_text(
        decision_html(decision, f"llmload twin: the decision on {source}")
    )
