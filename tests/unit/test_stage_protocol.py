"""The ladder's stage protocol without Locust: announce, ready, a common start, done, records,
finished, next; the ready timeout, the rate-mode slots, the stall, and stages added on the way."""

from __future__ import annotations

from dataclasses import dataclass

from llmload.core.names import WARMUP_RUNG
from llmload.loadgen.run.stage_protocol import (
    GO_MARGIN_S,
    READY_TIMEOUT_S,
    Announced,
    Finished,
    LadderDone,
    StageProtocol,
    Stalled,
    Started,
)


@dataclass(frozen=True)
class FakeStage:
    seq: int
    rung: int
    users: int
    rate: float | None = None
    start_at: float | None = None
    deadline: float | None = None
    slots: dict[str, list[int]] | None = None

    @property
    def phase(self) -> str:
        return "warmup" if self.rung == WARMUP_RUNG else "measure"


def ladder(*users: int, rate: float | None = None) -> list[FakeStage]:
    stages = [FakeStage(0, WARMUP_RUNG, users[0])]
    return stages + [FakeStage(i + 1, i, u, rate) for i, u in enumerate(users)]


def test_a_stage_starts_when_every_user_is_ready_and_ends_when_every_record_is_in() -> None:
    proto = StageProtocol(ladder(2), duration=None, stall_limit=100.0)
    assert isinstance(proto.step(0.0), Announced)
    assert proto.step(1.0) is None
    proto.ready(0, "a", "local", 1.0)
    assert proto.step(1.5) is None  # one of two users
    proto.ready(0, "a", "local", 1.6)  # a repeat does not count twice
    assert proto.step(1.7) is None
    proto.ready(0, "b", "local", 2.0)
    started = proto.step(2.0)
    assert isinstance(started, Started) and started.short == 0
    assert started.progress.stage.start_at == 2.0 + GO_MARGIN_S and started.progress.stage.deadline is None
    proto.done(0, 1, 3.0)
    proto.done(0, 1, 3.1)
    proto.recorded(WARMUP_RUNG, "warmup", 3.1)
    assert proto.step(3.2) is None  # two requests reported, one record in
    proto.recorded(WARMUP_RUNG, "warmup", 3.3)
    assert isinstance(proto.step(3.4), Finished)
    announced = proto.step(3.4)
    assert isinstance(announced, Announced) and announced.progress.stage.rung == 0


def test_the_ready_timeout_starts_the_stage_short_of_users() -> None:
    proto = StageProtocol(ladder(3), duration=None, stall_limit=100.0)
    proto.step(0.0)
    proto.ready(0, "a", "local", 1.0)
    assert proto.step(1.0 + READY_TIMEOUT_S) is None
    started = proto.step(1.0 + READY_TIMEOUT_S + 0.1)
    assert isinstance(started, Started) and started.short == 2


def test_time_based_rungs_get_a_deadline_and_rate_rungs_their_slots() -> None:
    proto = StageProtocol([FakeStage(0, 0, 3, rate=2.0)], duration=10.0, stall_limit=100.0)
    proto.step(0.0)
    for user, process in (("a", "w1"), ("b", "w1"), ("c", "w2")):
        proto.ready(0, user, process, 0.5)
    started = proto.step(0.5)
    assert isinstance(started, Started)
    stage = started.progress.stage
    assert stage.deadline == stage.start_at + 10.0
    assert stage.slots == {"w1": [0, 2], "w2": [2, 3]}


def test_a_started_stage_without_news_stalls() -> None:
    proto = StageProtocol([FakeStage(0, 0, 1)], duration=None, stall_limit=30.0)
    proto.step(0.0)
    proto.ready(0, "a", "local", 0.0)
    proto.step(0.0)
    assert proto.step(30.0) is None
    stalled = proto.step(31.0)
    assert isinstance(stalled, Stalled) and stalled.idle_s > 30.0


def test_the_ladder_ends_after_its_last_stage_and_stages_added_late_are_run() -> None:
    stages = [FakeStage(0, 0, 1)]
    proto = StageProtocol(stages, duration=None, stall_limit=30.0)

    def run_stage(now: float) -> None:
        proto.step(now)
        seq = proto.current.stage.seq
        proto.ready(seq, f"u{seq}", "local", now)
        proto.step(now)
        proto.done(seq, 0, now)
        assert isinstance(proto.step(now), Finished)

    run_stage(0.0)
    stages.append(FakeStage(1, 1, 1))  # a capacity probe planned when the first one finished
    run_stage(1.0)
    assert isinstance(proto.step(2.0), LadderDone) and isinstance(proto.step(3.0), LadderDone)


def test_settle_at_a_stop_finishes_a_complete_stage_only() -> None:
    """A stop between a stage's last record and the next step: the stage is finished as of its
    last message. Not before its start, not with a record missing, not twice."""
    proto = StageProtocol(ladder(1), duration=None, stall_limit=100.0)
    assert isinstance(proto.step(0.0), Announced)
    assert proto.settle() is None  # announced only
    proto.ready(0, "a", "local", 1.0)
    assert isinstance(proto.step(1.0), Started)
    proto.done(0, 2, 2.0)
    proto.recorded(WARMUP_RUNG, "warmup", 2.0)
    assert proto.settle() is None  # one record of two
    proto.recorded(WARMUP_RUNG, "warmup", 2.5)
    settled = proto.settle()
    assert settled is not None and settled.finished == 2.5
    assert proto.settle() is None
    assert isinstance(proto.step(3.0), Announced)  # the ladder would go on from there
