"""Kernel receive timestamps: when a server's message reached this machine, not when the load
generator got round to reading it.

A gevent process reads a socket when its event loop schedules the greenlet: if another request
is being recorded, the garbage collector runs, or the OS runs another process, a message that
arrived at t is read (and would be stamped) at t + a few ms. That is the load generator's delay,
not the server's latency, and it is exactly what inflates TTFT in a saturated client. On Linux,
`SO_TIMESTAMPNS` makes the kernel stamp every received packet (CLOCK_REALTIME, ns) and return
the stamp of the last packet a `recvmsg` consumed; `StampedSocket.recv` keeps it.

`stamp_receive_times(http)` makes a geventhttpclient `HTTPClient` open its plain-TCP connections
as `StampedSocket`s. A `ReceiveClock`, entered around one request's exchange, receives the stamps
of that greenlet's reads, turns them into seconds since the request's t0, and measures the
generator's own read delay (user-space read time - kernel stamp) on the way. Where stamps are not
available (TLS connections, whose reads bypass `recv`; not Linux) the clock falls back to the time
of the read, and says so (`ReceiveClock.source`).
"""

from __future__ import annotations

import sys
import time
from resource import RUSAGE_THREAD, getrusage
from typing import Any

import gevent.socket
from gevent import get_hub, getcurrent
from geventhttpclient.client import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool

from llmload.core.kernel_stamps import ANCILLARY_SIZE, enable_stamps, stamp_of
from llmload.loadgen.transport.ghc_adapter import patch_socket_factory, pool_of

CLOCK_SLACK_S = 0.001  # time.time() vs perf_counter() disagreement tolerated before a stamp is distrusted
KERNEL, USER = "kernel", "user"
WAKE_S = 0.0001  # from a packet's arrival to the return of the poll it woke, at the most assumed
_READING: dict[Any, ReceiveClock] = {}  # greenlet -> the clock of the request it is reading


class PollClock:
    """When the hub's polls returned. Data readable now arrived after the previous poll's return
    (a socket that poll found readable was read after it) or, when the latest poll waited, at
    most WAKE_S before that poll's return (`ReceiveClock.note_read`). One per hub (`poll_clock()`)."""

    __slots__ = ("_slept", "_returned", "_before", "_waited", "_prepare", "_check")

    def __init__(self, loop: Any) -> None:
        self._returned = self._before = float("-inf")
        self._slept = 0  # the thread's voluntary context switches when the poll began
        self._waited = False
        # the prepare runs last before the poll (after gevent's callbacks), the check first after it
        self._prepare = loop.prepare(ref=False, priority=-2)
        self._check = loop.check(ref=False, priority=2)
        self._prepare.start(self._on_prepare)
        self._check.start(self._on_check)

    def _on_prepare(self) -> None:
        self._slept = getrusage(RUSAGE_THREAD).ru_nvcsw

    def _on_check(self) -> None:
        self._before, self._returned = self._returned, time.perf_counter()
        self._waited = getrusage(RUSAGE_THREAD).ru_nvcsw != self._slept

    @property
    def returned(self) -> float:
        """perf_counter time the latest poll returned."""
        return self._returned


_POLL_CLOCKS: dict[Any, PollClock] = {}  # gevent hub -> its poll clock


def poll_clock() -> PollClock:
    """The current hub's `PollClock`, started on first use."""
    hub = get_hub()
    clock = _POLL_CLOCKS.get(hub)
    if clock is None:
        clock = _POLL_CLOCKS[hub] = PollClock(hub.loop)
    return clock


class StampedSocket(gevent.socket.socket):  # type: ignore[misc]
    """A gevent TCP socket whose `recv` hands the kernel's receive time of the data it returned
    (the last packet's, when one read spans several) to the `ReceiveClock` of the greenlet
    reading it."""

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data: bytes
        clock = _READING.get(getcurrent())
        if clock is None:
            data, _, _, _ = self.recvmsg(bufsize, ANCILLARY_SIZE, flags)
            return data
        began = time.perf_counter()
        data, ancillary, _, _ = self.recvmsg(bufsize, ANCILLARY_SIZE, flags)
        clock.note_read(began, ancillary, whole=len(data) < bufsize)
        return data


def _create_stamped_socket(family: int, socktype: int, protocol: int) -> gevent.socket.socket:
    sock = StampedSocket(family, socktype, protocol)
    enable_stamps(sock)  # without stamps the clock falls back to read times
    return sock


def stamp_receive_times(http: HTTPClient) -> bool:
    """Make `http`'s new connections record kernel receive times; False where they cannot
    (not Linux, TLS, or a geventhttpclient whose pool lacks the socket factory hook)."""
    pool = pool_of(http)
    if (
        not sys.platform.startswith("linux")
        or not isinstance(pool, ConnectionPool)
        or isinstance(pool, SSLConnectionPool)
    ):
        return False
    return patch_socket_factory(pool, _create_stamped_socket)


class ReceiveClock:
    """Arrival times of one request's messages, in seconds since its t0 (`perf_counter`).

    Used as a context manager around the request's exchange, in the greenlet that reads it.
    `now()` is called right after a read returned a message: it gives the kernel stamp of the
    latest read when the connection has stamps, else the current time. `max_delay` is the
    longest the generator took from a message's arrival to reading it (kernel stamps only)."""

    __slots__ = (
        "t0",
        "t_wall",
        "rx_time",
        "max_delay",
        "_reader",
        "_polls",
        "_emptied",
        "_previous",
        "_floor",
    )

    def __init__(self, t_wall: float, t0: float) -> None:
        self.t_wall = t_wall  # time.time() taken together with t0
        self.t0 = t0
        self.rx_time: float | None = None  # epoch seconds of the latest stamped read
        self.max_delay = 0.0
        self._reader: Any = None
        self._polls = poll_clock()
        self._emptied = t0  # perf_counter: the stream held nothing then (no answer before the request)
        self._previous = t0  # `_emptied` as the latest read began
        self._floor = t0  # the earliest the latest read's data can have arrived (perf_counter)

    def __enter__(self) -> ReceiveClock:
        self._reader = getcurrent()
        _READING[self._reader] = self
        return self

    def __exit__(self, *exc: object) -> None:
        _READING.pop(self._reader, None)

    def note_read(self, began: float, ancillary: list[tuple[int, int, bytes]], whole: bool) -> None:
        """A read that began at `began` (perf_counter) returned: take its kernel stamp from the
        `recvmsg` ancillary data (a read without one, the end of the connection, leaves the
        latest stamp) and the earliest its data can have arrived. `whole`: it took everything the
        socket held (it returned less than it asked), so later data arrived after `began`."""
        polls = self._polls  # the rule of PollClock's docstring, read in place: this runs once per read
        floor = polls._returned - WAKE_S if polls._waited else polls._before
        self._previous = self._emptied
        self._floor = floor if floor > self._emptied else self._emptied
        if whole:
            self._emptied = began
        stamp = stamp_of(ancillary)
        if stamp is not None:
            self.rx_time = stamp

    def slack(self, t: float) -> float:
        """For a message of the latest read timed `t` (`now()`'s value): the most by which it may
        be later than the message's true arrival, when the read took more than one (seconds)."""
        return max(0.0, t - (self._floor - self.t0))

    def since_read(self, t: float) -> float:
        """The same bound by the stream's previous read alone, without the polls: the only one
        that holds when the data became readable later than it was stamped, as when the kernel
        delivers a backlog of packets at once (`StreamAccumulator.feed_read`)."""
        return max(0.0, t - (self._previous - self.t0))

    @property
    def source(self) -> str:
        return KERNEL if self.rx_time is not None else USER

    def now(self) -> float:
        t = time.perf_counter() - self.t0
        if self.rx_time is None:
            return t
        stamped = self.rx_time - self.t_wall
        if not -CLOCK_SLACK_S <= stamped <= t + CLOCK_SLACK_S:  # wall clock stepped: distrust it
            return t
        if t - stamped > self.max_delay:
            self.max_delay = t - stamped
        return stamped
