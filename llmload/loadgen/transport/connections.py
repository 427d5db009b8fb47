"""The connections of one user: pooled keep-alive (the default) or a new one per request, when
and why a new connection was opened, and what opening it cost.

`UserConnections(http)` takes over the connection pool of a geventhttpclient `HTTPClient` (a
user's, held by its `Transport`: `llmload.loadgen.transport.exchange`):

- `keep-alive`: the user's connection is reused from request to request, as vLLM `bench serve`,
  AIPerf, guidellm and production clients do. Before reuse it is checked the way urllib3 does:
  a pooled connection must not be readable (readable means the server closed it, EOF, or sent
  something unasked); a closed one is replaced by a new connection. The server's own limits are
  honoured: `Connection: close` on a response ends the connection after it, and `Keep-Alive:
  timeout=N, max=M` makes a connection idle for N s (less `EXPIRY_MARGIN_S`), or used for M more
  requests, be replaced rather than reused.
- `close`: every request is sent with `Connection: close` on a new connection (what a fresh
  browser or mobile client pays).

Every lease says whether the connection was reused, and for a new one the time of its setup:
`connect_ms` (name lookup + TCP connect) and `tls_ms` (TLS handshake). Both are spent after the
request's t0, so they are inside its TTFT, as in vLLM. Both are wall times of a greenlet: when
users start at once, each connect lets the others run before it resumes, so `connect_ms` also
holds their turns. `handshake_ms` is the TCP handshake as the kernel timed it (Linux `TCP_INFO`:
the round trip of the SYN), the connection's own cost whatever the event loop did meanwhile.
`reconnect` says why a user with a connection opened another: `closed` (the server closed it:
found by the check, or announced by `Connection: close`), `expired` (its `Keep-Alive` timeout or
max was reached), `resent` (the request went out on a pooled connection the server had closed,
and nothing came back: it was resent once on a new connection, `Transport.exchange`), `error`
(the previous request failed and its connection was dropped).
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import gevent.queue
from gevent.monkey import get_original
from geventhttpclient.client import HTTPClient
from geventhttpclient.connectionpool import SSLConnectionPool

from llmload.core.config import CONNECTION_CLOSE, CONNECTION_KEEP_ALIVE
from llmload.loadgen.transport.ghc_adapter import (
    idle_sockets,
    new_socket,
    pool_closed,
    pool_of,
    pool_semaphore,
)
from llmload.loadgen.transport.send_gate import send_gate

EXPIRY_MARGIN_S = 0.25  # a connection this close to the server's Keep-Alive timeout is not reused
_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux only
_TCP_INFO_RTT = struct.Struct("=68xI")  # struct tcp_info: 8 u8 fields, 15 u32 fields, then tcpi_rtt (µs)
_select = get_original("select", "select")  # a real non-blocking poll, not gevent's cooperative one
_PARAM = re.compile(r"\s*(timeout|max)\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)

CLOSED, EXPIRED, RESENT, ERROR = "closed", "expired", "resent", "error"


def keep_alive_limits(header: str | None) -> tuple[float | None, int | None]:
    """(timeout s, max requests) of a `Keep-Alive` response header; None for what it lacks."""
    timeout: float | None = None
    max_requests: int | None = None
    for part in (header or "").split(","):
        m = _PARAM.match(part)
        if m and m.group(1).lower() == "timeout":
            timeout = float(m.group(2))
        elif m:
            max_requests = int(float(m.group(2)))
    return timeout, max_requests


def is_dropped(sock: Any) -> bool:
    """True when an idle pooled socket cannot carry a request: closed here, readable (the server
    closed it or sent something unasked), or holding undelivered TLS data."""
    try:
        if sock.fileno() < 0:
            return True
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():
            return True
        readable, _, _ = _select([sock], [], [], 0.0)
        return bool(readable)
    except (OSError, ValueError):
        return True


@dataclass(slots=True)
class Lease:
    """How one request got its connection."""

    reused: bool
    connect_ms: float | None = None  # new connection: name lookup + TCP connect
    handshake_ms: float | None = None  # new connection: TCP handshake, kernel-timed
    tls_ms: float | None = None  # new TLS connection: the handshake
    reconnect: str | None = None  # why a user that had a connection opened a new one
    port: int | None = None  # the client's local port: names the connection


def handshake_ms(sock: Any) -> float | None:
    """The round trip of a just-opened TCP connection's handshake, as the kernel timed it (its
    first RTT sample, `tcpi_rtt` of Linux `TCP_INFO`, in µs), in ms; None where it cannot tell."""
    if _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_RTT.size)
        rtt_us: int = _TCP_INFO_RTT.unpack_from(info)[0]
    except (OSError, struct.error, AttributeError, TypeError):
        return None
    return round(rtt_us / 1000.0, 3)


@dataclass(slots=True)
class _Conn:
    port: int | None
    idle_since: float = 0.0
    idle_timeout: float | None = None  # the server's Keep-Alive timeout
    requests_left: int | None = None  # the server's Keep-Alive max


class UserConnections:
    """The connection pool of one user's HTTPClient, under llmload's rules (module docstring)."""

    def __init__(self, http: HTTPClient, mode: str = CONNECTION_KEEP_ALIVE) -> None:
        pool = pool_of(http)
        self.mode = mode
        self.lease: Lease | None = None
        self._pool = pool
        self._semaphore = pool_semaphore(pool)
        self._idle = idle_sockets(pool)
        self._conns: dict[Any, _Conn] = {}
        self._current: Any = None
        self._out: Any = None  # the socket handed out, until the pool gets it back
        self._lost: str | None = None  # why the user's last connection ended
        self._had_connection = False
        self._tls_s = 0.0
        pool.get_socket = self._get_socket
        pool.return_socket = self._return_socket
        pool.release_socket = self._release_socket
        if isinstance(pool, SSLConnectionPool):
            wrap = pool.ssl_context.wrap_socket

            def timed_wrap(sock: Any, *args: Any, **kw: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return wrap(sock, *args, **kw)  # handshakes on connect
                finally:
                    self._tls_s += time.perf_counter() - t0

            pool.ssl_context.wrap_socket = timed_wrap

    @property
    def request_headers(self) -> dict[str, str]:
        """Headers the mode adds to every request."""
        return {"Connection": "close"} if self.mode == CONNECTION_CLOSE else {}

    def note_response(self, resp: Any) -> None:
        """Keep the server's `Keep-Alive` limits for the connection that carried `resp`."""
        conn = self._conns.get(self._current)
        header = resp.get("keep-alive")
        if conn is not None and isinstance(header, str):
            timeout, max_requests = keep_alive_limits(header)
            conn.idle_timeout = timeout if timeout is not None else conn.idle_timeout
            conn.requests_left = max_requests if max_requests is not None else conn.requests_left

    def failed(self) -> None:
        """The request just ended in failure: if that dropped its connection, say so next time."""
        if self._lost is not None:
            self._lost = ERROR

    def resending(self) -> None:
        """The request is about to be resent because its pooled connection was found closed."""
        self._lost = RESENT

    def abandon(self) -> None:
        """The exchange ended by an exception: a connection still handed out (the request was
        interrupted, by its total timeout or a kill, while it was being written, before any
        response took the connection over) is closed and its slot freed, else the pool, which
        holds one, would wait for it forever."""
        if self._out is not None:
            self._release_socket(self._out)

    # --- the pool's hooks ---------------------------------------------------------------------

    def _stale(self, sock: Any, conn: _Conn | None) -> str | None:
        if conn is None:
            return CLOSED
        if conn.requests_left is not None and conn.requests_left <= 0:
            return EXPIRED
        idle = time.monotonic() - conn.idle_since
        if conn.idle_timeout is not None and idle >= conn.idle_timeout - EXPIRY_MARGIN_S:
            return EXPIRED
        return CLOSED if is_dropped(sock) else None

    def _get_socket(self) -> Any:
        self._semaphore.acquire()
        if pool_closed(self._pool):
            self._semaphore.release()
            raise RuntimeError("connection pool closed")
        while True:
            try:
                sock = self._idle.get(block=False)
            except gevent.queue.Empty:
                break
            conn = self._conns.pop(sock, None)
            why = self._stale(sock, conn) if self.mode == CONNECTION_KEEP_ALIVE else CLOSED
            if why is None and conn is not None:
                if conn.requests_left is not None:
                    conn.requests_left -= 1
                self._conns[sock] = conn
                self._current = self._out = sock
                self.lease = Lease(reused=True, port=conn.port)
                return sock
            self._lost = why
            _close(sock)
        return self._open()

    def _open(self) -> Any:
        pool = self._pool
        self._tls_s = 0.0
        t0 = time.perf_counter()
        try:
            sock = new_socket(pool)
        except BaseException:
            self._semaphore.release()
            raise
        setup = time.perf_counter() - t0
        tls = self._tls_s if isinstance(pool, SSLConnectionPool) else None
        try:
            port = int(sock.getsockname()[1])
        except (OSError, IndexError, TypeError, ValueError):
            port = None
        reconnect = self._lost if self._had_connection and self.mode == CONNECTION_KEEP_ALIVE else None
        self.lease = Lease(
            reused=False,
            connect_ms=round((setup - (tls or 0.0)) * 1000.0, 3),
            handshake_ms=handshake_ms(sock),
            tls_ms=None if tls is None else round(tls * 1000.0, 3),
            reconnect=reconnect,
            port=port,
        )
        self._lost = None
        self._had_connection = True
        self._conns[sock] = _Conn(port)
        self._current = self._out = sock
        send_gate().wait_turn()  # the connect yielded: the request is written in a later turn, in line
        return sock

    def _return_socket(self, sock: Any) -> None:
        """A complete response left the connection reusable: pool it, idle from now."""
        self._out = None
        conn = self._conns.get(sock)
        if conn is not None:
            conn.idle_since = time.monotonic()
        if pool_closed(self._pool):
            self._conns.pop(sock, None)
            _close(sock)
            return
        self._idle.put(sock)
        self._semaphore.release()

    def _release_socket(self, sock: Any) -> None:
        """The connection is done (the server said close, or the message broke): close it."""
        self._out = None
        if self._conns.pop(sock, None) is not None:
            self._lost = CLOSED
        _close(sock)
        if not pool_closed(self._pool):
            self._semaphore.release()


def _close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.close()
