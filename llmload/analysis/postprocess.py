"""A finished (or crashed) run's files -> the sweep rows, metrics and warnings, in one call.

Reads `<prefix>_records.jsonl` (required), `<prefix>_run.json` (the ladder's own account: which
rungs finished; optional), `<prefix>_health.jsonl` (the generator's own health: saturated rungs
are flagged; optional) and Locust's `<prefix>_stats.csv` / `_failures.csv` (cross-check;
optional). Shared by `scripts/sweep_table.py`, `scripts/run_sweep.py` and the reports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.analysis.health import flag_saturated, health_path, read_health
from llmload.analysis.locust_csv import cross_check
from llmload.analysis.metrics import RungMetrics, all_rung_metrics
from llmload.analysis.production_traffic import replay_warnings, turn_metrics
from llmload.analysis.sweep_rows import Rung, SweepRow, group_rungs, sweep_rows
from llmload.core.records import RecordFileError, RequestRecord, read_records
from llmload.core.stats import DEFAULT_PERCENTILES
from llmload.output.table import render
from llmload.output.turn_table import render_turns


@dataclass(slots=True)
class RunResult:
    """Everything post-processing derived from one run."""

    prefix: str
    records: list[RequestRecord]
    rungs: list[Rung]
    rows: list[SweepRow]
    metrics: list[RungMetrics] | None
    warnings: list[str]
    run_info: dict[str, Any] | None  # the parsed <prefix>_run.json, when present


def read_run_info(prefix: str | Path) -> dict[str, Any] | None:
    """The ladder's run file, or None if absent or unreadable (a run killed while writing it)."""
    path = Path(f"{prefix}_run.json")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def unfinished_rungs(run_info: Mapping[str, Any] | None) -> set[int]:
    """Rungs the ladder started but did not finish (the run was stopped or killed mid-rung)."""
    if not run_info:
        return set()
    return {s["rung"] for s in run_info.get("stages", []) if s.get("finished") is None and s["rung"] >= 0}


def load_run(
    prefix: str | Path,
    *,
    with_metrics: bool = False,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: Mapping[str, float] | None = None,
    requests_per_user: int | None = None,
) -> RunResult:
    """Post-process a run; raises RecordFileError when there is nothing measured to show."""
    prefix = str(prefix)
    records_path = f"{prefix}_records.jsonl"
    records, skipped = read_records(Path(records_path))
    rungs = group_rungs(records)
    if not rungs:
        raise RecordFileError(f"{records_path}: no measured records")
    info = read_run_info(prefix)
    rows = sweep_rows(rungs, partial_rungs=unfinished_rungs(info), requests_per_user=requests_per_user)
    flag_saturated(rows, rungs, read_health(health_path(records_path)))
    if slo is None:  # the run's own `slo:` from its config file
        slo = {k: v for k, v in ((info or {}).get("config", {}).get("slo") or {}).items() if v is not None}
    metrics = all_rung_metrics(rungs, percentiles=percentiles, slo=slo) if with_metrics else None
    warnings = cross_check(prefix, rungs) + replay_warnings(rungs)  # trace replay: fell behind?
    if skipped:
        lines = ", ".join(map(str, skipped))
        warnings.insert(0, f"{records_path}: skipped {len(skipped)} unreadable lines: {lines}")
    return RunResult(prefix, records, rungs, rows, metrics, warnings, info)


def render_run(
    result: RunResult,
    fmt: str = "table",
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    wide: bool = False,
) -> str:
    """The run's table(s) in fmt, without the warnings; with session turns, the per-turn table."""
    text = render(result.rows, fmt, metrics=result.metrics, percentiles=percentiles, wide=wide)
    turns = render_turns(turn_metrics(result.records), fmt) if fmt in ("table", "markdown") else ""
    return f"{text}\n\n{turns}" if turns else text
