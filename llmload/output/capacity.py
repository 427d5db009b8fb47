"""Presentation of a capacity search (llmload.analysis.capacity): the answer, the probes table
with each percentile's confidence interval, JSON, and the plot of each SLO metric against
concurrency (or request rate) with its SLO line.

The text answer reads, for example:

    capacity: 11 users (p50 at 95 % confidence per probe; bracketed: 11 users pass, 12 fail)
    binding SLO: tpot_ms (p50 58.1 ms > 56 at 12 users)
    at capacity: 200.8 tok/s aggregate, 18.3 tok/s per request

An interval bound shown as `-` means the probe had too few requests to bound that side at the
confidence; a verdict with `~` was decided by the point estimate after `max_requests` requests;
`!` marks a rate probe whose arrivals waited for a client slot (`max_concurrency` too small).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from llmload.analysis.capacity import FAILURE_KEY, CapacityResult, Criterion, fmt_load
from llmload.output.toolkit.cells import fmt_num
from llmload.output.toolkit.figure import concurrency_axis, figure, save
from llmload.output.toolkit.grid import grid

FORMATS = ("table", "markdown", "json")
POINT_MARK = "~"
CLIENT_MARK = "!"


def _bound(value: float) -> str:
    return "-" if math.isinf(value) else fmt_num(value)


def _cell(c: Criterion) -> str:
    if c.key == FAILURE_KEY:
        return f"{fmt_num(c.point, 3)} [{fmt_num(c.lower, 3)}, {fmt_num(c.upper, 3)}] <= {c.limit:g}"
    return f"{fmt_num(c.point)} [{_bound(c.lower)}, {_bound(c.upper)}] <= {c.limit:g}"


def headline(result: CapacityResult) -> list[str]:
    """The answer in three lines (see the module docstring)."""
    pct = f"p{result.percentile:g}"
    lines = [
        f"capacity: {fmt_load(result.capacity)} {result.unit} ({pct} at {100 * result.confidence:g} % "
        f"confidence per probe; {result.reason})"
    ]
    if not result.complete:
        lines[0] += f" [search incomplete: the capacity is the largest {result.variable} that passed so far]"
    b = result.binding
    if b is not None:
        over = min(p.load for p in result.probes if p.verdict == "fail")
        value = f"{b.point:.3f}" if b.key == FAILURE_KEY else f"{pct} {fmt_num(b.point)} ms"
        lines.append(f"binding SLO: {b.key} ({value} > {b.limit:g} at {fmt_load(over)} {result.unit})")
    at = result.at_capacity
    if at is not None:
        lines.append(
            f"at capacity: {fmt_num(at.agg_tok_s)} tok/s aggregate, "
            f"{fmt_num(at.per_req_tok_s)} tok/s per request"
        )
    return lines


def render_capacity(result: CapacityResult, fmt: str = "table") -> str:
    """The answer and the probes table in `fmt` (one of FORMATS)."""
    if fmt == "json":
        return json.dumps(result.as_dict(), indent=2)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    keys = list(dict.fromkeys(c.key for p in result.probes for c in p.criteria))
    pct = f"p{result.percentile:g}"
    header = [
        "probe",
        "users" if result.variable == "concurrency" else "rate (req/s)",
        "requests",
        "verdict",
        *[k if k == FAILURE_KEY else f"{k} {pct} [CI]" for k in keys],
    ]
    body = []
    for i, p in enumerate(result.probes, start=1):
        cells = {c.key: _cell(c) for c in p.criteria}
        verdict = p.verdict + (POINT_MARK if p.by_point else "") + (CLIENT_MARK if p.client_limited else "")
        extended = f" ({len(p.rungs)} stages)" if p.extended else ""
        body.append(
            [str(i), fmt_load(p.load), f"{p.requests}{extended}", verdict, *[cells.get(k, "-") for k in keys]]
        )
    table = grid(header, body, fmt, align=["decimal"] * 3 + ["left"] * (len(header) - 3))
    notes = []
    if any(p.by_point for p in result.probes):
        notes.append(
            f"{POINT_MARK} the interval still straddled an SLO at max_requests: decided by the point estimate"
        )
    if any(p.client_limited for p in result.probes):
        notes.append(
            f"{CLIENT_MARK} arrivals waited for a client slot: TTFT and E2EL include that wait, which says "
            "nothing about the server (raise max_concurrency)"
        )
    if any(math.isinf(c.lower) or math.isinf(c.upper) for p in result.probes for c in p.criteria):
        notes.append("- too few requests to bound that side of the interval at this confidence")
    return "\n".join([*headline(result), "", table, *notes])


def capacity_plot(result: CapacityResult, path: Path) -> Path:
    """One panel per SLO metric: the percentile of each probe with its confidence interval as an
    error bar, against concurrency or rate, and the SLO as a horizontal line."""
    keys = [k for k in dict.fromkeys(c.key for p in result.probes for c in p.criteria) if k != FAILURE_KEY]
    fig = figure(8.0, 3.2 * max(1, len(keys)))
    for i, key in enumerate(keys):
        ax = fig.add_subplot(len(keys), 1, i + 1)
        # (load, point, lower, upper, verdict, limit) of each probe judged on this metric
        points = sorted(
            (p.load, c.point, c.lower, c.upper, p.verdict, c.limit)
            for p in result.probes
            for c in p.criteria
            if c.key == key and c.point is not None
        )
        top = 2 * max((pt[1] for pt in points), default=0.0)  # where an unbounded bar ends
        for verdict, color in (("pass", "tab:green"), ("fail", "tab:red")):
            chosen = [pt for pt in points if pt[4] == verdict]
            if chosen:
                ax.errorbar(
                    [load for load, *_ in chosen],
                    [point for _, point, *_ in chosen],
                    yerr=[
                        [point - max(lower, 0.0) for _, point, lower, *_ in chosen],
                        [max(min(upper, top) - point, 0.0) for _, point, _, upper, *_ in chosen],
                    ],
                    fmt="o",
                    color=color,
                    capsize=3,
                    label=verdict,
                )
        if points:
            limit = points[0][5]
            ax.axhline(limit, color="black", linestyle="--", linewidth=1, label=f"SLO {limit:g} ms")
        if result.capacity:
            label = f"capacity {fmt_load(result.capacity)}"
            ax.axvline(result.capacity, color="tab:blue", alpha=0.4, label=label)
        if result.variable == "concurrency":
            concurrency_axis(ax)
        else:
            ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(f"{key.removesuffix('_ms')} p{result.percentile:g} (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"Capacity search: p{result.percentile:g} with {100 * result.confidence:g} % intervals")
    fig.tight_layout()
    return save(fig, path)
