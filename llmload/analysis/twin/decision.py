"""The decision, stated: is a change worth it at the rungs the user calls production?

Per production rung (docs/integrate.md, "The decision"):
- the **bound**: the Amdahl gain of the change on the rung's measured step (llmload.analysis.budget
  on llmload.analysis.run.steps; the table's formula for a table typed in by hand). No change of
  the component can gain more end to end than it would in every step.
- the **prediction** (a run's records, the twin fits): the twin's predicted gain in aggregate tok/s
  with its interval (`prediction_intervals`), and the other figures beside.
- the rung's verdict against the threshold `worth` (a share: 0.05 = 5 %): "not worth it" when
  the bound is below it (no prediction needed) or the whole interval is below it; "worth it"
  when the whole interval is at or above it; else "cannot tell" (the interval holds the
  threshold, or no prediction: a table, or a twin that does not fit).

The decision: "worth it" when every production rung is; "not worth it" when any is not; else
"cannot tell". Production rungs past the ladder's knee (llmload.analysis.knee: where added users
stop adding throughput) are named as **queueing** in the line and marked in the table: added
users there wait for the server's batch, adding latency and no throughput. Exit codes
(llmload.core.exit_codes): 0, NOT_WORTH_IT, UNDECIDED (NO_FIT when the twin does not fit and the
bound cannot decide alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmload.analysis.interval import needed
from llmload.core.exit_codes import NO_FIT, NOT_WORTH_IT, OK
from llmload.core.exit_codes import UNDECIDED as UNDECIDED_EXIT

WORTH, NOT_WORTH, UNDECIDED = "worth it", "not worth it", "cannot tell"


@dataclass(frozen=True, slots=True)
class RungDecision:
    """One production rung: its step, the bound, the prediction and the verdict."""

    conc: int
    step_ms: float | None
    component_ms: float | None
    bound: float | None  # Amdahl gain on the measured step (a share)
    gain: float | None = None  # predicted agg tok/s gain
    low: float | None = None
    high: float | None = None
    figures: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # predicted (v, lo, hi)
    verdict: str = UNDECIDED
    requests: int | None = None  # the measured rung's completed requests (what its interval is over)
    queueing: bool = False  # past the ladder's knee


@dataclass(frozen=True, slots=True)
class Decision:
    worth: float
    rungs: list[RungDecision]
    verdict: str
    line: str
    why_not_predicted: str | None = None  # no prediction: a table, or the twin does not fit
    knee: dict[str, Any] | None = None  # the ladder's knee (llmload.analysis.knee.Knee.as_dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "line": self.line,
            "worth_pct": self.worth * 100.0,
            "why_not_predicted": self.why_not_predicted,
            "knee": self.knee,
            "rungs": [asdict(r) for r in self.rungs],
        }

    @classmethod
    def from_dict(cls, doc: Any) -> Decision:
        """The decision of `as_dict` (decision.json) read back; ValueError (one line) naming what
        is missing or malformed."""
        try:
            rungs = [
                RungDecision(
                    **{
                        **{k: r[k] for k in _RUNG_FIELDS if k not in ("figures", "requests", "queueing")},
                        "requests": r.get("requests"),
                        "figures": {k: _figure(v) for k, v in (r.get("figures") or {}).items()},
                        "queueing": r.get("queueing") is True,  # a decision from before the knee: none
                    }
                )
                for r in doc["rungs"]
            ]
            for r in rungs:
                _check_rung(r)
            if doc["verdict"] not in (WORTH, NOT_WORTH, UNDECIDED) or not isinstance(doc["line"], str):
                raise ValueError("its verdict or line is not the twin's")
            worth = float(doc["worth_pct"]) / 100.0
            why, knee = doc.get("why_not_predicted"), doc.get("knee")
            return cls(
                worth,
                rungs,
                doc["verdict"],
                doc["line"],
                why if isinstance(why, str) else None,
                knee if isinstance(knee, dict) else None,
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a decision of llmload twin ({type(e).__name__}: {e})") from None


_RUNG_FIELDS = RungDecision.__dataclass_fields__.keys()
_NUMBERS = ("step_ms", "component_ms", "bound", "gain", "low", "high")


def _figure(value: Any) -> tuple[float, float, float]:
    v, lo, hi = (float(x) for x in value)
    if not all(math.isfinite(x) for x in (v, lo, hi)):
        raise ValueError("a figure's interval is not finite")
    return v, lo, hi


def _check_rung(r: RungDecision) -> None:
    if not isinstance(r.conc, int) or isinstance(r.conc, bool) or r.conc < 1:
        raise ValueError(f"a rung's conc is not a concurrency: {r.conc!r}")
    for name in _NUMBERS:
        value = getattr(r, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise ValueError(f"a rung's {name} is not a number: {value!r}")
    if r.verdict not in (WORTH, NOT_WORTH, UNDECIDED):
        raise ValueError(f"a rung's verdict is not the twin's: {r.verdict!r}")
    if r.requests is not None and (not isinstance(r.requests, int) or isinstance(r.requests, bool)):
        raise ValueError(f"a rung's requests is not a count: {r.requests!r}")


def pct(share: float | None) -> str:
    """A gain as the decision prints it: +0.92 %, +28.1 %."""
    if share is None:
        return "-"
    value = share * 100.0
    return f"{value:+.2f}" if abs(value) < 10 else f"{value:+.1f}"


def _concs(rungs: Sequence[RungDecision]) -> str:
    concs = sorted({r.conc for r in rungs})
    return str(concs[0]) if len(concs) == 1 else ", ".join(map(str, concs))


def rung_verdict(bound: float | None, low: float | None, high: float | None, worth: float) -> str:
    if bound is not None and bound < worth:
        return NOT_WORTH
    if low is None or high is None:
        return UNDECIDED
    if high < worth:
        return NOT_WORTH
    return WORTH if low >= worth else UNDECIDED


def decide(
    rungs: Sequence[RungDecision],
    worth: float,
    why_not_predicted: str | None = None,
    knee: dict[str, Any] | None = None,
) -> Decision:
    """The rungs judged and the decision stated (module docstring); `knee`: the ladder's, whose
    rungs past it (`RungDecision.queueing`) the line names."""
    judged = [
        RungDecision(**{**asdict(r), "verdict": rung_verdict(r.bound, r.low, r.high, worth)}) for r in rungs
    ]
    threshold = f"threshold {worth * 100:g} %, --worth"
    verdicts = {r.verdict for r in judged}
    if NOT_WORTH in verdicts:
        nots = [r for r in judged if r.verdict == NOT_WORTH]
        bounded = [r for r in nots if r.bound is not None and r.bound < worth]
        if bounded:
            top = max(bounded, key=lambda r: r.bound or 0.0)
            share = (top.component_ms or 0.0) / (top.step_ms or math.inf)
            line = (
                f"not worth it: at most {pct(top.bound)} % at conc {_concs(nots)} (the component is "
                f"{share * 100:.2f} % of a {top.step_ms:.1f} ms step; {threshold})"
            )
        else:
            top = max(nots, key=lambda r: r.high or 0.0)
            line = (
                f"not worth it at conc {_concs(nots)}: {pct(top.gain)} % [{pct(top.low)}, {pct(top.high)}] "
                f"tok/s ({threshold})"
            )
        verdict = NOT_WORTH
    elif verdicts == {WORTH}:
        low = min(judged, key=lambda r: r.low or 0.0)
        line = (
            f"worth it at conc {_concs(judged)}: {pct(low.gain)} % [{pct(low.low)}, {pct(low.high)}] "
            f"tok/s at conc {low.conc} ({threshold})"
        )
        verdict = WORTH
    else:
        open_ = [r for r in judged if r.verdict == UNDECIDED]
        top = max(open_, key=lambda r: r.bound or 0.0)
        if why_not_predicted:
            line = (
                f"cannot tell at conc {_concs(open_)}: the bound allows up to {pct(top.bound)} %, and "
                f"{why_not_predicted} ({threshold})"
            )
        else:
            line = (
                f"cannot tell at conc {_concs(open_)}: {pct(top.gain)} % [{pct(top.low)}, {pct(top.high)}] "
                f"tok/s holds the threshold: its interval is wider than the margin{_more(open_, worth)} "
                f"({threshold})"
            )
        verdict = UNDECIDED
    queueing = [r for r in judged if r.queueing]
    if queueing and knee is not None:
        line += (
            f"; conc {_concs(queueing)} past the knee (conc {knee['conc']} [{knee['low']}, {knee['high']}]): "
            "queueing (added users there add latency, not tok/s)"
        )
    return Decision(worth, judged, verdict, line, why_not_predicted, knee)


def more_requests(r: RungDecision, worth: float) -> int | None:
    """How many more requests the rung would have needed for its interval to leave the threshold
    (its width scaling as 1 / sqrt(n): `llmload.analysis.interval.needed`); None without a
    prediction, a request count, or a margin (a gain at the threshold)."""
    if r.gain is None or r.low is None or r.high is None or not r.requests:
        return None
    margin, half = (r.gain - worth, r.gain - r.low) if r.gain >= worth else (worth - r.gain, r.high - r.gain)
    if margin <= 0:
        return None
    return max(0, math.ceil(needed(r.requests, half, margin) - 1e-9) - r.requests)


def _more(open_: Sequence[RungDecision], worth: float) -> str:
    """The decision's clause of the requests that would have decided it (the most any rung needs)."""
    counts = [more_requests(r, worth) for r in open_]
    if not counts or any(c is None for c in counts):
        return ""
    most = max(c for c in counts if c is not None)
    return f"; about {most} more requests per rung would decide it (the width scales as 1/sqrt(n))"


def decision_exit_code(decision: Decision, fits: bool) -> int:
    """The twin's exit code for its decision (module docstring): OK when worth it, NOT_WORTH_IT,
    else UNDECIDED, or NO_FIT when the twin does not fit and the bound cannot decide alone."""
    if decision.verdict == WORTH:
        return OK
    if decision.verdict == NOT_WORTH:
        return NOT_WORTH_IT
    return UNDECIDED_EXIT if fits else NO_FIT


def production(concs: Sequence[int], at: Sequence[int] | None) -> list[int]:
    """The production rungs: `at` (every one must be a rung), default every rung."""
    if not at:
        return sorted(set(concs))
    missing = sorted(set(at) - set(concs))
    if missing:
        raise ValueError(
            f"--at {','.join(map(str, at))}: no rung of conc {', '.join(map(str, missing))} "
            f"(rungs: {', '.join(map(str, sorted(set(concs))))}; --rungs predicts others)"
        )
    return sorted(set(at))


def figure_cells(figures: Mapping[str, tuple[float, float, float]], key: str, decimals: int = 1) -> str:
    if key not in figures:
        return "-"
    v, lo, hi = figures[key]
    return f"{v:.{decimals}f} [{lo:.{decimals}f}, {hi:.{decimals}f}]"
