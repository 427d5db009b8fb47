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
- A user sends its quota for the stage (`requests_per_user` requests, or requests until the
  stage deadline for time-based rungs), then reports `llmload_user_done` and waits for the next
  stage. So a rung ends only when all its users have finished their requests: no in-flight
  request is cut, and no request is counted in the wrong rung.
- Each request's record travels to the master as `llmload_record` and is written there, in one
  file, flushed per record (workers in other pods need no shared disk), stamped with the run's
  id (`RunState.run_id`, made once at the run's start; the run file carries it too), so a file
  holding two runs, or a run file of another run, is told apart from one run.
The shape advances when every user of the stage has reported and all their records arrived,
and after the last rung waits until Locust's own stats from the workers have caught up, so the
final CSVs hold every request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from gevent.event import Event
from locust import LoadTestShape
from locust.runners import MasterRunner, WorkerRunner

from llmload.analysis.capacity import CapacitySearch, fmt_load
from llmload.analysis.health import health_path
from llmload.analysis.reconcile import Tally, check_inputs, check_rung
from llmload.core import exit_codes
from llmload.core.config import MAX_USERS_PER_PROCESS, ConfigError, SweepConfig, parse_config
from llmload.core.lengths import Lengths, as_lengths
from llmload.core.names import REQUEST_TYPE, WARMUP_RUNG, rung_name
from llmload.core.records import RecordWriter, RequestRecord, new_run_id
from llmload.core.run_files import RunFiles
from llmload.loadgen.arrivals import ArrivalQueue, arrival_count
from llmload.loadgen.garbage import settle_before_start
from llmload.loadgen.health_sampler import MSG_HEALTH
from llmload.loadgen.options import api_key, run_config
from llmload.loadgen.preflight import PreflightError, auth_headers, preflight, tls_context
from llmload.loadgen.stage_protocol import (
    Announced,
    LadderDone,
    StageProgress,
    StageProtocol,
    Stalled,
    Started,
    start_spread,
)
from llmload.loadgen.trace import TraceWorkload, trace_workload
from llmload.loadgen.workload import calibrate, load_prompt_file, workload_for

log = logging.getLogger("llmload")

MSG_STAGE = "llmload_stage"
MSG_RECORD = "llmload_record"
MSG_USER_DONE = "llmload_user_done"
MSG_USER_READY = "llmload_user_ready"
STATS_CATCH_UP_S = 12.0  # workers report stats every 3 s; wait at most this for the last ones
STALL_MARGIN_S = 10.0  # a stage with no progress for timeouts.total + this is abandoned...
RETRY_WAIT_MAX_S = 60.0  # ...plus the longest wait between retries (client caps Retry-After at 60 s)


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the ladder as announced to the users."""

    seq: int  # 0, 1, 2, ... in announcement order
    rung: int  # rung index, or WARMUP_RUNG
    users: int
    requests_per_user: int
    model: str
    config: dict[str, Any]
    start_at: float | None = None  # epoch seconds all users start at; None: get ready
    deadline: float | None = None  # epoch seconds for time-based rungs, else None
    rate: float | None = None  # rate mode: requests/s (users are the client slots); None: concurrency
    slots: dict[str, list[int]] | None = None  # rate mode, with start_at: each process's [lo, hi) slots
    prompt_words: int | None = None  # synthetic prompts: words per prompt (calibrated on the server)
    prompt_vocab: list[str] | None = None  # synthetic prompts, traces, sessions: the one-token words
    prompt_overhead: int | None = None  # trace: tokens every prompt costs (BOS, chat template, anchor)

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
    for key in ("prompt_tokens", "max_tokens"):
        if isinstance(lengths := getattr(config, key), Lengths):
            data[key] = lengths.as_mapping()
    return data


class StageBoard:
    """The stage currently announced, in a process that runs users; users block on it."""

    def __init__(self) -> None:
        self.stage: Stage | None = None
        self._changed = Event()

    def reset(self) -> None:
        """Forget the stage of a finished or stopped run."""
        self.stage = None

    def announce(self, stage: Stage) -> None:
        if stage.start_at is not None:
            settle_before_start()  # a full collection now, not during the rung (llmload.loadgen.garbage)
        self.stage = stage
        changed, self._changed = self._changed, Event()
        changed.set()

    def wait_after(self, seq: int, timeout: float) -> Stage | None:
        """The current stage if it is newer than `seq`, else wait up to timeout for one."""
        if self.stage is None or self.stage.seq <= seq:
            self._changed.wait(timeout)
        return self.stage if self.stage is not None and self.stage.seq > seq else None

    def wait_go(self, seq: int, timeout: float) -> Stage | None:
        """Stage `seq` once its start time is announced; None if it is not within timeout."""
        stage = self.stage
        if stage is None or stage.seq != seq or stage.start_at is None:
            self._changed.wait(timeout)
            stage = self.stage
        return stage if stage is not None and stage.seq == seq and stage.start_at is not None else None

    def on_message(self, environment: Any, msg: Any, **_: Any) -> None:
        self.announce(Stage(**msg.data))


@dataclass(slots=True)
class ProcessState:
    """What the users of one Locust process share for the run in progress, one per Locust
    environment (not module globals, so two environments in one interpreter do not mix): the
    announced stage, the current rate stage's arrivals, the prompt counter of the current stage."""

    board: StageBoard = field(default_factory=StageBoard)
    arrivals: dict[int, ArrivalQueue] = field(default_factory=dict)
    prompt_index: dict[tuple[int, float | None], Iterator[int]] = field(default_factory=dict)
    configs: dict[int, SweepConfig] = field(default_factory=dict)  # stage seq -> its configuration

    def config_of(self, stage: Stage) -> SweepConfig:
        """The stage's configuration, decoded and validated once per process (not once per user)."""
        config = self.configs.get(stage.seq)
        if config is None:
            config = self.configs[stage.seq] = stage.sweep_config()
        return config

    def reset(self) -> None:
        """Forget a finished or stopped run (the next one numbers its stages from 0 again)."""
        self.board.reset()
        self.arrivals.clear()
        self.prompt_index.clear()
        self.configs.clear()


def process_state(environment: Any) -> ProcessState:
    """The environment's ProcessState (made on first use)."""
    state = getattr(environment, "llmload_state", None)
    if state is None:
        state = environment.llmload_state = ProcessState()
    return state


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
    records_by_rung: dict[int, int] = field(default_factory=dict)
    all_done_at: float | None = None
    health: RecordWriter | None = None  # the generator's health samples (llmload.analysis.health)
    tallies: dict[int, Tally] = field(default_factory=dict)  # token reconciliation per rung
    # mode: capacity: the search (llmload.analysis.capacity) and the running probe's records
    search: CapacitySearch | None = None
    probe_records: list[RequestRecord] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)  # the Stage fields of the calibration
    run_id: str = field(default_factory=new_run_id)  # every record's and the run file's `run_id`

    @property
    def progress(self) -> list[StageProgress]:
        return self.protocol.progress

    @property
    def current(self) -> StageProgress | None:
        return self.protocol.current

    def write_run_file(self, finished: bool = False) -> None:
        data = {
            "run_id": self.run_id,
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
                    "expected_requests": expected_requests(p.stage, self.config),
                    "started": p.started,
                    "finished": p.finished,
                    "records": p.records,
                    "start": start_spread(p.stage.start_at, p.first_sends) if p.stage.rate is None else None,
                }
                for p in self.progress
                if p.stage.start_at is not None  # announced only: no request was sent
            ],
        }
        tmp = self.files.run.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.files.run)


def stage_trace(stage: Stage, config: SweepConfig) -> TraceWorkload:
    """A trace run's workload in this process, built with the calibration the stage carries."""
    assert stage.prompt_vocab is not None and stage.prompt_overhead is not None
    return trace_workload(config, stage.prompt_vocab, stage.prompt_overhead)


def expected_requests(stage: Stage, config: SweepConfig) -> int | None:
    """Requests a finished stage holds; None for a time-based concurrency rung."""
    if config.mode == "trace" and stage.rate is not None:  # the trace window's lines
        return len(stage_trace(stage, config).offsets)
    if config.sessions is not None and stage.phase == "measure" and not stage.deadline:
        return stage.users * config.sessions.per_user * config.sessions.turns  # unless a turn fails
    if stage.rate is not None:  # a rate capacity probe carries its count in its own config
        requests = stage.config.get("requests_per_rung") or config.requests_per_rung
        return arrival_count(stage.rate, requests, config.duration)
    return None if stage.deadline else stage.users * stage.requests_per_user


def warmup_per_user(config: SweepConfig, users: int, prompts: int) -> int:
    """Warm-up requests per user. With the greedy-determinism check, enough for the warm-up to
    send every prompt a count-based rung will send (of a pool of `prompts`) once, so a prefix
    cache holds each prompt alike at every measured rung (see docs/capacity-and-determinism.md)."""
    if not config.determinism or config.duration is not None or config.mode == "trace":
        return config.warmup_requests
    if config.mode == "capacity":
        most = config.capacity.requests
    elif config.rate_mode:
        most = config.requests_per_rung or 0
    else:
        most = int(max(config.rungs)) * config.requests_per_user
    return max(config.warmup_requests, math.ceil(min(prompts, most) / users))


def plan_stages(
    config: SweepConfig,
    model: str,
    prompt_words: int | None = None,
    prompt_vocab: list[str] | None = None,
    prompts: int = 1,
    prompt_overhead: int | None = None,
) -> list[Stage]:
    """Warm-up (if any) then one stage per rung; deadlines are filled in when announced. In rate
    mode every stage has `max_concurrency` users (the client slots); the warm-up is a concurrency
    stage of them. In capacity mode the probes come from the search (`LadderShape._plan_probe`);
    trace mode has one stage: the trace window at its mean rate. `prompts` is the size of the
    workload's prompt pool (`warmup_per_user`)."""
    cfg = config_to_dict(config)
    stages = []
    rate_slots = config.mode in ("rate", "trace") or (
        config.mode == "capacity" and config.capacity.variable == "rate"
    )
    first_users = (
        config.max_concurrency
        if rate_slots
        else int(config.capacity.start)
        if config.mode == "capacity"
        else int(config.rungs[0])
    )
    if config.warmup_requests:
        per_user = warmup_per_user(config, first_users, prompts)
        stages.append(Stage(0, WARMUP_RUNG, first_users, per_user, model, cfg))
    if config.mode == "trace":
        assert prompt_vocab is not None and prompt_overhead is not None
        trace_rate = trace_workload(config, prompt_vocab, prompt_overhead).rate
        stages.append(Stage(len(stages), 0, config.max_concurrency, 1, model, cfg, rate=trace_rate))
    for i, value in enumerate(config.rungs if config.mode in ("concurrency", "rate") else ()):
        users, rate = (config.max_concurrency, float(value)) if config.rate_mode else (int(value), None)
        stages.append(Stage(len(stages), i, users, config.requests_per_user, model, cfg, rate=rate))
    return [
        dataclasses.replace(
            s, prompt_words=prompt_words, prompt_vocab=prompt_vocab, prompt_overhead=prompt_overhead
        )
        for s in stages
    ]


def check_users_per_process(config: SweepConfig, processes: int) -> None:
    """ConfigError when a stage would put more than MAX_USERS_PER_PROCESS users in one of the
    `processes` processes that run users (Locust spreads a stage's users evenly over them)."""
    most = config.most_users
    if math.ceil(most / processes) <= MAX_USERS_PER_PROCESS:
        return
    needed = math.ceil(most / MAX_USERS_PER_PROCESS)
    where = "1 Locust process" if processes == 1 else f"{processes} Locust processes"
    raise ConfigError(
        f"{config.source}: {most} users at once in {where}; "
        f"one process runs at most {MAX_USERS_PER_PROCESS} (a socket and about 60 KB each, within "
        f"Locust's 10000 open files): run them on {needed} or more (--processes {needed}, or workers)"
    )


def records_path(options: Any) -> Path:
    """--records, else <--csv prefix>_records.jsonl, else reports/run-<time>_records.jsonl."""
    if getattr(options, "records", ""):
        return Path(options.records)
    prefix = getattr(options, "csv_prefix", None) or time.strftime("reports/run-%Y%m%d-%H%M%S")
    return RunFiles(Path(prefix)).records


class LadderShape(LoadTestShape):
    """Walks the ladder of the run configuration (see the module docstring)."""

    abstract = False

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.run: RunState | None = None
        self._failed = False
        self.error = ""  # why the run could not start (bad config, failed preflight)
        self.unfinished = False  # a run began (preflight included) and has not finished every rung
        self.told_400 = False  # the server's first HTTP 400 reason was logged
        self.soak = False  # a soak run: its verdict (llmload.loadgen.soak_monitor) is the exit code
        # called with (run, record dict) for each record, after it is written (e.g. the web UI's tab)
        self.record_hooks: list[Callable[[RunState, dict[str, Any], RequestRecord], None]] = []

    @property
    def _runner(self) -> Any:
        """The runner this shape drives (Locust sets it before the first tick)."""
        assert self.runner is not None
        return self.runner

    # --- messages from the users (master / local process) -------------------------------
    def on_record(self, environment: Any, msg: Any, **_: Any) -> None:
        run = self.run
        if run is None:
            return
        data = msg.data
        data["run_id"] = run.run_id  # the master's run, whichever worker sent it
        rec = RequestRecord.from_dict(data)  # decoded once, here; passed on as a record
        run.writer.write(data)  # as it came, with the run's id: the record's own JSON
        rung = rec.rung
        run.records_by_rung[rung] = run.records_by_rung.get(rung, 0) + 1
        if rung != WARMUP_RUNG:
            run.tallies.setdefault(rung, Tally()).add(data)
            if run.search is not None:
                run.probe_records.append(rec)
        self._report_first_400(rec)
        run.protocol.recorded(rung, time.time())
        for hook in self.record_hooks:
            hook(run, data, rec)

    def _report_first_400(self, rec: RequestRecord) -> None:
        """The server's reason for the run's first HTTP 400, once (the records hold every one)."""
        if rec.outcome == "http_400" and not self.told_400:
            self.told_400 = True
            reason = " ".join(str(rec.error or "no reason given").split())
            log.error("llmload: the server answered HTTP 400 (bad request): %s", reason)

    def on_health(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.run is not None and self.run.health is not None:
            self.run.health.write(msg.data)

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
        """End the run (test stopped or finished); the next start begins a new one. A rung whose
        users were all done with every record in when the run stopped is written finished."""
        if self.run is not None:
            if self.run.protocol.settle() is not None:
                self.run.write_run_file()
            self.run.writer.close()
            if self.run.health is not None:
                self.run.health.close()
            self.run = None
        self._failed = False

    def _begin(self) -> RunState:
        env = self._runner.environment
        self.told_400 = False
        options = env.parsed_options
        config = run_config(options)
        runner = self._runner
        processes = max(1, runner.worker_count) if isinstance(runner, MasterRunner) else 1
        check_users_per_process(config, processes)  # before the preflight: nothing is sent
        self.soak = config.soak is not None
        ctx = tls_context(getattr(options, "ca_bundle", ""), getattr(options, "tls_insecure", False))
        model = preflight(
            env.host or "",
            model=config.model,
            api_key=api_key(options),
            context=ctx,
            timeout=config.timeouts.connect,
            max_tokens=as_lengths(config.max_tokens).high,  # the longest request must fit
            prompt_tokens=None if config.prompt_tokens is None else as_lengths(config.prompt_tokens).high,
        )
        prompt_words, prompt_vocab, prompt_overhead = self._prepare_workload(config, model, ctx)
        path = records_path(options)
        files = RunFiles.of_records(path)
        prompts = len(workload_for(config, prompt_words, prompt_vocab).pool)
        stages = plan_stages(config, model, prompt_words, prompt_vocab, prompts, prompt_overhead)
        # a new run starts new files, as Locust rewrites its CSVs (a second start from the web UI)
        protocol = StageProtocol(
            stages,
            duration=config.duration,
            stall_limit=self._stall_limit(config),
        )
        state = RunState(
            config,
            env.host,
            model,
            RecordWriter(path, fsync=False, truncate=True, chunk_index=True),
            files,
            stages,
            protocol,
        )
        state.workload = {
            "prompt_words": prompt_words,
            "prompt_vocab": prompt_vocab,
            "prompt_overhead": prompt_overhead,
        }
        if config.mode == "capacity":
            state.search = CapacitySearch(config.capacity, config.slo)
            self._plan_probe(state)
        state.health = RecordWriter(health_path(path), fsync=False, truncate=True)
        log.info("llmload: model %s, rungs %s, records in %s", model, list(config.rungs), path)
        return state

    def _prepare_workload(
        self, config: SweepConfig, model: str, ctx: Any
    ) -> tuple[int | None, list[str] | None, int | None]:
        """Check the prompt file; for synthetic prompts, traces and sessions, calibrate on the
        server (llmload.loadgen.workload): the words per synthetic prompt (None without
        prompt_tokens), the words that cost one token each, and the tokens every prompt costs."""
        if config.prompt_file is not None:
            load_prompt_file(config.prompt_file, config.prompt_format)
        if config.prompt_tokens is None and config.mode != "trace" and config.sessions is None:
            return None, None, None
        env = self._runner.environment
        # the endpoint the users send to: a user class may pin one (ChatUser), whatever the file says
        sent = {getattr(u, "endpoint", None) or config.endpoint for u in env.user_classes or ()}
        endpoint = sent.pop() if len(sent) == 1 else config.endpoint  # mixed: the file's (checked later)
        cal = calibrate(env.host or "", model, endpoint, auth_headers(api_key(env.parsed_options)), ctx)
        if config.prompt_tokens is None:
            log.info(
                "llmload: %d one-token words (by %s), %d tokens every prompt costs (by %s)",
                len(cal.vocab),
                cal.method,
                cal.overhead,
                cal.overhead_method,
            )
            return None, list(cal.vocab), cal.overhead
        lengths = as_lengths(config.prompt_tokens)
        cal.words_for(lengths.low, config.unique_prompts)  # the shortest drawn prompt is possible
        words = cal.words_for(lengths.high, config.unique_prompts)  # the longest (the pool's)
        log.info(
            "llmload: prompt_tokens %s -> %d one-token words (the longest) + %d tokens every prompt "
            "costs (%d one-token words found by %s, overhead by %s)",
            lengths.describe(),
            words,
            cal.overhead,
            len(cal.vocab),
            cal.method,
            cal.overhead_method,
        )
        return words, list(cal.vocab), cal.overhead

    def _reconcile(self, progress: StageProgress) -> None:
        """A finished rung whose token accounts do not add up fails the run (exit code 3)."""
        run = self.run
        assert run is not None
        tally = run.tallies.get(progress.stage.rung)
        if progress.stage.rung == WARMUP_RUNG or tally is None:
            return
        problem = check_rung(
            progress.stage.name, tally, run.config.reconcile, ignore_eos=run.config.ignore_eos
        )
        if problem:
            log.error("llmload: token reconciliation failed: %s", problem)
            self._runner.environment.process_exit_code = exit_codes.RECONCILIATION
        missed = check_inputs(progress.stage.name, tally, run.config.input_tolerance)
        if missed:
            log.error("llmload: input lengths not as asked: %s", missed)
            self._runner.environment.process_exit_code = exit_codes.RECONCILIATION

    # --- mode: capacity -------------------------------------------------------------------
    def _plan_probe(self, run: RunState) -> None:
        """Append the search's next probe to the stages, or log the answer when it is over."""
        assert run.search is not None
        elapsed = time.time() - run.progress[0].started if run.progress else 0.0
        limit = run.config.capacity.max_duration_s
        probe = run.search.next_probe() if elapsed <= limit else None
        if probe is None:
            result = run.search.result(None if elapsed <= limit else f"max_duration_s ({limit:g} s) reached")
            log.info("llmload: capacity %s %s (%s)", fmt_load(result.capacity), result.unit, result.reason)
            run.search = None
            return
        rung = sum(1 for s in run.stages if s.rung != WARMUP_RUNG)
        cfg = config_to_dict(run.config)
        if run.search.rate:  # rate mode's stage: `requests` arrivals at the rate, max_concurrency slots
            cfg["requests_per_rung"] = probe.requests
            stage = Stage(
                len(run.stages), rung, run.config.max_concurrency, 1, run.model, cfg, rate=probe.load
            )
        else:
            users = int(probe.load)
            stage = Stage(len(run.stages), rung, users, probe.requests_per_user, run.model, cfg)
        run.stages.append(dataclasses.replace(stage, **run.workload))

    def _observe_probe(self, run: RunState, progress: StageProgress) -> None:
        """A finished probe stage: judge it (llmload.analysis.capacity), then plan the next."""
        assert run.search is not None
        stage = progress.stage
        load = stage.users if stage.rate is None else stage.rate
        probe = run.search.observe(load, stage.rung, run.probe_records)
        run.probe_records = []
        limited = " (client slots all busy: raise max_concurrency)" if probe.client_limited else ""
        log.info("llmload: %s: %s%s", stage.name, probe.verdict, limited)
        self._plan_probe(run)

    @staticmethod
    def _stall_limit(config: SweepConfig) -> float:
        """Seconds without any message after which a started stage has lost users."""
        return config.timeouts.total + STALL_MARGIN_S + (RETRY_WAIT_MAX_S if config.retries.max else 0.0)

    def _fail(self, message: str, code: int = exit_codes.BAD_INPUT) -> None:
        log.error("llmload: %s", message)
        self._runner.environment.process_exit_code = code
        self._failed = True
        self.unfinished = False  # the exit code already says why
        self.error = message

    def on_quitting(self, environment: Any, **_: Any) -> None:
        """A run stopped before its last rung (SIGINT, SIGTERM, the web UI's STOP, preflight cut
        short) exits with the interrupted code, whatever Locust's own would be; a soak run's code is
        its verdict ("incomplete" is the interrupted code too, a breach stays a breach)."""
        if self.unfinished and not self.soak:
            code = environment.process_exit_code = exit_codes.INTERRUPTED
            log.error("llmload: the run stopped before its last rung finished (exit code %d)", code)

    def on_quit(self, **_: Any) -> None:
        """Repeat why the run never started as the last line, under Locust's (empty) summary."""
        if self.error:
            print(f"llmload: error: {self.error}", file=sys.stderr, flush=True)

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
            self.unfinished = True
            try:
                self.run = self._begin()
            except (ConfigError, PreflightError, OSError) as e:
                self._fail(str(e))
                return None
        run = self.run
        while (event := run.protocol.step(time.time())) is not None:
            if isinstance(event, LadderDone):
                run.all_done_at = run.all_done_at or time.time()
                if self._stats_caught_up() or time.time() - run.all_done_at > STATS_CATCH_UP_S:
                    run.write_run_file(finished=True)
                    self.unfinished = False
                    return None
                break
            stage = event.progress.stage
            if isinstance(event, Announced):  # users get ready while Locust spawns them
                self._runner.send_message(MSG_STAGE, dataclasses.asdict(stage))
                break
            if isinstance(event, Started):
                if event.short:
                    log.warning("llmload: %s: %d users not ready; starting anyway", stage.name, event.short)
                run.write_run_file()
                log.info("llmload: %s starts (%d users)", stage.name, stage.users)
                self._runner.send_message(MSG_STAGE, dataclasses.asdict(stage))
                break
            if isinstance(event, Stalled):
                # every request ends within timeouts.total, so users were lost (a worker died or
                # Locust moved users mid-request): stop instead of waiting forever
                self._fail(
                    f"{stage.name}: no progress for {event.idle_s:.0f} s ({event.progress.users_done} of "
                    f"{stage.users} users done); the run stops, the rung is partial",
                    exit_codes.INTERRUPTED,
                )
                run.write_run_file()
                return None
            run.write_run_file()  # Finished
            log.info("llmload: %s done: %d requests", stage.name, event.progress.records)
            self._reconcile(event.progress)
            if run.search is not None and stage.rung != WARMUP_RUNG:
                self._observe_probe(run, event.progress)  # may plan the next probe
        current = run.current
        assert current is not None
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
    if isinstance(shape, LadderShape) and not isinstance(runner, WorkerRunner):
        runner.register_message(MSG_RECORD, shape.on_record)
        runner.register_message(MSG_USER_DONE, shape.on_user_done)
        runner.register_message(MSG_USER_READY, shape.on_user_ready)
        environment.events.quit.add_listener(shape.on_quit)
        environment.events.quitting.add_listener(shape.on_quitting)
        runner.register_message(MSG_HEALTH, shape.on_health)
