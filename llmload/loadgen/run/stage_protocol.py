"""The ladder's stage protocol as a plain state machine: what the master knows about each stage
and what it does next. No Locust and no gevent here, so it is tested on its own
(tests/unit/test_stage_protocol.py); `llmload.loadgen.run.ladder.LadderShape` feeds it the users'
messages and turns its events into Locust messages, files and log lines.

One stage goes: announced (users get ready) -> every user ready, or READY_TIMEOUT_S without news
-> started at a common instant a moment ahead (with the deadline of a time-based rung and, in rate
mode, each process's slots) -> every user done and every record in -> finished -> the next stage
is announced, or the ladder is done. A started stage with no message for `stall_limit` seconds has
lost users (a worker died): it stalls, and the run stops instead of waiting forever.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from llmload.core.names import MEASURE_PHASE
from llmload.loadgen.workload.arrivals import slot_ranges

GO_MARGIN_S = 0.25  # start_at is this far ahead of the "go" announcement, so it reaches every worker
READY_TIMEOUT_S = 60.0  # a stage starts with the users that are ready after this long


@dataclass(slots=True)
class StageProgress:
    """One announced stage and what its users reported."""

    stage: Any  # a Stage; replaced by its started copy (start_at, deadline, slots) at the go
    started: float  # when it was announced, then its common start time
    ready: set[str] = field(default_factory=set)
    ready_by_process: dict[str, int] = field(default_factory=dict)  # ready users per worker
    users_done: int = 0
    requests_reported: int = 0
    records: int = 0
    finished: float | None = None
    last_progress: float = 0.0  # last ready / record / done message (or the announcement)
    first_sends: list[float] = field(default_factory=list)  # each done user's first request's t_start

    def complete(self) -> bool:
        return self.users_done >= self.stage.users and self.records >= self.requests_reported


def start_spread(start_at: float | None, first_sends: list[float]) -> dict[str, Any] | None:
    """The rung-start promise as kept: how long after the stage's common start time (`start_at`)
    its users sent their first requests, in ms (`users`: how many reported one). None before the
    start or without a report."""
    if start_at is None or not first_sends:
        return None
    lags = sorted(1000.0 * (t - start_at) for t in first_sends)
    return {
        "users": len(lags),
        "first_ms": round(lags[0], 2),
        "p50_ms": round(lags[(len(lags) - 1) // 2], 2),
        "last_ms": round(lags[-1], 2),
    }


@dataclass(frozen=True, slots=True)
class StageEvent:
    """Something that happened to a stage."""

    progress: StageProgress


class Announced(StageEvent):
    """A new stage: tell the users to get ready (Locust spawns its users meanwhile)."""

    __slots__ = ()


class Finished(StageEvent):
    """Every user is done and every record arrived."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Started(StageEvent):
    """Every user is ready (or `short` of them after READY_TIMEOUT_S): announce the start."""

    short: int = 0  # users not ready when it started anyway


@dataclass(frozen=True, slots=True)
class Stalled(StageEvent):
    """No message for longer than any request can take: users were lost."""

    idle_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LadderDone:
    """The last stage finished (returned at every step from then on)."""


Event = Announced | Started | Finished | Stalled | LadderDone


class StageProtocol:
    """The progress of a run's stages; `stages` may grow while it runs (capacity probes)."""

    def __init__(self, stages: list[Any], *, duration: float | None, stall_limit: float) -> None:
        self.stages = stages
        self.duration = duration  # seconds per measured rung (time-based rungs), else None
        self.stall_limit = stall_limit
        self.progress: list[StageProgress] = []

    @property
    def current(self) -> StageProgress | None:
        return self.progress[-1] if self.progress else None

    # --- the users' messages ------------------------------------------------------------------
    def ready(self, seq: int, user: str, process: str, now: float) -> None:
        current = self.current
        if current is not None and current.stage.seq == seq and user not in current.ready:
            current.ready.add(user)
            current.last_progress = now
            current.ready_by_process[process] = current.ready_by_process.get(process, 0) + 1

    def done(self, seq: int, requests: int, now: float, first_send: float | None = None) -> None:
        for p in self.progress:
            if p.stage.seq == seq:
                p.users_done += 1
                p.requests_reported += requests
                p.last_progress = now
                if first_send is not None:
                    p.first_sends.append(first_send)

    def recorded(self, rung: int, phase: str, now: float) -> None:
        for p in self.progress:
            if p.stage.rung == rung and p.stage.phase == phase:
                p.records += 1
                p.last_progress = now

    def settle(self) -> StageProgress | None:
        """At a stop: the current stage, when it started and is complete (every user done, every
        record in) but no step has marked it yet, is finished as of its last message; returns it.
        A stop at a rung's boundary so keeps the rung complete instead of partial."""
        current = self.current
        if current is None or current.finished is not None or current.stage.start_at is None:
            return None
        if not current.complete():
            return None
        current.finished = current.last_progress
        return current

    # --- what happens next --------------------------------------------------------------------
    def step(self, now: float) -> Event | None:
        """The next event, or None while the current stage runs. Call again after an event: a
        finished stage is followed by the next announcement (or LadderDone)."""
        current = self.current
        if current is None or (current.finished is not None and len(self.progress) < len(self.stages)):
            return self._announce(now)
        if current.finished is not None:
            return LadderDone()
        idle = now - current.last_progress
        if current.stage.start_at is None:
            if len(current.ready) >= current.stage.users or idle > READY_TIMEOUT_S:
                return self._go(current, now)
            return None
        if current.complete():
            current.finished = now
            return Finished(current)
        return Stalled(current, idle) if idle > self.stall_limit else None

    def _announce(self, now: float) -> Announced:
        progress = StageProgress(self.stages[len(self.progress)], now, last_progress=now)
        self.progress.append(progress)
        return Announced(progress)

    def _go(self, progress: StageProgress, now: float) -> Started:
        stage = progress.stage
        start_at = now + GO_MARGIN_S
        deadline = (
            start_at + self.duration if self.duration is not None and stage.phase == MEASURE_PHASE else None
        )
        # rate mode: each process's share of the arrivals; concurrency: of the request indices
        slots = {k: list(v) for k, v in slot_ranges(progress.ready_by_process).items()}
        progress.stage = dataclasses.replace(stage, start_at=start_at, deadline=deadline, slots=slots)
        progress.started = progress.last_progress = start_at
        return Started(progress, max(0, stage.users - len(progress.ready)))
