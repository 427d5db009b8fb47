"""Worker clocks: the probe arithmetic (llmload.core.clock), the master's measurement over messages
(llmload.loadgen.run.clock_sync, against a fake fleet whose clocks and delays are set), and the note
under the table for a rung whose offsets were known loosely (llmload.analysis.run.clocks)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest

from llmload.analysis.run.clocks import clock_notes, rung_clock_uncertainty
from llmload.core import clock
from llmload.core.clock import ClockSample, best_sample
from llmload.core.files.run_info import RunInfo, RunStage
from llmload.core.names import MEASURE_PHASE
from llmload.loadgen.run import clock_sync
from llmload.loadgen.run.clock_sync import MSG_CLOCK_OFFSET, MSG_CLOCK_PROBE, ClockSync, WorkerClockError


def test_a_probe_gives_the_offset_within_half_its_round_trip():
    # worker 0.2 s ahead; the probe took 1 ms out and 3 ms back
    sample = ClockSample(t_sent=100.0, t_worker=100.001 + 0.2, t_back=100.004)
    assert sample.rtt == pytest.approx(0.004)
    assert sample.uncertainty == pytest.approx(0.002)
    assert sample.offset == pytest.approx(0.199)  # 1 ms off the truth: within +-2 ms
    assert abs(sample.offset - 0.2) <= sample.uncertainty


def test_the_best_probe_is_the_shortest_round_trip():
    slow = ClockSample(0.0, 0.3, 0.2)
    fast = ClockSample(1.0, 1.0015, 1.002)
    assert best_sample([slow, fast]) is fast
    assert best_sample([]) is None


def test_wall_is_the_raw_clock_less_the_offset():
    try:
        clock.set_offset(0.2)
        assert clock.offset() == 0.2
        assert clock.wall() == pytest.approx(time.time() - 0.2, abs=0.01)
    finally:
        clock.set_offset(0.0)
    assert clock.wall() == pytest.approx(time.time(), abs=0.01)


class FakeFleet:
    """A master's runner whose workers answer probes on their own clocks (offset_s ahead of the
    master's), each leg taking `delay_s`; `None` delay: the worker never answers."""

    def __init__(self, workers: dict[str, tuple[float, float | None]]) -> None:
        self.workers = workers
        self.clients = dict.fromkeys(workers)
        self.set: dict[str, float] = {}
        self.sync = ClockSync(self)

    def send_message(self, msg_type: str, data: dict, client_id: str) -> None:
        offset_s, delay_s = self.workers[client_id]
        if msg_type == MSG_CLOCK_OFFSET:
            self.set[client_id] = data["offset"]
            return
        assert msg_type == MSG_CLOCK_PROBE
        if delay_s is not None:
            gevent.spawn(self._answer, client_id, data["probe"], offset_s, delay_s)

    def _answer(self, worker: str, probe: int, offset_s: float, delay_s: float) -> None:
        gevent.sleep(delay_s)
        reply = {"probe": probe, "t": time.time() + offset_s}
        gevent.sleep(delay_s)
        self.sync.on_reply(None, SimpleNamespace(node_id=worker, data=reply))


def test_the_master_measures_and_sends_each_workers_offset():
    fleet = FakeFleet({"ahead": (0.2, 0.001), "behind": (-0.2, 0.001), "same": (0.0, 0.0)})
    fleet.sync.start()
    for worker, (offset_s, _) in fleet.workers.items():
        assert fleet.set[worker] == pytest.approx(offset_s, abs=0.002)
        (estimate,) = fleet.sync.history[worker]
        assert estimate.offset_ms == pytest.approx(1000.0 * offset_s, abs=2.0)
        assert 0.0 <= estimate.uncertainty_ms < 5.0
        assert estimate.rtt_ms == pytest.approx(2 * estimate.uncertainty_ms, abs=0.01)
    assert not fleet.sync.due(time.time())  # measured just now
    assert fleet.sync.due(time.time() + clock_sync.REMEASURE_S)


def test_a_worker_that_never_answers_refuses_the_start(monkeypatch):
    monkeypatch.setattr(clock_sync, "PROBE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(clock_sync, "PROBE_WAIT_S", 0.1)
    fleet = FakeFleet({"ok": (0.0, 0.0), "mute": (0.0, None)})
    with pytest.raises(WorkerClockError, match="worker mute answered no clock probe within 0.3 s"):
        fleet.sync.start()
    assert fleet.sync.history["mute"][-1].offset_ms is None


def test_a_worker_too_far_to_time_refuses_the_start():
    fleet = FakeFleet({"far": (0.0, 0.03)})  # 60 ms there and back
    with pytest.raises(WorkerClockError, match=r"worker far: its best clock probe took 6\d\.\d ms"):
        fleet.sync.start()


def test_a_probe_lost_before_the_worker_listens_is_sent_again(monkeypatch):
    monkeypatch.setattr(clock_sync, "PROBE_WAIT_S", 0.05)
    fleet = FakeFleet({"late": (0.01, 0.0)})
    dropped = []
    send = fleet.send_message

    def drop_the_first_two(msg_type, data, client_id):
        if msg_type == MSG_CLOCK_PROBE and len(dropped) < 2:
            dropped.append(data)
            return
        send(msg_type, data, client_id)

    fleet.send_message = drop_the_first_two
    estimates = fleet.sync.measure(["late"], keep_misses=False)
    assert len(dropped) == 2
    assert estimates["late"].offset_ms == pytest.approx(10.0, abs=1.0)


def run_info(histories: dict, stages: tuple[RunStage, ...]) -> RunInfo:
    return RunInfo(Path("run_run.json"), stages, {}, clock_offsets=histories)


def entry(t: float, uncertainty_ms: float | None) -> dict:
    rtt = None if uncertainty_ms is None else 2 * uncertainty_ms
    offset = None if uncertainty_ms is None else 0.0
    return {"t": t, "offset_ms": offset, "uncertainty_ms": uncertainty_ms, "rtt_ms": rtt}


STAGES = (
    RunStage(0, 1, MEASURE_PHASE, "rung01 c1", started=10.0, finished=20.0),
    RunStage(1, 4, MEASURE_PHASE, "rung02 c4", started=30.0, finished=40.0),
)


def test_only_the_offsets_in_force_during_a_rung_count():
    history = [entry(5.0, 0.1), entry(9.0, 3.0), entry(25.0, 0.2), entry(35.0, 0.4), entry(45.0, 9.0)]
    assert rung_clock_uncertainty({"w": history}, 10.0, 20.0) == (3.0, "w")  # the latest before
    assert rung_clock_uncertainty({"w": history}, 30.0, 40.0) == (0.4, "w")  # before and during
    assert rung_clock_uncertainty({}, 30.0, 40.0) == (None, None)


def test_a_rung_with_loose_clocks_is_noted_and_a_tight_one_is_not():
    tight = [entry(9.0, 0.1), entry(29.0, 0.2)]
    loose = [entry(9.0, 0.1), entry(29.0, 2.5)]
    (note,) = clock_notes(run_info({"w1": tight, "w2": loose}, STAGES))
    assert note.startswith("rung02 c4: worker w2's clock was known only to +-2.5 ms")
    assert "run the workers nearer the master" in note
    assert clock_notes(run_info({"w1": tight}, STAGES)) == []
    assert clock_notes(run_info({}, STAGES)) == [] and clock_notes(None) == []


def test_a_rung_whose_worker_answered_no_probe_is_noted():
    history = [entry(9.0, 0.1), entry(29.0, None)]
    (note,) = clock_notes(run_info({"w": history}, STAGES))
    assert note.startswith("rung02 c4: worker w's clock was not measured")
