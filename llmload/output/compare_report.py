"""The report of `llmload compare` in table or markdown: the speed comparison of
llmload.analysis.compare (each figure's change with its interval, and the verdict, rung by rung)
and under it the output-identity section of llmload.analysis.output_identity."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.compare import FIGURES, IMPROVED, NOISE, REGRESSED, Change, Comparison
from llmload.analysis.output_identity import OutputIdentity, RungOutputs
from llmload.core.names import rung_name
from llmload.output.grid import report_grid


def _cell(c: Change) -> str:
    if c.change is None:
        return "-"
    if c.low is None or c.high is None:
        return f"{c.change * 100:+.1f}% [no interval]"
    mark = {IMPROVED: " +", REGRESSED: " !", NOISE: ""}[c.verdict]
    return f"{c.change * 100:+.1f}% [{c.low * 100:+.1f}, {c.high * 100:+.1f}]{mark}"


def render_comparison(cmp: Comparison, fmt: str = "table") -> str:
    """Per rung: each figure's change with its interval, and the verdict."""
    header = ["rung", "n base/cand", *(f.name for f in FIGURES), "verdict"]
    body = [
        [rung_name(r.rung, r.conc), f"{r.base_requests}/{r.cand_requests}", *map(_cell, r.changes), r.verdict]
        for r in cmp.rungs
    ]
    lines = [report_grid(header, body, fmt)]
    lines.append(
        f"change = candidate / base - 1 [{cmp.confidence * 100:g} % interval: bootstrap over requests, "
        f"{cmp.resamples} resamples, widened by repeated rungs]; a verdict needs the whole interval on "
        f"one side of 0 and |change| >= {cmp.threshold * 100:g} %; TTFT only with repeated rungs"
        "  (+ improved, ! regressed)"
    )
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
        lines.append(report_grid(header, [_outputs_row(r) for r in result.rungs], fmt))
    lines.append(result.summary())
    return lines


def _outputs_row(r: RungOutputs) -> Sequence[str]:
    median = "-" if r.first_diff_median is None else f"{r.first_diff_median:g} {r.unit}"
    return [
        rung_name(r.rung, r.conc),
        str(r.compared),
        f"{r.differing} ({r.reasoning_only} reasoning only)" if r.reasoning_only else str(r.differing),
        median,
        f"{r.cand_unmatched}/{r.base_unmatched}",
    ]
