"""The report of `llmload compare` in table or markdown: the speed comparison of
llmload.analysis.compare (each figure's change with its interval, and the verdict, rung by rung)
and under it the output-identity section of llmload.analysis.output_identity."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.compare import FIGURES, IMPROVED, REGRESSED, TOO_FEW, Change, Comparison, RungComparison
from llmload.analysis.output_identity import OutputIdentity, RungOutputs
from llmload.core.names import rung_name
from llmload.output.toolkit.cells import fmt_pct
from llmload.output.toolkit.grid import grid

NARROW = ("agg_tok_s", "ttft_p50_ms", "tpot_p50_ms")  # the figures of the 100-column table


def _cell(c: Change) -> str:
    if c.change is None:
        return "-"
    if c.low is None or c.high is None:
        return f"{fmt_pct(c.change, sign=True)}%"
    mark = {IMPROVED: "+", REGRESSED: "!"}.get(c.verdict, "")
    return f"{fmt_pct(c.change, sign=True)}% [{fmt_pct(c.low, sign=True)},{fmt_pct(c.high, sign=True)}]{mark}"


def _verdict_cell(r: RungComparison) -> str:
    if r.withheld:
        return "withheld"
    return r.verdict.replace(f"{TOO_FEW} ", "too few ")


def rung_notes(cmp: Comparison) -> list[str]:
    """The rungs too few requests could judge (their change shown) and the withheld verdicts."""
    out = []
    for r in cmp.rungs:
        name = rung_name(r.rung, r.conc)
        agg = next((c for c in r.changes if c.figure == "agg_tok_s"), None)
        shown = "" if agg is None or agg.change is None else f"agg_tok_s {fmt_pct(agg.change, sign=True)} %"
        if r.judged.startswith(TOO_FEW):
            out.append(f"{name}: {r.judged}: {shown or 'no change measured'} (no interval, no verdict)")
        if r.withheld:
            out.append(
                f"{name}: verdict withheld ({r.withheld}): its figures say {r.judged}; "
                "--fail-on-regression does not count it"
            )
    return out


def render_comparison(cmp: Comparison, fmt: str = "table", *, wide: bool = False) -> str:
    """Per rung: each figure's change with its interval, and the verdict (100 columns; `wide`:
    every figure)."""
    shown = [f.name for f in FIGURES if wide or f.name in NARROW]
    header = ["rung", "n", *shown, "verdict"]
    body = []
    for r in cmp.rungs:
        cells = [_cell(c) for c in r.changes if c.figure in shown]
        body.append(
            [rung_name(r.rung, r.conc), f"{r.base_requests}/{r.cand_requests}", *cells, _verdict_cell(r)]
        )
    lines = [grid(header, body, fmt)]
    lines.append(
        f"change = candidate / base - 1 [{cmp.confidence * 100:g} % interval: bootstrap over requests, "
        f"{cmp.resamples} resamples, widened by repeated rungs]; a verdict needs the whole interval on "
        f"one side of 0 and |change| >= {cmp.threshold * 100:g} %; TTFT only with repeated rungs"
        "  (+ improved, ! regressed)"
    )
    lines += rung_notes(cmp)
    lines += [f"note: {u}" for u in cmp.unmatched]
    return "\n".join(lines)


def render_outputs(result: OutputIdentity, fmt: str = "table") -> list[str]:
    """The section under the speed comparison: a row per matched rung, then the verdict."""
    lines = [
        "",
        "outputs: each candidate request against the base request with the same prompt at the same place",
    ]
    if not result.reasons:
        header = ["rung", "compared", "differing", "first_diff_p50", "unmatched cand/base"]
        lines.append(grid(header, [_outputs_row(r) for r in result.rungs], fmt))
    lines.append(result.summary())
    return lines


def _outputs_row(r: RungOutputs) -> Sequence[str]:
    median = "-" if r.first_diff_median is None else f"{r.first_diff_median:g} {r.unit}"
    return [
        rung_name(r.rung, r.conc),
        str(r.compared),
        _differing_cell(r),
        median,
        f"{r.cand_unmatched}/{r.base_unmatched}",
    ]


def _differing_cell(r: RungOutputs) -> str:
    """A rung's differing requests, and which part of them changed when it is not the answer."""
    parts = [f"{r.reasoning_only} reasoning only"] if r.reasoning_only else []
    if r.tool_calls_changed:
        parts.append(f"{r.tool_calls_changed} tool calls")
    return f"{r.differing} ({', '.join(parts)})" if parts else str(r.differing)
