"""The run's one wall clock: the master's, read in any process that runs users.

A distributed run's master announces each stage's common start, its deadline and its rate
arrivals as instants of its own wall clock, and the records of every worker are put side by side
in one rung. A worker on another machine reads its own clock, which NTP keeps only within a few
milliseconds of the master's (and a badly kept one within seconds); read raw, it would start its
users early or late and stamp its records on another time line. So every wall-clock read of a
process that runs users goes through `wall()`: `time.time()` less this process's offset from the
master, which the master measures over Locust's own messages and sends (`set_offset`;
`llmload.loadgen.run.clock_sync`). In the master and in a local run the offset is 0.

Owns the corrected clock (`wall`, `set_offset`, `offset`) and the arithmetic of one clock probe
(`ClockSample`: a probe sent at the master's t1, stamped by the worker at its t2, its answer back
at the master's t3) and of its best estimate (`best_sample`: the probe of the shortest round trip,
whose answer waited least in either direction, NTP's rule). The offset is a process-wide fact, so
it is one module value, not a per-environment one: every Locust environment of a process shares
the process's clock.

Kernel receive stamps (`llmload.core.kernel_stamps`) are on the raw clock: they are compared with
a raw `time.time()` taken at the request's t0, never with `wall()`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

_offset_s = 0.0  # this process's clock minus the master's, seconds


def wall() -> float:
    """Epoch seconds on the master's clock (this process's `time.time()` less its offset)."""
    return time.time() - _offset_s


def offset() -> float:
    """This process's clock minus the master's, in seconds (0 until the master measured it)."""
    return _offset_s


def set_offset(offset_s: float) -> None:
    """Take the master's measure of this process's clock: `offset_s` = this clock minus its."""
    global _offset_s
    _offset_s = float(offset_s)


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One probe: sent at the master's `t_sent`, stamped by the worker at its own `t_worker`, its
    answer received at the master's `t_back` (all epoch seconds, each on its own clock)."""

    t_sent: float
    t_worker: float
    t_back: float

    @property
    def rtt(self) -> float:
        """The probe's round trip (s), on the master's clock alone."""
        return self.t_back - self.t_sent

    @property
    def offset(self) -> float:
        """The worker's clock minus the master's (s), assuming the two legs took equally long."""
        return self.t_worker - (self.t_sent + self.t_back) / 2.0

    @property
    def uncertainty(self) -> float:
        """How far `offset` can be from the truth (s): half the round trip, whatever the legs' split."""
        return self.rtt / 2.0


def best_sample(samples: Iterable[ClockSample]) -> ClockSample | None:
    """The probe of the shortest round trip (its offset is bounded tightest), None without any."""
    return min(samples, key=lambda s: s.rtt, default=None)
