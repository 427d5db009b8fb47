"""Every private attribute of geventhttpclient and gevent that the load generator's HTTP path
uses, each behind one named function whose docstring states the contract it relies on.

llmload takes over a user's connection pool (`llmload.loadgen.transport.connections`), makes its
sockets record kernel receive stamps (`llmload.loadgen.transport.receive_stamps`) and reads
streamed bodies in the hub (`llmload.loadgen.transport.stream_reader`); geventhttpclient offers
no public hooks for any of it. These names are private, so a release may change them:
`pyproject.toml` pins geventhttpclient to the releases `tests/unit/test_ghc_adapter_contract.py`
passed on (docs/architecture.md, "Third-party contact"), and nothing outside this module names
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.client import HTTPClient


def pool_of(http: HTTPClient) -> Any:
    """The `ConnectionPool` (or `SSLConnectionPool`) an `HTTPClient` sends every request through:
    `HTTPClient._connection_pool`, set once in its constructor; None if a release lacks it.
    Its public `get_socket`, `return_socket` and `release_socket` are the methods the client
    calls, and may be replaced on the instance."""
    return getattr(http, "_connection_pool", None)


def pool_semaphore(pool: Any) -> Any:
    """The pool's `BoundedSemaphore` (`ConnectionPool._semaphore`, created once with the pool's
    size): one acquire per socket handed out, one release per socket returned or released."""
    return pool._semaphore


def idle_sockets(pool: Any) -> Any:
    """The pool's queue of idle connections (`ConnectionPool._socket_queue`, a gevent `LifoQueue`
    created once with the pool): `get(block=False)` takes one or raises `gevent.queue.Empty`,
    `put(sock)` pools one."""
    return pool._socket_queue


def pool_closed(pool: Any) -> bool:
    """True once the pool was closed (`ConnectionPool._closed`, set by `close()`): no socket may
    be handed out or pooled after that."""
    return bool(pool._closed)


def new_socket(pool: Any) -> Any:
    """A new connection to the pool's host (`ConnectionPool._create_socket()`): name lookup, TCP
    connect with the pool's connection timeout, the network timeout set, and, for an
    `SSLConnectionPool`, the TLS handshake through `pool.ssl_context.wrap_socket`. Takes no
    semaphore: the caller holds it."""
    return pool._create_socket()


def patch_socket_factory(pool: Any, factory: Callable[[int, int, int], Any]) -> bool:
    """Make the pool create its TCP sockets with `factory(family, type, proto)` instead of
    `gevent.socket.socket` (`ConnectionPool._create_tcp_socket`, called by `_create_socket` for
    each address tried); False, and nothing changed, where a release has no such hook."""
    if not hasattr(pool, "_create_tcp_socket"):
        return False
    pool._create_tcp_socket = factory
    return True


def response_socket(resp: Any) -> Any:
    """The gevent socket a streamed response reads from (`HTTPSocketResponse._sock`): the pooled
    connection's socket while the body is unread, None once the response was released."""
    return getattr(resp, "_sock", None)


def raw_socket(resp: Any) -> Any:
    """The non-blocking OS socket under the response's gevent socket (gevent's `socket._sock`, a
    `_socket.socket` set non-blocking when the gevent socket is made): read it without the hub's
    cooperative waits; it has the gevent socket's file descriptor."""
    return resp._sock._sock


def read_timeout(resp: Any) -> float | None:
    """The silence limit of the response's socket: its `gettimeout()` (the pool's network
    timeout), None for none."""
    timeout: float | None = resp._sock.gettimeout()
    return timeout


def body_buffer(resp: Any) -> bytearray:
    """The response's unread body bytes (`HTTPResponse._body_buffer`): the parser's body callback
    appends to this one bytearray, and a reader removes what it consumed from its front in place
    (geventhttpclient's own readline does `del buf[:n]`)."""
    buffer: bytearray = resp._body_buffer
    return buffer


def response_parser_class() -> type[HTTPResponseParser]:
    """geventhttpclient's C HTTP response parser (`geventhttpclient._parser.HTTPResponseParser`),
    the base class of every `HTTPResponse`: its `feed(resp, data)` parses `data` into `resp`
    (body bytes into `body_buffer(resp)`, `message_complete` at the message's end; `b""`: the
    connection ended) without `HTTPResponse.feed`'s HEAD-response case."""
    return HTTPResponseParser
