"""The simulator's HTTP connections, held as a real server holds them, and logged as truth.

- Every accepted connection gets an id and a truth line `{"type": "connection", "id",
  "accepted", "peer_port", "tls"}` written when the connection is established (after the TLS
  handshake for HTTPS); every request line names the connection that served it
  (`"connection": id`), so a test counts connections exactly and matches them with the client's
  (`RequestRecord.conn_port` is the `peer_port` seen here), and when the request reached the
  server (`"received"`: the kernel's receive stamp of the bytes that completed its headers, where
  the listening socket is a `StampingListener`, else when the server read them). `arrival` is when
  its handler started: later, by however long the server's event loop was busy with other
  connections (a burst of requests, the ends of other streams).
- The server's limits, as real servers set them: `--keep-alive-timeout S` closes a connection
  idle for S seconds (llama-server: 5), `--max-requests-per-connection N` answers the N-th
  request of a connection with `Connection: close` and closes it; with either, responses carry
  `Keep-Alive: timeout=S, max=<requests left>` as cpp-httplib (llama-server) sends it.
  `--close-after-stream` (the server handler) closes after every stream without announcing it.
"""

from __future__ import annotations

import itertools
import socket
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from llmload.core.kernel_stamps import ANCILLARY_SIZE, enable_stamps, stamp_of
from llmload.sim.aiohttp_adapter import requests_parsed, transport_socket
from llmload.sim.config import SimConfig
from llmload.sim.truth import TruthLog


class _StampedConnection(socket.socket):
    """An accepted connection that keeps the kernel receive stamp of the data it read last."""

    rx_time: float | None = None

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.recvmsg(bufsize, ANCILLARY_SIZE, flags)
        self.rx_time = stamp_of(ancillary)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:  # asyncio's TLS reads
        view = memoryview(buffer)[:nbytes] if nbytes else buffer
        n, ancillary, _, _ = self.recvmsg_into([view], ANCILLARY_SIZE, flags)
        self.rx_time = stamp_of(ancillary)
        return n


class StampingListener(socket.socket):
    """A listening socket whose accepted connections carry kernel receive stamps."""

    def accept(self) -> tuple[socket.socket, Any]:
        plain, addr = super().accept()
        conn = _StampedConnection(self.family, self.type, self.proto, fileno=plain.detach())
        enable_stamps(conn)
        return conn, addr


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound `StampingListener` for host:port (port 0: the OS picks one)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = StampingListener(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    return sock


def _rx_time(handler: RequestHandler) -> float | None:
    """The kernel receive stamp of the connection's latest read, if it has stamps."""
    return getattr(transport_socket(handler), "rx_time", None)


@dataclass(slots=True)
class Connection:
    id: int
    accepted: float
    requests: int = 0


class ConnectionTracker:
    """Ids, truth lines and limits of the server's connections (module docstring)."""

    def __init__(self, config: SimConfig, truth: TruthLog | None) -> None:
        self.config = config
        self.truth = truth
        self._ids = itertools.count(1)
        self._open: dict[Any, Connection] = {}  # aiohttp RequestHandler -> its connection
        self._received: dict[Any, float] = {}  # handler -> when its next request's first bytes came

    def watch(self, server: web.Server) -> None:
        """Hook the aiohttp server's connection events (call after `AppRunner.setup()`)."""
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            self._accepted(handler, transport)
            made(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None) -> None:
            self._open.pop(handler, None)
            self._received.pop(handler, None)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign,assignment]
        data_received = RequestHandler.data_received
        received = self._received

        def stamped(handler: RequestHandler, data: bytes) -> None:
            t, before = time.time(), requests_parsed(handler)
            data_received(handler, data)
            if requests_parsed(handler) > before:  # these bytes completed a request's headers
                stamp = _rx_time(handler)
                received.setdefault(handler, t if stamp is None else stamp)

        RequestHandler.data_received = stamped  # type: ignore[method-assign,assignment]  # the only server

    def _accepted(self, handler: Any, transport: Any) -> None:
        conn = Connection(next(self._ids), time.time())
        self._open[handler] = conn
        if self.truth is not None:
            peer = transport.get_extra_info("peername")
            self.truth.connection(
                {
                    "id": conn.id,
                    "accepted": conn.accepted,
                    "peer_port": peer[1] if isinstance(peer, tuple) and len(peer) > 1 else None,
                    "tls": transport.get_extra_info("sslcontext") is not None,
                }
            )

    def id_of(self, request: web.BaseRequest) -> int | None:
        conn = self._open.get(request.protocol)
        return None if conn is None else conn.id

    def received(self, request: web.BaseRequest) -> float | None:
        """When the request's first bytes were received (taken: the next request gets its own)."""
        return self._received.pop(request.protocol, None)

    async def on_prepare(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Count the connection's requests; apply and announce the limits on each response."""
        conn = self._open.get(request.protocol)
        if conn is None:
            return
        conn.requests += 1
        cap, timeout = self.config.max_requests_per_connection, self.config.keep_alive_timeout
        if cap is not None and conn.requests >= cap:
            response.force_close()
            response.headers["Connection"] = "close"  # aiohttp closes without saying so
            return
        params = [] if timeout is None else [f"timeout={timeout:g}"]
        if cap is not None:
            params.append(f"max={cap - conn.requests}")
        if params:
            response.headers["Keep-Alive"] = ", ".join(params)
