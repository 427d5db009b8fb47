"""mode: capacity on the master: the search's probes run as stages, each judged from its records.

Owns the running search (`llmload.analysis.capacity.CapacitySearch`) of a capacity run:
`plan_next` appends the search's next probe to the run's stages (`llmload.loadgen.run.stage_plan.
probe_stage`), or logs the answer once the search is over or `capacity.max_duration_s` has passed;
as a record sink it keeps the running probe's measured records; `finished` judges a finished
probe from them and plans the next.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from llmload.analysis.capacity import CapacitySearch, fmt_load
from llmload.core.config import SweepConfig
from llmload.core.files.records import RequestRecord
from llmload.core.names import WARMUP_RUNG
from llmload.loadgen.run.messages import Stage
from llmload.loadgen.run.stage_plan import probe_stage
from llmload.loadgen.run.stage_protocol import StageProgress

log = logging.getLogger("llmload")


class ProbedRun(Protocol):
    """What the search needs of the run it plans probes for (`llmload.loadgen.run.run_state.RunState`)."""

    config: SweepConfig
    model: str
    stages: list[Stage]
    workload: dict[str, Any]

    @property
    def progress(self) -> list[StageProgress]: ...


class CapacityProbes:
    """The capacity search of one run, fed by its stages and records (see the module docstring)."""

    def __init__(self, search: CapacitySearch) -> None:
        self.search: CapacitySearch | None = search  # None once the answer is logged
        self.records: list[RequestRecord] = []  # the running probe's

    def __call__(self, rec: RequestRecord) -> None:
        if self.search is not None and rec.rung != WARMUP_RUNG:
            self.records.append(rec)

    def plan_next(self, run: ProbedRun) -> None:
        """Append the search's next probe to the stages, or log the answer when it is over."""
        assert self.search is not None
        elapsed = time.time() - run.progress[0].started if run.progress else 0.0
        limit = run.config.capacity.max_duration_s
        probe = self.search.next_probe() if elapsed <= limit else None
        if probe is None:
            result = self.search.result(None if elapsed <= limit else f"max_duration_s ({limit:g} s) reached")
            log.info("llmload: capacity %s %s (%s)", fmt_load(result.capacity), result.unit, result.reason)
            self.search = None
            return
        run.stages.append(
            probe_stage(run.config, run.model, run.stages, probe, self.search.rate, run.workload)
        )

    def finished(self, run: ProbedRun, progress: StageProgress) -> None:
        """A finished stage: a probe's is judged (llmload.analysis.capacity), then the next planned."""
        stage = progress.stage
        if self.search is None or stage.rung == WARMUP_RUNG:
            return
        load = stage.users if stage.rate is None else stage.rate
        probe = self.search.observe(load, stage.rung, self.records)
        self.records = []  # the next probe's records
        limited = " (client slots all busy: raise max_concurrency)" if probe.client_limited else ""
        log.info("llmload: %s: %s%s", stage.name, probe.verdict, limited)
        self.plan_next(run)
