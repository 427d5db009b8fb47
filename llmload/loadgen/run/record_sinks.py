"""What the master (or the local process) does with each record it receives: the record sinks.

A run holds its sinks as a list (`RunState.sinks`, made by `llmload.loadgen.run.run_start.begin_run`),
in this order: the records writer's `write` (the records file), `RungReconciler` (the token
accounts of each measured rung, checked when the rung finishes), the capacity search's probe judge
(capacity mode: `llmload.loadgen.run.capacity_probes`), `FirstBadRequest` (the server's reason for the
first HTTP 400, recorded once as an error of the run), `RecordCounter` (the stage protocol's count,
which a stage waits on to finish), then the ones added from outside (`LadderShape.record_hooks`:
the web UI's `LiveSweep`). A sink is called with the record alone: each holds what it needs (the
writer, the configuration, the run's errors, the protocol) from its construction, so none of them
knows the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from llmload.analysis.run.reconcile import Tally, check_inputs, check_rung
from llmload.core.config import SweepConfig
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.stage_protocol import StageProgress, StageProtocol

RecordSink = Callable[[RequestRecord], None]
"""One thing the master does with every record (with the run's id, as written), in the order of
`RunState.sinks`."""


class RecordCounter:
    """One more record of its rung for the stage protocol (a stage finishes once all are in)."""

    def __init__(self, protocol: StageProtocol) -> None:
        self.protocol = protocol

    def __call__(self, rec: RequestRecord) -> None:
        self.protocol.recorded(rec.rung, rec.phase, time.time())


class RungReconciler:
    """Token reconciliation (llmload.analysis.run.reconcile): every measured record tallied into its
    rung as it arrives; a finished rung whose accounts do not add up, or whose inputs are off the
    asked lengths, is a problem (the run's exit code 3)."""

    def __init__(self, config: SweepConfig) -> None:
        self.config = config
        self.tallies: dict[int, Tally] = {}

    def __call__(self, rec: RequestRecord) -> None:
        if rec.phase == MEASURE_PHASE:
            self.tallies.setdefault(rec.rung, Tally()).add_record(rec)

    def problems(self, progress: StageProgress) -> list[tuple[str, str]]:
        """What does not add up in a finished stage, as (error kind, message); none for the warm-up
        and the determinism probes."""
        tally = self.tallies.get(progress.stage.rung)
        if progress.stage.phase != MEASURE_PHASE or tally is None:
            return []
        config, name = self.config, progress.stage.name
        found = []
        if problem := check_rung(
            name, tally, config.reconcile, ignore_eos=config.ignore_eos and not config.structured
        ):
            found.append(("reconciliation", f"token reconciliation failed: {problem}"))
        if missed := check_inputs(name, tally, config.input_tolerance):
            found.append(("input_lengths", f"input lengths not as asked: {missed}"))
        return found


class FirstBadRequest:
    """Records the server's reason for the run's first HTTP 400, once (the records hold every one)."""

    def __init__(self, errors: RunErrors) -> None:
        self.errors = errors
        self.told = False

    def __call__(self, rec: RequestRecord) -> None:
        if rec.outcome == "http_400" and not self.told:
            self.told = True
            reason = " ".join(str(rec.error or "no reason given").split())
            self.errors.record("http_400", f"the server answered HTTP 400 (bad request): {reason}")
