"""What the master (or the local process) knows about the ladder run in progress, and its run file.

Owns `RunState`: the run's configuration, model and files, its stages and their protocol
(`llmload.loadgen.run.stage_protocol`), its id (`run_id`, made once at the run's start and stamped on
every record and on the run file, so a file holding two runs, or a run file of another run, is told
apart from one run), and the list of sinks each record goes to (`receive`); and `<prefix>_run.json`
(`write_run_file`, through `write_run_json`), rewritten whole at every stage boundary, once more,
finished, at the end, and at every error the run records (`llmload.loadgen.run.error_log`: its `errors`).
A run is made by `llmload.loadgen.run.run_start.begin_run`; its sinks are
`llmload.loadgen.run.record_sinks`'s, the capacity search's (`llmload.loadgen.run.capacity_probes`), the
over-saturation watch's (`llmload.loadgen.run.fall_watch`) and the web UI's (`LadderShape.record_hooks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmload.core.config import SweepConfig
from llmload.core.files.records import RecordWriter, RequestRecord, new_run_id
from llmload.core.files.run_files import RunFiles, write_run_json
from llmload.loadgen.run.capacity_probes import CapacityProbes
from llmload.loadgen.run.clock_sync import ClockSync
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.fall_watch import FallWatch
from llmload.loadgen.run.messages import Stage, config_to_dict
from llmload.loadgen.run.precision_stop import PrecisionStop
from llmload.loadgen.run.record_sinks import RecordSink, RungReconciler
from llmload.loadgen.run.stage_plan import expected_requests
from llmload.loadgen.run.stage_protocol import StageProgress, StageProtocol, start_spread

RecordHook = Callable[["RunState", RequestRecord], None]
"""A sink added from outside the run (`LadderShape.record_hooks`, e.g. the web UI's tab): called with
the run and the record, after the run's own sinks."""


@dataclass(slots=True)
class RunState:
    """Everything the master knows about the run in progress."""

    config: SweepConfig
    host: str
    model: str
    writer: RecordWriter
    files: RunFiles  # the run's files; the records file may be elsewhere (--records)
    stages: list[Stage]
    protocol: StageProtocol
    reconciler: RungReconciler  # token reconciliation per rung (also one of the sinks)
    errors: RunErrors  # what the run ended with or reported, in its run file
    sinks: list[RecordSink] = field(default_factory=list)  # what happens to each record, in order
    all_done_at: float | None = None
    health: RecordWriter | None = None  # the generator's health samples (llmload.analysis.run.health)
    probes: CapacityProbes | None = None  # mode: capacity: the search and its running probe
    precision: PrecisionStop | None = None  # `precision`: the live end of each rung (also a sink)
    falls: FallWatch | None = None  # a concurrency ladder's watch for over-saturation (its early stop)
    workload: dict[str, Any] = field(default_factory=dict)  # Stage fields of every stage: calibration, run id
    run_id: str = field(default_factory=new_run_id)  # every record's and the run file's `run_id`
    finished: bool = False  # the ladder's last stage finished (kept by every later rewrite)
    prompts: dict[str, int] | None = None  # what a prompt may share with another (Workload.shared_prefix)
    clocks: ClockSync | None = None  # a master's measurements of its workers' clocks

    @property
    def progress(self) -> list[StageProgress]:
        return self.protocol.progress

    @property
    def current(self) -> StageProgress | None:
        return self.protocol.current

    def receive(self, record: RequestRecord | dict[str, Any]) -> None:
        """A record from a user of any process, handed to each sink: from this process the record
        itself, from a worker its dict (decoded once, here). Either ends with this run's id (the
        master's run, whichever worker sent it, of this run's stages or not, of any version)."""
        if isinstance(record, dict):
            record["run_id"] = self.run_id
            record = RequestRecord.from_dict(record)
        elif record.run_id != self.run_id:  # a user still on a stage of an earlier run
            record = dataclasses.replace(record, run_id=self.run_id)
        for sink in self.sinks:
            sink(record)

    def write_run_file(self, finished: bool = False) -> None:
        """The run file as the run stands; `finished`: the ladder is done (from now on)."""
        self.finished = self.finished or finished
        data = {
            "run_id": self.run_id,
            "host": self.host,
            "model": self.model,
            "config": config_to_dict(self.config),
            "records": str(self.writer.path),
            "finished": self.finished,
            "prompts": self.prompts,
            "stages": [
                {
                    "rung": p.stage.rung,
                    "phase": p.stage.phase,
                    "users": p.stage.users,
                    "name": p.stage.name,
                    "expected_requests": expected_requests(p.stage, self.config),
                    "started": p.started,
                    "finished": p.finished,
                    "records": p.records,
                    "start": start_spread(p.stage.start_at, p.first_sends) if p.stage.rate is None else None,
                }
                for p in self.progress
                if p.stage.start_at is not None  # announced only: no request was sent
            ],
            "errors": self.errors.as_json(),
            # the ladder stopped early, over-saturated: the line that says so (llmload.loadgen.run.fall_watch)
            "stopped_early": None if self.falls is None else self.falls.line,
            # each worker's clock minus the master's, every time it was measured (clock_sync)
            "clock_offsets": self.clocks.as_json() if self.clocks is not None else {},
        }
        write_run_json(self.files.run, data)

    def close(self) -> None:
        """End the run's files. A rung whose users were all done with every record in when the
        run stopped is written finished in the run file. Every file is closed; then the first
        OSError is raised."""
        failed: OSError | None = None
        closes: list[Callable[[], None]] = [self.writer.close]
        closes += [self.health.close] if self.health is not None else []
        if self.protocol.settle() is not None:
            closes.insert(0, self.write_run_file)
        for close in closes:
            try:
                close()
            except OSError as e:
                failed = failed or e
        if failed is not None:
            raise failed
