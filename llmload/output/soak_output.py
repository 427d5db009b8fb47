"""A soak report's outputs: the windows as CSV and as a table, the verdict text, the PNG time
series, and `write_outputs()` which writes `<prefix>_soak_windows.csv`, `_soak.json`, `_soak.xml`
(JUnit) and `_soak.png` next to the run's other files.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from llmload.analysis.soak.verdict import SoakReport
from llmload.core.files.run_files import RunFiles
from llmload.output.junit import junit_xml
from llmload.output.toolkit.cells import fmt_num
from llmload.output.toolkit.figure import figure, save
from llmload.output.toolkit.grid import grid

COLUMNS = (
    "window",
    "start_s",
    "end_s",
    "requests",
    "failures",
    "tokens",
    "agg_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "gen_cpu_pct",
    "gen_rss_mb",
    "gen_lag_ms",
)
_DECIMALS = {"start_s": 0, "end_s": 0, "tpot_p50_ms": 2, "tpot_p99_ms": 2}


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "" if name.startswith("gen_") else "-"
    return str(value) if isinstance(value, int) else fmt_num(value, _DECIMALS.get(name, 1))


def windows_csv(report: SoakReport) -> str:
    """One row per window, full precision; empty cells for missing values."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for w in report.windows:
        writer.writerow({k: "" if v is None else v for k, v in w.row(report.t0).items()})
    return out.getvalue()


def render_text(report: SoakReport) -> str:
    """The windows table, the drifts, the checks and the verdict, for people."""
    rows = [[_cell(k, v) for k, v in w.row(report.t0).items()] for w in report.windows]
    parts = [grid(COLUMNS, rows, "table", align="right")] if rows else []
    parts.append(
        "windows by request end time; agg_tok_s = output tokens of requests completed in it / window"
    )
    if report.tail_requests:
        parts.append(f"{report.tail_requests} requests ended after the last full window (not judged)")
    for d in report.drifts.values():
        if d.pct_per_h is not None:
            level = f"{100 * report.soak.confidence:g} %"
            parts.append(
                f"drift {d.metric}: {d.pct_per_h:+.2f} %/h, {level} CI [{d.low:+.2f}, {d.high:+.2f}]"
                f" over {d.windows} windows"
            )
    check_rows = [[c.name, f"{c.limit:g}", fmt_num(c.observed, 3), c.status, c.detail] for c in report.checks]
    if check_rows:
        header = ["threshold", "limit", "observed", "status", "detail"]
        parts.append(grid(header, check_rows, "table", align=["left", "decimal", "decimal", "left", "left"]))
    verdict = f"verdict: {report.status.upper()} (exit code {report.exit_code})"
    parts.append(verdict + "".join(f"\n  {r}" for r in report.reasons))
    return "\n\n".join(parts)


def _series(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [math.nan if r[key] is None else r[key] for r in rows]


def write_png(report: SoakReport, path: Path) -> Path:
    """Time series of agg tok/s (with its trend), TTFT, TPOT, failures and the generator's CPU/RSS."""
    rows = [w.row(report.t0) for w in report.windows]
    minutes = [(r["start_s"] + r["end_s"]) / 120.0 for r in rows]
    fig = figure(10, 13)
    axes = fig.subplots(5, 1, sharex=True)
    ax = axes[0]
    ax.plot(minutes, _series(rows, "agg_tok_s"), "o-", label="agg tok/s")
    trend = report.drifts["tok_s"].trend
    if trend is not None:
        ax.plot(minutes, [trend.intercept + trend.slope * m * 60.0 for m in minutes], "--", label="trend")
    if report.soak.min_agg_tok_s is not None:
        ax.axhline(report.soak.min_agg_tok_s, color="red", lw=0.8, label="minimum")
    ax.set_ylabel("tok/s")
    ax.legend(loc="best")
    for ax, metric, limit in (
        (axes[1], "ttft", report.soak.max_ttft_p99_ms),
        (axes[2], "tpot", report.soak.max_tpot_p99_ms),
    ):
        for q in ("p50", "p99"):
            ax.plot(minutes, _series(rows, f"{metric}_{q}_ms"), "o-", label=f"{metric.upper()} {q}")
        if limit is not None:
            ax.axhline(limit, color="red", lw=0.8, label="p99 limit")
        ax.set_ylabel("ms")
        ax.legend(loc="best")
    axes[3].bar(minutes, _series(rows, "failures"), width=report.soak.window_s / 120.0, color="red")
    axes[3].set_ylim(bottom=0)
    axes[3].set_ylabel("failures")
    ax = axes[4]
    ax.plot(minutes, _series(rows, "gen_cpu_pct"), "g.-")
    ax.set_ylabel("generator CPU %", color="g")
    ax.set_ylim(bottom=0)
    rss = ax.twinx()
    rss.plot(minutes, _series(rows, "gen_rss_mb"), "m.-")
    rss.set_ylabel("generator RSS MB", color="m")
    rss.set_ylim(bottom=0)
    ax.set_xlabel("minutes since the soak started (window mid-time)")
    fig.suptitle(f"soak {report.prefix}: {report.status}")
    fig.tight_layout()
    return save(fig, path, dpi=80)


def write_outputs(report: SoakReport, *, png: bool = True) -> list[Path]:
    """Write the report's files next to the run's and return their paths."""
    run = RunFiles(Path(report.prefix))
    texts = {
        run.output("soak_windows.csv"): windows_csv(report),
        run.output("soak.json"): json.dumps(report.summary(), indent=1) + "\n",
        run.output("soak.xml"): junit_xml(report),
    }
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    written = list(texts)
    if png and report.windows:
        written.append(write_png(report, run.output("soak.png")))
    return written
