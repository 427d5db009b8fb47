"""The decision's rungs (`llmload.analysis.twin.decision`) from what the twin measured and predicted.

From a run (`run_decision`): per production rung, its measured step (the first measured rung of
that concurrency, `llmload.analysis.run.steps`), the Amdahl bound of the change on it
(`llmload.analysis.twin.replay.change_bound`, the one bound), the component's cost at the rung's
batch, and, when the twin fits, the predicted gain in aggregate tok/s with its interval (the
prediction's figure over the measured one, minus 1); the rungs past the measured ladder's knee
(llmload.analysis.knee) are queueing. From a table typed in by hand
(`table_decision`): the bound of `llmload budget`'s rows alone. Both raise ValueError (one line)
for production rungs (--at) that are not rungs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llmload.analysis.budget import BudgetRow
from llmload.analysis.knee import Knee, knee_of
from llmload.analysis.run.steps import RungSteps
from llmload.analysis.twin.decision import Decision, RungDecision, decide, production
from llmload.analysis.twin.replay import Change, RungFigures, TwinRow, change_bound, step_at

Intervals = Mapping[int, Mapping[str, tuple[float, float, float]]]  # by predicted rung: figure -> (v, lo, hi)
NOT_FITTED = "the twin does not fit the run (the verdict above says why)"
TABLE_ONLY = "a table holds no records: the predicted figures need a run (llmload twin RUN)"


def run_decision(
    change: Change,
    measured: Sequence[RungFigures],
    prediction: Sequence[TwinRow] | None,
    intervals: Intervals,
    steps: Mapping[int, RungSteps],
    fits: bool,
    at: Sequence[int] | None,
    worth: float,
    requests: Mapping[int, int] | None = None,
    knee: Knee | None = None,
) -> Decision:
    """The decision at the production rungs `at` (default: every rung) from the measured steps
    (`steps` by rung index) and the prediction (its rows and their intervals); `requests`: each
    concurrency's completed requests in the measured run (a "cannot tell" says how many more
    would have decided it); `knee`: the measured ladder's, whose rungs past it are queueing."""
    concs = [r.conc for r in measured] + [r.conc for r in prediction or []]
    by_conc = {r.conc: r for r in reversed(prediction or [])}
    rungs = []
    for conc in production(concs, at):
        s = step_at(steps, conc)
        step_ms = s.step_ms if s is not None else None
        mean_ms = s.step_mean_ms if s is not None else None
        bound = (
            None if mean_ms is None or s is None or not s.batch else change_bound(change, mean_ms, s.batch)
        )
        cost = change.cost.cost_ms(s.batch) if change.cost is not None and s is not None and s.batch else None
        row = by_conc.get(conc) if fits else None
        gain = low = high = None
        figures: dict[str, tuple[float, float, float]] = {}
        if row is not None:
            figures = dict(intervals.get(row.rung, {}))
            meas = (row.measured or {}).get("agg_tok_s")
            if meas and "agg_tok_s" in figures:
                v, lo, hi = figures["agg_tok_s"]
                gain, low, high = v / meas - 1.0, lo / meas - 1.0, hi / meas - 1.0
        done = (requests or {}).get(conc)
        queueing = knee is not None and knee.past(conc)
        rungs.append(
            RungDecision(
                conc, step_ms, cost, bound, gain, low, high, figures, requests=done, queueing=queueing
            )
        )
    return decide(rungs, worth, None if fits else NOT_FITTED, None if knee is None else knee.as_dict())


def table_decision(rows: Sequence[BudgetRow], at: Sequence[int] | None, worth: float) -> Decision:
    """What a table alone answers: the bound on each production rung's step (its budget row), and
    the knee of its rows' agg tok/s."""
    chosen = production([r.conc for r in rows], at)
    knee = knee_of((r.conc, r.agg_tok_s) for r in rows)
    rungs = [
        RungDecision(
            r.conc,
            r.step_ms,
            r.component_ms,
            r.gain_speedup if r.gain_speedup is not None else r.gain_free,
            queueing=knee is not None and knee.past(r.conc),
        )
        for r in rows
        if r.conc in chosen
    ]
    return decide(rungs, worth, TABLE_ONLY, None if knee is None else knee.as_dict())
