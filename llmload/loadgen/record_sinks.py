"""What the master (or the local process) does with each record it receives: the record sinks.

A run holds its sinks as a list (`RunState.sinks`, made by `llmload.loadgen.run_start.begin_run`),
in this order: `write_record` (the records file), `RungReconciler` (the token accounts of each
measured rung, checked when the rung finishes), the capacity search's probe judge (capacity mode:
`llmload.loadgen.capacity_probes`), `FirstBadRequest` (the server's reason for the first HTTP 400,
recorded once as an error of the run), `count_record` (the stage protocol's count, which a stage
waits on to finish), then the ones added from outside (`LadderShape.record_hooks`: the web UI's `LiveSweep`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from llmload.analysis.reconcile import Tally, check_inputs, check_rung
from llmload.core.config import SweepConfig
from llmload.core.names import WARMUP_RUNG
from llmload.core.records import RequestRecord
from llmload.loadgen.stage_protocol import StageProgress

if TYPE_CHECKING:
    from llmload.loadgen.run_state import RunState


def write_record(run: RunState, rec: RequestRecord) -> None:
    """The record, with the run's id: its own JSON, one line, flushed (`RecordWriter`)."""
    run.writer.write(rec)


def count_record(run: RunState, rec: RequestRecord) -> None:
    """One more record of its rung for the stage protocol (a stage finishes once all are in)."""
    run.protocol.recorded(rec.rung, time.time())


class RungReconciler:
    """Token reconciliation (llmload.analysis.reconcile): every measured record tallied into its
    rung as it arrives; a finished rung whose accounts do not add up, or whose inputs are off the
    asked lengths, is a problem (the run's exit code 3)."""

    def __init__(self, config: SweepConfig) -> None:
        self.config = config
        self.tallies: dict[int, Tally] = {}

    def __call__(self, run: RunState, rec: RequestRecord) -> None:
        if rec.rung != WARMUP_RUNG:
            self.tallies.setdefault(rec.rung, Tally()).add_record(rec)

    def problems(self, progress: StageProgress) -> list[tuple[str, str]]:
        """What does not add up in a finished stage, as (error kind, message); none for the warm-up."""
        tally = self.tallies.get(progress.stage.rung)
        if progress.stage.rung == WARMUP_RUNG or tally is None:
            return []
        config, name = self.config, progress.stage.name
        found = []
        if problem := check_rung(name, tally, config.reconcile, ignore_eos=config.ignore_eos):
            found.append(("reconciliation", f"token reconciliation failed: {problem}"))
        if missed := check_inputs(name, tally, config.input_tolerance):
            found.append(("input_lengths", f"input lengths not as asked: {missed}"))
        return found


class FirstBadRequest:
    """Records the server's reason for the run's first HTTP 400, once (the records hold every one)."""

    def __init__(self) -> None:
        self.told = False

    def __call__(self, run: RunState, rec: RequestRecord) -> None:
        if rec.outcome == "http_400" and not self.told:
            self.told = True
            reason = " ".join(str(rec.error or "no reason given").split())
            run.errors.record("http_400", f"the server answered HTTP 400 (bad request): {reason}")
