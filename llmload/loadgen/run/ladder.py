"""The concurrency ladder: a `LoadTestShape` that walks the rungs and knows when each one is done.

Roles (the same code runs in a local run, with `--processes N` and with master/worker):
- The shape (master or local process) announces each stage with the custom message
  `llmload_stage` and returns the stage's user count to Locust. A stage is the optional warm-up
  and then one stage per rung.
- Every process that runs users keeps the announced stage on a `StageBoard`. An announcement
  first says "get ready": each user reports `llmload_user_ready`. Locust spawns (and in
  distributed mode may move) users over a few hundred milliseconds, so once every user of the
  stage is ready the shape announces the same stage again with a common `start_at` a moment
  ahead: all users on all workers send their first request at that instant, and a rung's
  concurrency is real from its first request.
- A user sends its quota for the stage: by default requests one after the other until the
  master ends the rung (`llmload_rung_end`, its precision reached: `precision_stop`) or its
  deadline (the precision's time cap, or `duration`); `requests_per_user` requests in a
  count-based rung. Then it reports `llmload_user_done` and waits for the next stage. So a rung
  ends only when all its users have finished their requests: no in-flight request is cut, and no
  request is counted in the wrong rung.
- Each request's record travels to the master as `llmload_record` (from a worker as its dict; in
  a local run as the record itself) and is written there, in one file, flushed per record
  (workers in other pods need no shared disk), with the run's id, then goes to the run's other
  sinks.
The shape advances when every user of the stage has reported and all their records arrived,
and after the last rung waits until Locust's own stats from the workers have caught up, so the
final CSVs hold every request.

This module owns the shape, a thin driver of `llmload.loadgen.run.stage_protocol`: it feeds the
protocol the users' messages and turns its events into Locust messages, run-file writes and log
lines; and the wiring of the messages and hooks onto a Locust environment. The jobs it drives
live in their own modules: the messages (`messages`), the stage plan (`stage_plan`), the users'
side (`worker_state`), the run and its run file (`run_state`), its start (`run_start`: preflight,
calibration), what happens to each record (`record_sinks`, `capacity_probes`) and its end
(`run_end`: exit codes, the stats catch-up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar, Self

from locust import LoadTestShape
from locust.runners import MasterRunner, WorkerRunner

from llmload.core import exit_codes
from llmload.core.config import ConfigError
from llmload.core.files.records import FileInUse
from llmload.core.files.run_files import RunFiles
from llmload.loadgen.run.clock_sync import (
    MSG_CLOCK_OFFSET,
    MSG_CLOCK_PROBE,
    MSG_CLOCK_REPLY,
    ClockSync,
    WorkerClockError,
    on_offset,
    on_probe,
)
from llmload.loadgen.run.messages import (
    MSG_HEALTH,
    MSG_RECORD,
    MSG_RUNG_END,
    MSG_STAGE,
    MSG_USER_DONE,
    MSG_USER_READY,
    stage_message,
)
from llmload.loadgen.run.run_end import RunEnd, may_end
from llmload.loadgen.run.run_start import NoWorkers, begin_run, records_path
from llmload.loadgen.run.run_state import RecordHook, RunState
from llmload.loadgen.run.stage_protocol import Announced, Finished, LadderDone, Stalled, Started
from llmload.loadgen.run.worker_state import process_state
from llmload.loadgen.transport.preflight import PreflightError

log = logging.getLogger("llmload")
# why a run cannot start, as the kind of its error (llmload.core.files.run_errors.KINDS)
START_ERRORS = (
    (ConfigError, "bad_config"),
    (NoWorkers, "no_workers"),
    (WorkerClockError, "worker_clock"),
    (PreflightError, "preflight"),
    (FileInUse, "io"),
    (OSError, "io"),
)
START_ERROR_TYPES = tuple(error for error, _ in START_ERRORS)


class LadderShape(LoadTestShape):
    """Walks the ladder of the run configuration (see the module docstring)."""

    abstract = False

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.run: RunState | None = None
        self.end = RunEnd()  # the exit code and last line of the shape's runs
        # sinks every run's records go to after its own (`RunState.sinks`), e.g. the web UI's tab
        self.record_hooks: list[RecordHook] = []
        self.clocks: ClockSync | None = None  # the workers' clocks (a master's; made by register_messages)
        # what else sees each health sample of a users' process, after the run's file (live metrics)
        self.health_hooks: list[Callable[[RunState, dict[str, Any]], None]] = []

    @property
    def _runner(self) -> Any:
        """The runner this shape drives (Locust sets it before the first tick)."""
        assert self.runner is not None
        return self.runner

    def _missing_workers(self) -> list[str]:
        """The workers Locust's master has marked missing (no heartbeat for its liveness limit,
        `WorkerNodes.missing`); none in a local run."""
        runner = self._runner
        return [worker.id for worker in runner.clients.missing] if isinstance(runner, MasterRunner) else []

    # --- messages from the users (master / local process) -------------------------------
    def on_record(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.run is not None and not self.end.write_failed:  # after a failed write: dropped
            try:
                self.run.receive(msg.data)
            except OSError as e:  # the records file or its index: the run stops at once
                self.end.cannot_write(e)

    def on_health(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.run is not None and self.run.health is not None and not self.end.write_failed:
            try:
                self.run.health.write(msg.data)
            except OSError as e:
                self.end.cannot_write(e)
                return
            for hook in self.health_hooks:
                hook(self.run, msg.data)

    def on_user_ready(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.run is not None:
            data = msg.data
            self.run.protocol.ready(data["seq"], data["user"], data.get("worker", "local"), time.time())

    def on_user_done(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.run is not None:
            data = msg.data
            self.run.protocol.done(data["seq"], data["requests"], time.time(), data.get("first_send"))

    # --- the shape ----------------------------------------------------------------------
    def close(self) -> None:
        """End the run (test stopped or finished); the next start begins a new one."""
        if self.run is not None:
            run, self.run = self.run, None
            try:
                run.close()
            except OSError as e:  # the last bytes of a file of the run could not be written
                self.end.cannot_write(e)
        self.end.failed = False

    def _begin(self) -> RunState | None:
        """Begin a run: its errors first (so a failed start is in its run file), then the run;
        None when it cannot start (the shape then ticks no more)."""
        env = self._runner.environment
        path = records_path(env.parsed_options)
        errors = self.end.begin(env, RunFiles.of_records(path).run)
        self.end.unfinished = True
        try:
            return begin_run(self._runner, self.record_hooks, errors, path, self.clocks)
        except START_ERROR_TYPES as e:
            kind = next(k for error, k in START_ERRORS if isinstance(e, error))
            self.end.fail(kind, str(e))
            return None

    def tick(self) -> tuple[int, float] | None:
        try:
            return self._tick()
        except OSError as e:  # the run file (or a capacity probe's): the run stops at once
            self.end.cannot_write(e)
            return None

    def _tick(self) -> tuple[int, float] | None:
        if self.end.failed:
            return None
        if self.run is None:
            self.run = self._begin()
            if self.run is None:
                # no run to close: the next start begins a new one. (Locust's stop of a test that
                # never spawned does nothing on a master: no test_stop, so no `close`.)
                self.end.failed = False
                return None
            self.end.soak = self.run.config.soak is not None
        run = self.run
        if self.clocks is not None and self.clocks.due(time.time()):  # a long stage: measured again
            self.clocks.measure()
        while (event := run.protocol.step(time.time())) is not None:
            if isinstance(event, LadderDone):
                if may_end(run, self._runner):
                    run.write_run_file(finished=True)
                    self.end.unfinished = False
                    return None
                break
            stage = event.progress.stage
            if isinstance(event, Announced):  # users get ready while Locust spawns them
                if self.clocks is not None:  # each stage starts on freshly measured clocks
                    self.clocks.measure()
                self._runner.send_message(MSG_STAGE, stage_message(stage))
                break
            if isinstance(event, Started):
                if event.short:
                    log.warning("llmload: %s: %d users not ready; starting anyway", stage.name, event.short)
                run.write_run_file()
                log.info("llmload: %s starts (%d users)", stage.name, stage.users)
                self._runner.send_message(MSG_STAGE, stage_message(stage))
                break
            if isinstance(event, Stalled):
                # every request ends within timeouts.total, so users were lost (a worker died or
                # Locust moved users mid-request): stop instead of waiting forever
                self.end.fail(
                    "stalled_rung",
                    f"{stage.name}: no progress for {event.idle_s:.0f} s ({event.progress.users_done} of "
                    f"{stage.users} users done); the run stops, the rung is partial",
                    exit_codes.INTERRUPTED,
                )  # the run file is written with the error
                return None
            assert isinstance(event, Finished)
            if run.falls is not None:  # a falling ladder drops the rungs not run (over-saturation)
                run.falls.finished(run, event.progress)
            run.write_run_file()
            log.info("llmload: %s done: %d requests", stage.name, event.progress.records)
            if run.precision is not None and (capped := run.precision.finished(event.progress)):
                log.info("llmload: %s", capped)
            self.end.rung_failed(run.reconciler.problems(event.progress))
            if run.probes is not None:
                run.probes.finished(run, event.progress)  # may plan the next probe
        current = run.current
        assert current is not None
        if current.stage.deadline is not None and (lost := self._missing_workers()):
            # a held rung's other users keep it going, so it would never stall: stop now
            self.end.fail(
                "lost_worker",
                f"{current.stage.name}: worker {', '.join(lost)} stopped answering Locust's heartbeat "
                "mid-rung, its users gone; the run stops, the rung is partial",
                exit_codes.INTERRUPTED,
            )
            return None
        if run.precision is not None and (reached := run.precision.due(current, time.time())):
            log.info("llmload: %s", reached)  # its users send no more (llmload.loadgen.run.precision_stop)
            self._runner.send_message(MSG_RUNG_END, {"seq": current.stage.seq})
        return current.stage.users, run.config.spawn_rate


class LadderHook:
    """A hook of the master (or the local process) of a ladder run: `install(environment)`, from
    `events.init`, makes one and attaches its `LISTENS` (Locust event -> method name); on a worker,
    or without the ladder shape, it makes none."""

    LISTENS: ClassVar[dict[str, str]] = {}

    def __init__(self, environment: Any) -> None:
        self.environment = environment

    @classmethod
    def install(cls, environment: Any) -> Self | None:
        if isinstance(environment.runner, WorkerRunner) or not isinstance(
            environment.shape_class, LadderShape
        ):
            return None
        hook = cls(environment)
        for event, method in cls.LISTENS.items():
            getattr(environment.events, event).add_listener(getattr(hook, method))
        return hook


def on_test_stop(environment: Any, **_: Any) -> None:
    """A stopped or finished test ends the run on every process (the next start is a new run)."""
    process_state(environment).reset()
    if isinstance(environment.shape_class, LadderShape):
        environment.shape_class.close()


def register_messages(environment: Any) -> None:
    """Register the custom messages on this process's runner (call from `events.init`)."""
    runner = environment.runner
    shape = environment.shape_class
    environment.events.test_stop.add_listener(on_test_stop)
    if not isinstance(runner, MasterRunner):  # local and worker processes run users
        runner.register_message(MSG_STAGE, process_state(environment).board.on_message)
        runner.register_message(MSG_RUNG_END, process_state(environment).board.on_end)
    if isinstance(runner, WorkerRunner):  # its clock, measured and corrected by the master
        runner.register_message(MSG_CLOCK_PROBE, on_probe)
        runner.register_message(MSG_CLOCK_OFFSET, on_offset)
    if isinstance(shape, LadderShape) and isinstance(runner, MasterRunner):
        shape.clocks = ClockSync(runner)
        runner.register_message(MSG_CLOCK_REPLY, shape.clocks.on_reply)
        environment.events.worker_connect.add_listener(shape.clocks.on_connect)
    if isinstance(shape, LadderShape) and not isinstance(runner, WorkerRunner):
        runner.register_message(MSG_RECORD, shape.on_record)
        runner.register_message(MSG_USER_DONE, shape.on_user_done)
        runner.register_message(MSG_USER_READY, shape.on_user_ready)
        environment.events.quit.add_listener(shape.end.on_quit)
        environment.events.quitting.add_listener(shape.end.on_quitting)
        runner.register_message(MSG_HEALTH, shape.on_health)
