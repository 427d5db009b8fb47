"""What a process that runs users (a worker, or the local process) keeps of the run in progress.

Owns the announced stage (`StageBoard`: users block on it until the next stage, or until its common
start; its configuration decoded as it arrives, once per distinct one: `announced_stage`), and what
the process's users share for a stage (`ProcessState`: the rate stage's arrivals, the prompt
counter, the users' slots). One per Locust environment (`process_state`), never a module global,
so two environments in one interpreter do not mix.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gevent.event import Event

from llmload.loadgen.run.garbage import settle_before_start
from llmload.loadgen.run.messages import Stage, announced_stage
from llmload.loadgen.workload.arrivals import ArrivalQueue, slot_indices


class StageBoard:
    """The stage currently announced, in a process that runs users; users block on it."""

    def __init__(self) -> None:
        self.stage: Stage | None = None
        self._changed = Event()
        self._ended = -1  # the latest stage the master ended early (`llmload_rung_end`)

    def ended(self, seq: int) -> bool:
        """Whether the master ended stage `seq` before its deadline (it reached its precision)."""
        return seq <= self._ended

    def reset(self) -> None:
        """Forget the stage of a finished or stopped run."""
        self.stage = None
        self._ended = -1

    def announce(self, stage: Stage) -> None:
        if stage.start_at is not None:
            # a full collection now, not during the rung (llmload.loadgen.run.garbage)
            settle_before_start()
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
        self.announce(announced_stage(msg.data))

    def on_end(self, environment: Any, msg: Any, **_: Any) -> None:
        self._ended = max(self._ended, int(msg.data["seq"]))


@dataclass(slots=True)
class ProcessState:
    """What the users of one Locust process share for the run in progress, one per Locust
    environment (not module globals, so two environments in one interpreter do not mix): the
    announced stage, the current rate stage's arrivals, the prompt counter and the users' slots of
    the current stage."""

    board: StageBoard = field(default_factory=StageBoard)
    arrivals: dict[int, ArrivalQueue] = field(default_factory=dict)
    prompt_index: dict[tuple[int, float | None], Iterator[int]] = field(default_factory=dict)
    user_slot: dict[tuple[int, float | None], Iterator[int]] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget a finished or stopped run (the next one numbers its stages from 0 again)."""
        self.board.reset()
        self.arrivals.clear()
        self.prompt_index.clear()
        self.user_slot.clear()

    def next_prompt_index(self, stage: Stage, process: str) -> int:
        """The next prompt index of `process` for the stage: its users take the indices in turn
        from the first at every stage, so request i of a rung draws the same lengths at every rung
        (its prompt is its own: llmload.loadgen.request.users.prompt_key; the determinism probes'
        prompt i is the same at every rung); several processes take disjoint shares of the one
        sequence (`slot_indices`)."""
        key = (stage.seq, stage.start_at)  # a new run restarts seq at 0; start_at tells it apart
        if key not in self.prompt_index:
            self.prompt_index.clear()
            per_slot = None if stage.deadline is not None else stage.requests_per_user
            self.prompt_index[key] = slot_indices(_slots(stage, process), stage.users, per_slot)
        return next(self.prompt_index[key])

    def next_user_slot(self, stage: Stage, process: str) -> int:
        """A user's slot in the stage: the users of `process` take its slots [lo, hi) in turn (a
        session's id and text are drawn from its slot, llmload.loadgen.workload.sessions)."""
        key = (stage.seq, stage.start_at)
        if key not in self.user_slot:
            self.user_slot.clear()
            self.user_slot[key] = itertools.count(_slots(stage, process)[0])
        return next(self.user_slot[key])


def _slots(stage: Stage, process: str) -> tuple[int, int]:
    """The user slots [lo, hi) of `process` in the stage (all of them in a local run)."""
    lo, hi = (stage.slots or {}).get(process, (0, stage.users))
    return lo, hi


def process_state(environment: Any) -> ProcessState:
    """The environment's ProcessState (made on first use)."""
    state = getattr(environment, "llmload_state", None)
    if state is None:
        state = environment.llmload_state = ProcessState()
    return state
