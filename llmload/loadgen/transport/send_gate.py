"""Reads before writes: the streams already running are read between the sends of a burst.

When hundreds of requests are due at once (a rung's start, or the users of a time-based rung
whose equal-length requests ended in the same step), each user builds and writes its request
(most of a millisecond of CPU) before the event loop polls again. Meanwhile the streams that
already run are not read: their chunks pile up in their sockets and a later read takes several
of them under one kernel stamp (`llmload.loadgen.transport.receive_stamps`), times that must then be
marked uncertain and are, in fact, late.

`SendGate.wait_turn()`, called by a user before it builds a request (and again once a new
connection is open, since the connect let other greenlets run), and `SendGate.wake()`, by which
the stream reader resumes the user of a finished stream (its record, then its next request),
let that work go only while the event loop's current turn has run for less than `SEND_SLICE_S`
since its poll returned. A user that comes later waits in line; after the next poll's reads (a
timer of zero seconds, of the lowest priority, so it runs after the turn's reads), the line is
released for another `SEND_SLICE_S` (at least one user per turn, so a turn of many reads never
starves the sends), and so on until it is empty. Between two polls there is thus at most about
`SEND_SLICE_S` of sending, and a stream is read at most that late by a burst; the burst itself
takes as long as its sends' CPU time plus the reads interleaved with it. A quiet loop sends at
once.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from gevent import get_hub
from gevent.hub import Waiter

from llmload.loadgen.transport.receive_stamps import PollClock, poll_clock

SEND_SLICE_S = 0.002  # the most sending between two polls (a stream read at most this late by a burst)


class SendGate:
    """The sends of one gevent hub (module docstring)."""

    def __init__(self, loop: Any, polls: PollClock) -> None:
        self._polls = polls
        self._line: deque[tuple[Waiter, Any]] = deque()
        # held by the loop (ref): a loop with nothing else to do must still release the line
        self._timer = loop.timer(0.0, priority=-2)

    def _has_time(self) -> bool:
        return not self._line and time.perf_counter() - self._polls.returned < SEND_SLICE_S

    def wait_turn(self) -> None:
        """Return when this greenlet may send: at once while the turn has time left and nobody
        waits, else when the line reaches it."""
        if self._has_time():
            return
        waiter = Waiter()
        self._enqueue(waiter, None)
        waiter.get()

    def wake(self, waiter: Waiter, value: Any) -> None:
        """From a hub callback: resume the greenlet parked on `waiter` with `value` now if the turn
        has time left, else in line (a finished stream's record and its user's next request are
        work of the same kind as a send)."""
        if self._has_time():
            waiter.switch(value)
        else:
            self._enqueue(waiter, value)

    def _enqueue(self, waiter: Waiter, value: Any) -> None:
        self._line.append((waiter, value))
        if not self._timer.active:
            self._timer.start(self._release)

    def _release(self) -> None:
        """Timer callback, after the turn's reads: let the line go for SEND_SLICE_S (one at least)."""
        began = time.perf_counter()
        while self._line:
            waiter, value = self._line.popleft()
            waiter.switch(value)  # runs the user until it waits again (its request written)
            if time.perf_counter() - began >= SEND_SLICE_S:
                break
        if self._line and not self._timer.active:
            self._timer.start(self._release)  # again after the next poll


_GATES: dict[Any, SendGate] = {}  # gevent hub -> its gate


def send_gate() -> SendGate:
    """The current hub's `SendGate`."""
    hub = get_hub()
    gate = _GATES.get(hub)
    if gate is None:
        gate = _GATES[hub] = SendGate(hub.loop, poll_clock())
    return gate
