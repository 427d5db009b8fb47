"""How well a distributed run's worker clocks were known during each rung.

The master puts every worker's clock on its own (`llmload.loadgen.run.clock_sync`) and keeps each
measurement in the run file (`clock_offsets`: per worker, the master's time, the offset, its
uncertainty, the round trip). A rung's records and its common start are on the master's clock
within the uncertainty of the offsets in force while it ran: the latest measurement of each
worker at or before the rung's start (one is taken before every stage) and those taken during it.

Owns `rung_clock_uncertainty` (a rung's worst uncertainty, ms, and the worker it belongs to) and
`clock_notes`, the note under the table for each rung whose offsets were known to worse than
`NOTE_UNCERTAINTY_MS` or not measured at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.core.files.run_info import RunInfo
from llmload.core.names import MEASURE_PHASE

NOTE_UNCERTAINTY_MS = 1.0  # a rung whose worker offsets are uncertain by more is noted


def _in_force(history: Sequence[Mapping[str, Any]], start: float, end: float) -> list[Mapping[str, Any]]:
    """A worker's measurements that applied between start and end: the latest at or before start,
    and every one taken after it until end."""
    before = [h for h in history if h["t"] <= start]
    during = [h for h in history if start < h["t"] <= end]
    return before[-1:] + during


def rung_clock_uncertainty(
    offsets: Mapping[str, Sequence[Mapping[str, Any]]], start: float, end: float
) -> tuple[float | None, str | None]:
    """The worst uncertainty (ms) of the worker offsets in force over [start, end], and whose it is;
    inf for a worker whose offset had no measurement that answered; (None, None) without workers."""
    worst: tuple[float | None, str | None] = (None, None)
    for worker, history in offsets.items():
        applied = _in_force(history, start, end)
        answered = [h["uncertainty_ms"] for h in applied if h.get("uncertainty_ms") is not None]
        value = max(answered) if answered and len(answered) == len(applied) else float("inf")
        if worst[0] is None or value > worst[0]:
            worst = (value, worker)
    return worst


def clock_notes(run_info: RunInfo | None) -> list[str]:
    """One note for each rung of a distributed run whose worker clocks were known to worse than
    NOTE_UNCERTAINTY_MS (none for a local run, or a run file without measurements)."""
    if run_info is None or not run_info.clock_offsets:
        return []
    notes = []
    for stage in run_info.stages:
        if stage.phase != MEASURE_PHASE or stage.started is None:
            continue
        end = stage.finished or float("inf")
        worst, worker = rung_clock_uncertainty(run_info.clock_offsets, stage.started, end)
        if worst is None or worst <= NOTE_UNCERTAINTY_MS:
            continue
        known = "not measured" if worst == float("inf") else f"known only to +-{worst:.1f} ms"
        notes.append(
            f"{stage.name}: worker {worker}'s clock was {known} (its clock probes' "
            "round trips to the master): the rung's start and its times across workers may be off "
            "by that much; run the workers nearer the master, or less loaded"
        )
    return notes
