"""Read every plain-TCP streaming response of a process inside the gevent hub, one read per
wake-up, with no greenlet switch per chunk.

The cost of a streamed token in a gevent client is not the SSE parse but the event-loop work
around each chunk: a wake-up of the request's greenlet, a switch to it and back, a `recv` that
returns the chunk and another that fails with EAGAIN, a timeout timer armed and cancelled per
wait, a `readline` per line. With one token per chunk that work is paid per token.

`StreamReader` removes it. A request whose response headers came back on a plain TCP socket
(`StampedSocket`, Linux) starts a hub I/O watcher on that socket and parks its greenlet on a
`Waiter`. When the socket is readable, the hub itself runs the watcher's callback: one
`recvmsg` (with the kernel receive stamp of that read: `llmload.core.kernel_stamps`), the bytes
fed to the response's HTTP parser (chunked framing), every complete SSE line split out at C
speed and parsed (`StreamAccumulator.feed_read`). The request's greenlet is woken once, when its
stream ended ([DONE], end of message, a malformed line, an error event, a reset). Every line of
one read gets that read's kernel stamp, as when each greenlet read its own socket; when one read
took several messages, the earlier ones are marked with how late that stamp may be for them
(`ReceiveClock.slack`).

After a loop turn that read many streams (`COLLECT_MIN_READS`), the hub waits `COLLECT_S` before
it polls again (libev's I/O collect interval): the next poll then returns the many streams whose
chunks arrived meanwhile instead of one, and the poll's cost is shared. The stamps keep the
arrival times exact; only two chunks of one stream less than `COLLECT_S` apart can share a read
(and its stamp), and a greenlet due meanwhile (a request to send) runs up to `COLLECT_S` late. A
light load never waits.

The silence limit (`timeouts.first_token` between chunks, the socket's own timeout) is checked
by one timer for all streams, every `IDLE_CHECK_S`: a stream with no data for longer than its
limit ends with `TimeoutError`, as a socket read would have.

TLS streams (their bytes must go through `ssl`) and sockets without stamps are read line by line
in the request's greenlet (`llmload.loadgen.transport.exchange`).
"""

from __future__ import annotations

import time
from typing import Any

from gevent import get_hub
from gevent.hub import Waiter
from gevent.monkey import get_original

from llmload.core.kernel_stamps import ANCILLARY_SIZE
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.transport.ghc_adapter import (
    body_buffer,
    raw_socket,
    read_timeout,
    response_parser_class,
    response_socket,
)
from llmload.loadgen.transport.receive_stamps import ReceiveClock, StampedSocket
from llmload.loadgen.transport.send_gate import send_gate

READ_SIZE = 65536  # bytes asked of one recvmsg: one read takes everything a stream has waiting
IDLE_CHECK_S = 0.1  # how often the silence limits are checked (a limit is exceeded by at most this)
COLLECT_S = 0.0002  # after a busy loop turn, let the streams' next chunks gather this long
COLLECT_MIN_READS = 8  # a turn is busy from this many reads on
_parse = response_parser_class().feed
_blocking_sleep = get_original("time", "sleep")  # holds the whole process, as libev's collect interval


class StreamEnded(Exception):
    """Raised inside the reader when a stream's HTTP message ended before [DONE]."""


class _Stream:
    """One registered response: its socket, parser, accumulator, clock and parked greenlet."""

    __slots__ = ("resp", "raw", "acc", "clock", "waiter", "idle_s", "last_read", "outcome", "watcher")

    def __init__(self, resp: Any, acc: StreamAccumulator, clock: ReceiveClock, idle_s: float) -> None:
        self.resp = resp
        self.raw = raw_socket(resp)
        self.acc = acc
        self.clock = clock
        self.waiter = Waiter()
        self.idle_s = idle_s
        self.last_read = time.perf_counter()
        self.outcome: BaseException | None = None
        self.watcher: Any = None


def _take_lines(stream: _Stream, t: float) -> bool:
    """Feed every complete line of the response's body buffer, taken by one read stamped `t`, to
    the accumulator; True at [DONE]. An incomplete last line stays in the buffer for the next read."""
    buf = body_buffer(stream.resp)
    lines: list[Any] = buf.split(b"\n")  # list[bytearray] fits no invariant list[bytes | bytearray]
    rest = lines.pop()
    if rest:
        buf[:] = rest
    else:
        buf.clear()
    if not rest and len(lines) <= 2:  # one message (and its blank line): timed by its own stamp
        return stream.acc.feed_lines(lines, t)
    clock = stream.clock
    return stream.acc.feed_read(lines, t, clock.slack(t), clock.since_read(t), not rest)


class StreamReader:
    """The streams of one gevent hub (see the module docstring)."""

    def __init__(self) -> None:
        self._hub = get_hub()
        self._streams: set[_Stream] = set()
        self._idle_timer = self._hub.loop.timer(IDLE_CHECK_S, IDLE_CHECK_S)
        self._collect = self._hub.loop.prepare(ref=False)
        self._reads = 0  # reads since the last loop turn

    def read(self, resp: Any, acc: StreamAccumulator, clock: ReceiveClock) -> None:
        """Read `resp`'s SSE body into `acc` until [DONE]; raises what a line-by-line read would:
        `MalformedStream`, `StreamErrorEvent`, `TimeoutError`, `OSError`, `HTTPParseError`, or
        `StreamEnded` when the message ended before [DONE]."""
        idle_s = read_timeout(resp)
        stream = _Stream(resp, acc, clock, idle_s if idle_s else float("inf"))
        if _take_lines(stream, clock.now()):  # body bytes that came with the headers
            return
        if resp.message_complete:
            raise StreamEnded("message ended")
        stream.watcher = self._hub.loop.io(stream.raw.fileno(), 1)
        stream.watcher.start(self._on_readable, stream)
        self._streams.add(stream)
        if not self._idle_timer.active:  # the first stream (an ended one may still be in line)
            self._idle_timer.start(self._check_idle)
            self._collect.start(self._gather)
        try:
            outcome = stream.waiter.get()
        finally:
            stream.watcher.stop()
            self._streams.discard(stream)
            if not self._streams:
                self._idle_timer.stop()
                self._collect.stop()
        if outcome is not None:
            raise outcome

    def _end(self, stream: _Stream) -> None:
        """Stop reading a stream and wake its greenlet with the stream's outcome (None: [DONE]),
        in the send gate's line when the loop's turn has no time left
        (`llmload.loadgen.transport.send_gate`)."""
        stream.watcher.stop()
        self._streams.discard(stream)  # not silent while it waits in line
        send_gate().wake(stream.waiter, stream.outcome)

    def _gather(self) -> None:
        """Prepare callback, before the hub polls: after a turn that read many streams, wait
        COLLECT_S so that the next poll returns many streams, not one (libev's I/O collect
        interval). A light load never waits: nothing else is delayed by it then."""
        if self._reads >= COLLECT_MIN_READS:
            _blocking_sleep(COLLECT_S)
        self._reads = 0

    def _on_readable(self, stream: _Stream) -> None:
        """Hub callback: one recvmsg of a stream with data, its lines parsed; wakes the stream's
        greenlet when the stream ended."""
        self._reads += 1
        try:
            began = time.perf_counter()
            data, ancillary, _, _ = stream.raw.recvmsg(READ_SIZE, ANCILLARY_SIZE)
            clock = stream.clock
            clock.note_read(began, ancillary, len(data) < READ_SIZE)
            t = clock.now()
            stream.last_read = t + clock.t0
            resp = stream.resp
            # b"": the end of the connection; the parser ends or rejects the message. The C parser's own
            # feed: HTTPResponse.feed only adds a HEAD-response case, and these are POST streams.
            _parse(resp, data)
            if not _take_lines(stream, t):
                if not resp.message_complete and data:
                    return
                stream.outcome = StreamEnded("message ended" if data else "connection closed")
        except BlockingIOError:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the request's greenlet, raised there
            stream.outcome = e
        self._end(stream)

    def _check_idle(self) -> None:
        """Timer callback: end the streams silent for longer than their limit."""
        now = time.perf_counter()
        silent = [s for s in self._streams if s.outcome is None and now - s.last_read > s.idle_s]
        for stream in silent:
            stream.outcome = TimeoutError(f"no data for {stream.idle_s:g} s")
            self._end(stream)


_READERS: dict[Any, StreamReader] = {}  # gevent hub -> its reader


def reader_for(resp: Any) -> StreamReader | None:
    """The `StreamReader` of the current hub if `resp` can be read by it (a response on a plain,
    stamped TCP socket, Linux), else None."""
    if not isinstance(response_socket(resp), StampedSocket):
        return None
    hub = get_hub()
    reader = _READERS.get(hub)
    if reader is None:
        reader = _READERS[hub] = StreamReader()
    return reader
