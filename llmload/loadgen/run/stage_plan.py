"""Stage planning: which stages a run configuration asks for, what each holds, how long the master
waits on one.

Owns the plan, made on the master before the first stage (`plan_stages`: the warm-up, then one
stage per rung, or the trace window; capacity probes are appended one at a time as the search asks,
`probe_stage`), the limits checked before anything is sent (`check_users_per_process`), the
requests a finished stage holds (`expected_requests`, for the run file), how long a started stage
may go without a message (`stall_limit`), and a trace stage's workload (`stage_trace`), which the
users' processes build from the calibration the stage carries. Pure functions of the configuration
and the stage: no Locust, no messages.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from llmload.analysis.capacity import NextProbe
from llmload.core.config import MAX_USERS_PER_PROCESS, ConfigError, SweepConfig
from llmload.core.names import MEASURE_PHASE, WARMUP_RUNG
from llmload.loadgen.run.messages import Stage
from llmload.loadgen.workload.arrivals import arrival_count
from llmload.loadgen.workload.trace import TraceWorkload, trace_workload

STALL_MARGIN_S = 10.0  # a stage with no progress for timeouts.total + this is abandoned...
RETRY_WAIT_MAX_S = 60.0  # ...plus the longest wait between retries (client caps Retry-After at 60 s)


def stage_trace(stage: Stage, config: SweepConfig) -> TraceWorkload:
    """A trace run's workload in this process, built with the calibration the stage carries."""
    assert stage.prompt_vocab is not None and stage.prompt_overhead is not None
    return trace_workload(config, stage.prompt_vocab, stage.prompt_overhead)


def expected_requests(stage: Stage, config: SweepConfig) -> int | None:
    """Requests a finished stage holds; None for a time-based concurrency rung."""
    if config.mode == "trace" and stage.rate is not None:  # the window's lines, or conversations' turns
        return stage_trace(stage, config).requests
    if config.sessions is not None and stage.phase == "measure":
        if stage.deadline or config.sessions.agent:  # an agent session ends at its final answer
            return None
        return stage.users * config.sessions.per_user * config.sessions.turns  # unless a turn fails
    if stage.rate is not None:  # a rate capacity probe carries its count in its own config
        requests = stage.config.requests_per_rung or config.requests_per_rung
        return arrival_count(stage.rate, requests, config.duration)
    return None if stage.deadline else stage.users * stage.requests_per_user


def warmup_per_user(config: SweepConfig, users: int, prompts: int) -> int:
    """Warm-up requests per user. With the greedy-determinism check, enough for the warm-up to
    send every prompt of the check's probes once (one per user of the largest rung, of a pool of
    `prompts` distinct ones), so a prefix cache holds each alike at every rung's probe (see
    docs/determinism.md); the measured requests' prompts are others, never sent before."""
    if not config.determinism:
        return config.warmup_requests
    return max(config.warmup_requests, math.ceil(min(prompts, int(max(config.rungs))) / users))


def plan_stages(
    config: SweepConfig,
    model: str,
    prompt_words: int | None = None,
    prompt_vocab: list[str] | None = None,
    prompts: int = 1,
    prompt_overhead: int | None = None,
    run_id: str | None = None,
) -> list[Stage]:
    """Warm-up (if any) then one stage per rung, each followed by the greedy-determinism check's
    probe when the check runs (`config.determinism`); deadlines are filled in when announced. In rate
    mode every stage has `max_concurrency` users (the client slots); the warm-up is a concurrency
    stage of them. In capacity mode the probes come from the search (`probe_stage`, as
    `llmload.loadgen.run.capacity_probes` asks); trace mode has one stage: the trace window at its
    mean rate. `prompts` is the size of the workload's prompt pool (`warmup_per_user`); every stage
    carries the run's id (`run_id`: its records carry it)."""
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
        stages.append(Stage(0, WARMUP_RUNG, first_users, per_user, model, config))
    if config.mode == "trace":
        assert prompt_vocab is not None and prompt_overhead is not None
        trace_rate = trace_workload(config, prompt_vocab, prompt_overhead).rate
        stages.append(Stage(len(stages), 0, config.max_concurrency, 1, model, config, rate=trace_rate))
    for i, value in enumerate(config.rungs if config.mode in ("concurrency", "rate") else ()):
        users, rate = (config.max_concurrency, float(value)) if config.rate_mode else (int(value), None)
        stages.append(Stage(len(stages), i, users, config.per_user, model, config, rate=rate))
        if config.determinism:  # the check's probe: one request a user, at the rung's concurrency
            stages.append(Stage(len(stages), i, users, 1, model, config, probe=True))
    return [
        dataclasses.replace(
            s,
            prompt_words=prompt_words,
            prompt_vocab=prompt_vocab,
            prompt_overhead=prompt_overhead,
            run_id=run_id,
        )
        for s in stages
    ]


def probe_stage(
    config: SweepConfig,
    model: str,
    stages: list[Stage],
    probe: NextProbe,
    rate: bool,
    workload: dict[str, Any],
) -> Stage:
    """The stage of a capacity probe, after `stages`: in rate mode `probe.requests` arrivals at
    the probe's rate over `max_concurrency` client slots (its count in a configuration derived from
    the run's), else `probe.load` users; `workload`: the Stage fields every stage of the run carries
    (the calibration's and the run's id), as `plan_stages` gave them to every other stage."""
    rung = sum(1 for s in stages if s.phase == MEASURE_PHASE)
    if rate:
        probed = dataclasses.replace(config, requests_per_rung=probe.requests)
        stage = Stage(len(stages), rung, config.max_concurrency, 1, model, probed, rate=probe.load)
    else:
        stage = Stage(len(stages), rung, int(probe.load), probe.requests_per_user, model, config)
    return dataclasses.replace(stage, **workload)


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


def stall_limit(config: SweepConfig) -> float:
    """Seconds without any message after which a started stage has lost users."""
    return config.timeouts.total + STALL_MARGIN_S + (RETRY_WAIT_MAX_S if config.retries.max else 0.0)
