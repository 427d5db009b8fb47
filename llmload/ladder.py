"""The concurrency ladder: a `LoadTestShape` that walks the rungs and knows when each one is done.

Roles (the same code runs in a local run, with `--processes N` and with master/worker):
- The shape (master or local process) announces each stage with the custom message
  `llmload_stage` and returns the stage's user count to Locust. A stage is the optional warm-up
  and then one stage per rung.
- Every process that runs users keeps the announced stage on a `StageBoard`. A user sends its
  quota for the stage (`requests_per_user` requests, or requests until the stage deadline for
  time-based rungs), then reports `llmload_user_done` and waits for the next stage. So a rung ends
  only when all its users have finished their requests: no in-flight request is cut, and no
  request is counted in the wrong rung.
- Each request's record travels to the master as `llmload_record` and is written there, in one
  file, flushed per record (workers in other pods need no shared disk).
The shape advances when every user of the stage has reported and all their records arrived,
and after the last rung waits until Locust's own stats from the workers have caught up, so the
final CSVs hold every request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gevent.event import Event
from locust import LoadTestShape
from locust.runners import MasterRunner, WorkerRunner

from llmload.config import ConfigError, SweepConfig, parse_config
from llmload.entries import REQUEST_TYPE, WARMUP_RUNG, rung_name
from llmload.options import api_key, run_config
from llmload.preflight import PreflightError, preflight, tls_context
from llmload.records import RecordWriter

log = logging.getLogger("llmload")

MSG_STAGE = "llmload_stage"
MSG_RECORD = "llmload_record"
MSG_USER_DONE = "llmload_user_done"
STATS_CATCH_UP_S = 12.0  # workers report stats every 3 s; wait at most this for the last ones


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the ladder as announced to the users."""

    seq: int  # 0, 1, 2, ... in announcement order
    rung: int  # rung index, or WARMUP_RUNG
    users: int
    requests_per_user: int
    deadline: float | None  # epoch seconds for time-based rungs, else None
    model: str
    config: dict[str, Any]

    @property
    def phase(self) -> str:
        return "warmup" if self.rung == WARMUP_RUNG else "measure"

    @property
    def name(self) -> str:
        return rung_name(self.rung, self.users)

    def sweep_config(self) -> SweepConfig:
        return parse_config(self.config, source="<announced by the master>")


def config_to_dict(config: SweepConfig) -> dict[str, Any]:
    """A SweepConfig as plain data (for messages and the run file); round-trips via parse_config."""
    data = dataclasses.asdict(config)
    data.pop("source")
    return data


class StageBoard:
    """The stage currently announced, in a process that runs users; users block on it."""

    def __init__(self) -> None:
        self.stage: Stage | None = None
        self._changed = Event()

    def announce(self, stage: Stage) -> None:
        self.stage = stage
        changed, self._changed = self._changed, Event()
        changed.set()

    def wait_after(self, seq: int, timeout: float) -> Stage | None:
        """The current stage if it is newer than `seq`, else wait up to timeout for one."""
        if self.stage is not None and self.stage.seq > seq:
            return self.stage
        self._changed.wait(timeout)
        if self.stage is not None and self.stage.seq > seq:
            return self.stage
        return None

    def on_message(self, environment: Any, msg: Any, **_: Any) -> None:
        self.announce(Stage(**msg.data))


BOARD = StageBoard()


@dataclass(slots=True)
class _StageProgress:
    stage: Stage
    started: float
    users_done: int = 0
    requests_reported: int = 0
    records: int = 0
    finished: float | None = None

    def complete(self) -> bool:
        return self.users_done >= self.stage.users and self.records >= self.requests_reported


@dataclass(slots=True)
class RunState:
    """Everything the master knows about the run in progress."""

    config: SweepConfig
    host: str
    model: str
    writer: RecordWriter
    run_file: Path
    stages: list[Stage]
    progress: list[_StageProgress] = field(default_factory=list)
    records_by_rung: dict[int, int] = field(default_factory=dict)
    all_done_at: float | None = None

    @property
    def current(self) -> _StageProgress | None:
        return self.progress[-1] if self.progress else None

    def write_run_file(self, finished: bool = False) -> None:
        data = {
            "host": self.host,
            "model": self.model,
            "config": config_to_dict(self.config),
            "records": str(self.writer.path),
            "finished": finished,
            "stages": [
                {
                    "rung": p.stage.rung,
                    "users": p.stage.users,
                    "name": p.stage.name,
                    "expected_requests": None
                    if p.stage.deadline
                    else p.stage.users * p.stage.requests_per_user,
                    "started": p.started,
                    "finished": p.finished,
                    "records": p.records,
                }
                for p in self.progress
            ],
        }
        tmp = self.run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.run_file)


def plan_stages(config: SweepConfig, model: str) -> list[Stage]:
    """Warm-up (if any) then one stage per rung; deadlines are filled in when announced."""
    cfg = config_to_dict(config)
    stages = []
    if config.warmup_requests:
        stages.append(Stage(0, WARMUP_RUNG, config.rungs[0], config.warmup_requests, None, model, cfg))
    for i, users in enumerate(config.rungs):
        stages.append(Stage(len(stages), i, users, config.requests_per_user, None, model, cfg))
    return stages


def records_path(options: Any) -> Path:
    """--records, else <--csv prefix>_records.jsonl, else reports/run-<time>_records.jsonl."""
    if getattr(options, "records", ""):
        return Path(options.records)
    prefix = getattr(options, "csv_prefix", None) or time.strftime("reports/run-%Y%m%d-%H%M%S")
    return Path(f"{prefix}_records.jsonl")


class LadderShape(LoadTestShape):
    """Walks the ladder of the run configuration (see the module docstring)."""

    abstract = False

    def __init__(self) -> None:
        super().__init__()
        self.run: RunState | None = None
        self._failed = False

    # --- messages from the users (master / local process) -------------------------------
    def on_record(self, environment: Any, msg: Any, **_: Any) -> None:
        run = self.run
        if run is None:
            return
        data = msg.data
        run.writer.write(data)
        rung = data["rung"]
        run.records_by_rung[rung] = run.records_by_rung.get(rung, 0) + 1
        for p in run.progress:
            if p.stage.rung == rung:
                p.records += 1

    def on_user_done(self, environment: Any, msg: Any, **_: Any) -> None:
        run = self.run
        if run is None:
            return
        for p in run.progress:
            if p.stage.seq == msg.data["seq"]:
                p.users_done += 1
                p.requests_reported += msg.data["requests"]

    # --- the shape ----------------------------------------------------------------------
    def reset_time(self) -> None:
        super().reset_time()
        self.close()
        self._failed = False

    def close(self) -> None:
        if self.run is not None:
            self.run.writer.close()
            self.run = None

    def _begin(self) -> RunState:
        env = self.runner.environment
        options = env.parsed_options
        config = run_config(options)
        ctx = tls_context(getattr(options, "ca_bundle", ""), getattr(options, "tls_insecure", False))
        model = preflight(env.host or "", model=config.model, api_key=api_key(options), context=ctx)
        path = records_path(options)
        run_file = Path(str(path).removesuffix("_records.jsonl").removesuffix(".jsonl") + "_run.json")
        state = RunState(
            config, env.host, model, RecordWriter(path, fsync=False), run_file, plan_stages(config, model)
        )
        log.info("llmload: model %s, rungs %s, records in %s", model, list(config.rungs), path)
        return state

    def _fail(self, message: str) -> None:
        log.error("llmload: %s", message)
        self.runner.environment.process_exit_code = 2
        self._failed = True

    def _announce(self, stage: Stage) -> None:
        run = self.run
        assert run is not None
        if run.config.duration is not None and stage.rung != WARMUP_RUNG:
            stage = dataclasses.replace(stage, deadline=time.time() + run.config.duration)
        run.progress.append(_StageProgress(stage, time.time()))
        run.write_run_file()
        log.info("llmload: %s starts (%d users)", stage.name, stage.users)
        self.runner.send_message(MSG_STAGE, dataclasses.asdict(stage))

    def _stats_caught_up(self) -> bool:
        run = self.run
        assert run is not None
        if not isinstance(self.runner, MasterRunner):
            return True
        for p in run.progress:
            entry = self.runner.stats.entries.get((p.stage.name, REQUEST_TYPE))
            if (entry.num_requests if entry else 0) < p.records:
                return False
        return True

    def tick(self) -> tuple[int, float] | None:
        if self._failed:
            return None
        if self.run is None:
            try:
                self.run = self._begin()
            except (ConfigError, PreflightError, OSError) as e:
                self._fail(str(e))
                return None
            self._announce(self.run.stages[0])
        run = self.run
        current = run.current
        assert current is not None
        if current.complete():
            if current.finished is None:
                current.finished = time.time()
                log.info("llmload: %s done: %d requests", current.stage.name, current.records)
            if len(run.progress) < len(run.stages):
                self._announce(run.stages[len(run.progress)])
            else:
                run.all_done_at = run.all_done_at or time.time()
                if self._stats_caught_up() or time.time() - run.all_done_at > STATS_CATCH_UP_S:
                    run.write_run_file(finished=True)
                    self.close()
                    return None
        return run.current.stage.users, run.config.spawn_rate


def register_messages(environment: Any) -> None:
    """Register the custom messages on this process's runner (call from `events.init`)."""
    runner = environment.runner
    shape = environment.shape_class
    if not isinstance(runner, MasterRunner):  # local and worker processes run users
        runner.register_message(MSG_STAGE, BOARD.on_message)
    if isinstance(shape, LadderShape) and not isinstance(runner, WorkerRunner):
        runner.register_message(MSG_RECORD, shape.on_record)
        runner.register_message(MSG_USER_DONE, shape.on_user_done)
