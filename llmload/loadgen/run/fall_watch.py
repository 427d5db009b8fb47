"""Over-saturation on the master: a concurrency ladder whose throughput falls stops early.

Owns `FallWatch`: as a record sink it tallies the running rung's measured records (its sweep row,
`llmload.analysis.run.rung_tally.RungTally.row`: the table's own agg tok/s); `finished` adds each
finished rung's (users, agg tok/s) to the ladder's curve, and when the curve falls by the rule of
`llmload.analysis.knee.falling` (throughput falling over consecutive rungs beyond noise) it drops
the stages not yet announced and keeps the one line that says so (`line`: in the run file, which
the sweep table prints under its table). Concurrency ladders only (rate, capacity, trace and
soak runs keep their own ends), and only with `stop_on_fall` (the default).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from llmload.analysis.knee import FALL_PCT, FALLS, falling
from llmload.analysis.run.rung_tally import RungTally
from llmload.core.config import SweepConfig
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE, WARMUP_RUNG
from llmload.loadgen.run.stage_protocol import StageProgress

log = logging.getLogger("llmload")


class WatchedRun(Protocol):
    """What the watch needs of the run (`llmload.loadgen.run.run_state.RunState`)."""

    stages: list[Any]

    @property
    def progress(self) -> list[StageProgress]: ...


def watches(config: SweepConfig) -> bool:
    """Whether a run of `config` is watched: a concurrency ladder of two or more rungs that may stop."""
    return (
        config.stop_on_fall and config.mode == "concurrency" and config.soak is None and len(config.rungs) > 1
    )


class FallWatch:
    """The ladder's curve so far and the stop it may call (module docstring)."""

    def __init__(self) -> None:
        self.tallies: dict[int, RungTally] = {}  # the running rungs' records, by rung index
        self.points: list[tuple[int, float]] = []  # (users, agg tok/s) of each finished rung
        self.line: str | None = None  # the stop, said once

    def __call__(self, rec: RequestRecord) -> None:
        if rec.phase == MEASURE_PHASE and rec.rung != WARMUP_RUNG:
            tally = self.tallies.get(rec.rung)
            if tally is None:
                tally = self.tallies[rec.rung] = RungTally(rec.rung, rec.users, itl=False)
            tally.add(rec)

    def finished(self, run: WatchedRun, progress: StageProgress) -> None:
        """A finished stage: a measured rung's figure joins the curve; a falling curve drops the
        stages not yet run."""
        stage = progress.stage
        tally = self.tallies.pop(stage.rung, None)
        if stage.phase != MEASURE_PHASE or stage.rung == WARMUP_RUNG or tally is None or self.line:
            return
        self.points.append((stage.users, tally.row().agg_tok_s))
        left = run.stages[len(run.progress) :]
        if not left or not falling(self.points):
            return
        del run.stages[len(run.progress) :]
        not_run = ", ".join(s.name for s in left if s.phase == MEASURE_PHASE)
        shown = ", ".join(f"{users} ({rate:.1f})" for users, rate in self.points[-(FALLS + 1) :])
        self.line = (
            f"the ladder stopped early: agg tok/s fell more than {FALL_PCT:g} % on each of the last "
            f"{FALLS} rungs as users rose (conc (tok/s): {shown}): the server is over-saturated, "
            f"past its knee; not run: {not_run}. Read the knee below, rerun with rungs up to it, or "
            "with stop_on_fall: false to measure every rung"
        )
        log.warning("llmload: %s", self.line)
