"""Worker clocks put on the master's: measured over Locust's own messages, sent to each worker.

A distributed run announces instants of the master's clock (a stage's common start, its deadline,
rate arrivals) and puts every worker's records side by side in one rung, so a worker whose clock
is off would start its users early or late and stamp its records on another time line
(`llmload.core.clock` says why every wall-clock read of a worker goes through `wall()`). The
master measures each worker's offset as NTP does, on its own messages:
- `llmload_clock_probe` (master -> one worker): `{probe}`, sent at the master's t1;
- `llmload_clock_reply` (worker -> master): `{probe, t}`, t the worker's raw clock on receipt;
  the master stamps its arrival t3; offset = t - (t1 + t3) / 2, within +-(t3 - t1) / 2;
- `llmload_clock_offset` (master -> that worker): `{offset}`, the estimate of its best probe (the
  shortest round trip of `PROBES`), which the worker takes (`llmload.core.clock.set_offset`).

When (`ClockSync`): at the run's start, where a worker that answers no probe within
`PROBE_TIMEOUT_S`, or whose best round trip exceeds `MAX_RTT_S`, refuses the start
(`WorkerClockError`: its offset would be known too loosely to start a rung together); when a
worker connects; before every stage; and every `REMEASURE_S` within one (a soak is one stage).
Each measurement is kept per worker (`history`: the master's time, offset, uncertainty, round
trip, or why there is none) for the run file. A local run has no worker: nothing is sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult

from llmload.core import clock
from llmload.core.clock import ClockSample, best_sample

MSG_CLOCK_PROBE = "llmload_clock_probe"
MSG_CLOCK_REPLY = "llmload_clock_reply"
MSG_CLOCK_OFFSET = "llmload_clock_offset"
PROBES = 8  # probes per worker and measurement; the shortest round trip's is kept
PROBE_TIMEOUT_S = 5.0  # a worker that answers no probe within this is refused at the start
PROBE_WAIT_S = 0.5  # one probe's answer is waited for this long, then another is sent
MAX_RTT_S = 0.050  # a best round trip above this refuses the start (offset known only to +-25 ms)
REMEASURE_S = 60.0  # within a stage, the offsets are measured again this often

log = logging.getLogger("llmload")


class WorkerClockError(Exception):
    """A worker's clock cannot be put on the master's closely enough to start the run."""


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """One measurement of one worker's clock, on the master's clock (`t`), in ms."""

    t: float
    offset_ms: float | None  # the worker's clock minus the master's; None: no probe answered
    uncertainty_ms: float | None  # half the best round trip: the offset is within +- this
    rtt_ms: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 6),
            "offset_ms": self.offset_ms,
            "uncertainty_ms": self.uncertainty_ms,
            "rtt_ms": self.rtt_ms,
        }


def estimate_of(t: float, sample: ClockSample | None) -> ClockEstimate:
    """The estimate a measurement's best probe gives (None: no answer), rounded to the microsecond."""
    if sample is None:
        return ClockEstimate(t, None, None, None)
    return ClockEstimate(
        t,
        round(1000.0 * sample.offset, 3),
        round(1000.0 * sample.uncertainty, 3),
        round(1000.0 * sample.rtt, 3),
    )


@dataclass(slots=True)
class ClockSync:
    """A master's measurements of its workers' clocks (see the module docstring); `runner` is
    Locust's MasterRunner (its `clients`, its `send_message` to one of them)."""

    runner: Any
    history: dict[str, list[ClockEstimate]] = field(default_factory=dict)  # worker id -> measurements
    measured_at: float = float("-inf")  # the master's time of the latest measurement of every worker
    _waiting: dict[tuple[str, int], tuple[float, AsyncResult]] = field(default_factory=dict)
    _probe: int = 0

    def on_reply(self, environment: Any, msg: Any, **_: Any) -> None:
        """A worker's answer to a probe (`llmload_clock_reply`), stamped on arrival."""
        t_back = time.time()
        data = msg.data
        waiting = self._waiting.pop((msg.node_id, data.get("probe")), None)
        if waiting is not None:
            t_sent, result = waiting
            result.set(ClockSample(t_sent, float(data["t"]), t_back))

    def on_connect(self, client_id: str, **_: Any) -> None:
        """A worker connected (Locust's `worker_connect`): measure it in the background. Its init
        may not be done yet: the probes it drops before its handlers are registered are sent
        again, and a worker that answers none keeps no entry (the run's start refuses it)."""
        gevent.spawn(self.measure, [client_id], keep_misses=False)

    def workers(self) -> list[str]:
        """The ids of the master's connected workers."""
        return list(self.runner.clients)

    def _sample(self, worker: str, budget_s: float) -> ClockSample | None:
        """One probe of `worker`, waited for at most `budget_s` (None: no answer by then)."""
        self._probe += 1
        result: AsyncResult = AsyncResult()
        self._waiting[(worker, self._probe)] = (time.time(), result)
        self.runner.send_message(MSG_CLOCK_PROBE, {"probe": self._probe}, client_id=worker)
        try:
            sample: ClockSample = result.get(timeout=budget_s)
            return sample
        except gevent.Timeout:
            return None
        finally:
            self._waiting.pop((worker, self._probe), None)

    def measure(
        self, workers: Iterable[str] | None = None, keep_misses: bool = True
    ) -> dict[str, ClockEstimate]:
        """Measure `workers` (default: every connected one): PROBES answered probes each, within
        PROBE_TIMEOUT_S (a probe unanswered after PROBE_WAIT_S is replaced); send each its offset
        and keep the estimates. A worker that answers none keeps its last offset (and, with
        `keep_misses`, an entry saying so)."""
        every = workers is None
        estimates: dict[str, ClockEstimate] = {}
        for worker in self.workers() if workers is None else list(workers):
            samples: list[ClockSample] = []
            until = time.monotonic() + PROBE_TIMEOUT_S
            while len(samples) < PROBES and (left := until - time.monotonic()) > 0:
                if (sample := self._sample(worker, min(left, PROBE_WAIT_S))) is not None:
                    samples.append(sample)
            best = best_sample(samples)
            estimate = estimates[worker] = estimate_of(time.time(), best)
            if best is not None or keep_misses:
                self.history.setdefault(worker, []).append(estimate)
            if best is not None:
                self.runner.send_message(MSG_CLOCK_OFFSET, {"offset": best.offset}, client_id=worker)
        if every:
            self.measured_at = time.time()
        return estimates

    def start(self) -> None:
        """The run's first measurement: raises WorkerClockError for a worker the run cannot trust."""
        for worker, estimate in self.measure().items():
            if estimate.rtt_ms is None:
                raise WorkerClockError(
                    f"worker {worker} answered no clock probe within {PROBE_TIMEOUT_S:g} s: is it an "
                    "llmload worker of the same version (the same locustfile)?"
                )
            if estimate.rtt_ms > 1000.0 * MAX_RTT_S:
                raise WorkerClockError(
                    f"worker {worker}: its best clock probe took {estimate.rtt_ms:.1f} ms there and back "
                    f"(over {1000.0 * MAX_RTT_S:g} ms), so its clock is known only to "
                    f"+-{estimate.uncertainty_ms:.1f} ms: run it nearer the master, or less loaded"
                )

    def due(self, now: float) -> bool:
        """Whether the offsets are older than REMEASURE_S (and there is a worker to measure)."""
        return now - self.measured_at >= REMEASURE_S and bool(self.workers())

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        """Every worker's measurements, for the run file (`clock_offsets`)."""
        return {worker: [e.as_json() for e in estimates] for worker, estimates in self.history.items()}


def on_probe(environment: Any, msg: Any, **_: Any) -> None:
    """A worker's side of a probe: its raw clock at once, back to the master."""
    t = time.time()
    environment.runner.send_message(MSG_CLOCK_REPLY, {"probe": msg.data["probe"], "t": t})


def on_offset(environment: Any, msg: Any, **_: Any) -> None:
    """A worker takes the master's measure of its clock."""
    clock.set_offset(msg.data["offset"])
