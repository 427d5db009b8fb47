"""The installed geventhttpclient and gevent still have every private thing
`llmload.loadgen.transport.ghc_adapter` relies on, and it still behaves as its docstrings say.

Imports nothing but the adapter, gevent, geventhttpclient, the standard library and the loopback
server of tests/fixtures (gevent only), so it runs in a throwaway environment with another release
of geventhttpclient installed (docs/architecture.md, "Third-party contact"). The behaviour checks
talk to a gevent server on a loopback port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import gevent.lock
import gevent.queue
import gevent.socket
import pytest
from fixtures.loopback import loopback_server
from geventhttpclient.client import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPResponse

from llmload.loadgen.transport import ghc_adapter as ghc

NETWORK_TIMEOUT = 7.5
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNKS = [b"data: one\n\n", b"data: two\n\n"]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
def server() -> Iterator[tuple[int, list[gevent.socket.socket]]]:
    """A loopback server that reads one request and answers the response head only: the test
    sends the body's chunks through the connection it gets (`conns`)."""
    conns: list[gevent.socket.socket] = []

    def handle(conn: gevent.socket.socket, _: Any) -> None:
        conn.recv(65536)
        conn.sendall(HEAD)
        conns.append(conn)
        gevent.sleep(5)  # the test closes it before

    with loopback_server(handle) as port:
        yield port, conns


def client(port: int) -> HTTPClient:
    return HTTPClient("127.0.0.1", port, network_timeout=NETWORK_TIMEOUT, connection_timeout=2.0)


def test_the_client_sends_through_its_pool() -> None:
    pool = ghc.pool_of(client(1))
    assert type(pool) is ConnectionPool
    for hook in ("get_socket", "return_socket", "release_socket"):
        assert callable(getattr(pool, hook))
    tls = ghc.pool_of(HTTPClient("127.0.0.1", 1, ssl=True, insecure=True))
    assert isinstance(tls, SSLConnectionPool)
    assert callable(tls.ssl_context.wrap_socket)


def test_the_pool_state() -> None:
    pool = ghc.pool_of(client(1))
    semaphore, idle = ghc.pool_semaphore(pool), ghc.idle_sockets(pool)
    assert isinstance(semaphore, gevent.lock.BoundedSemaphore)
    assert isinstance(idle, gevent.queue.LifoQueue)
    with pytest.raises(gevent.queue.Empty):
        idle.get(block=False)
    assert semaphore.acquire(blocking=False)
    semaphore.release()
    assert ghc.pool_closed(pool) is False
    pool.close()
    assert ghc.pool_closed(pool) is True
    # created once: what the adapter handed out is still the pool's own
    assert (ghc.pool_semaphore(pool), ghc.idle_sockets(pool)) == (semaphore, idle)


def test_a_new_socket_comes_from_the_patched_factory(server: tuple[int, list[Any]]) -> None:
    made: list[tuple[int, int, int]] = []

    def factory(family: int, kind: int, proto: int) -> gevent.socket.socket:
        made.append((family, kind, proto))
        return gevent.socket.socket(family, kind, proto)

    pool = ghc.pool_of(client(server[0]))
    assert ghc.patch_socket_factory(pool, factory) is True
    sock = ghc.new_socket(pool)
    assert made == [(socket.AF_INET, socket.SOCK_STREAM, made[0][2])]
    assert sock.getpeername() == ("127.0.0.1", server[0])
    assert sock.gettimeout() == NETWORK_TIMEOUT
    sock.close()
    assert ghc.patch_socket_factory(object(), factory) is False


def test_a_new_tls_socket_is_wrapped_by_the_pools_context(server: tuple[int, list[Any]]) -> None:
    pool = ghc.pool_of(HTTPClient("127.0.0.1", server[0], ssl=True, insecure=True, connection_timeout=2.0))
    wrapped: list[Any] = []

    class Wrapped(Exception):
        pass

    def wrap_socket(sock: Any, *args: Any, **kw: Any) -> Any:
        wrapped.append(sock)
        raise Wrapped

    pool.ssl_context.wrap_socket = wrap_socket
    with pytest.raises(Wrapped):
        ghc.new_socket(pool)
    assert len(wrapped) == 1


def test_a_streamed_response_read_through_the_adapter(server: tuple[int, list[Any]]) -> None:
    """What `StreamReader` does: the raw socket read, its bytes fed to the C parser, the body taken
    from the buffer in place; the complete message hands the socket back with `return_socket`."""
    port, conns = server
    http = client(port)
    pool = ghc.pool_of(http)
    calls: list[tuple[str, Any]] = []
    get, give_back = pool.get_socket, pool.return_socket

    def get_socket() -> Any:
        sock = get()
        calls.append(("get", sock))
        return sock

    def return_socket(sock: Any) -> None:
        calls.append(("return", sock))
        give_back(sock)

    pool.get_socket, pool.return_socket = get_socket, return_socket  # the instance's, as UserConnections
    resp = http.post("/v1/completions", body=b"{}", headers={"Content-Type": "application/json"})
    assert resp.status_code == 200 and not resp.message_complete
    sock = ghc.response_socket(resp)
    assert calls == [("get", sock)] and isinstance(sock, gevent.socket.socket)
    raw = ghc.raw_socket(resp)
    assert raw.fileno() == sock.fileno() and raw.gettimeout() == 0.0 and callable(raw.recvmsg)
    assert ghc.read_timeout(resp) == NETWORK_TIMEOUT

    parse = ghc.response_parser_class().feed
    assert issubclass(HTTPResponse, ghc.response_parser_class())
    buffer = ghc.body_buffer(resp)
    assert isinstance(buffer, bytearray)
    body = b""
    for i, data in enumerate(CHUNKS):
        conns[0].sendall(chunk(data) + (b"0\r\n\r\n" if i == len(CHUNKS) - 1 else b""))
        gevent.socket.wait_read(raw.fileno(), timeout=2)
        parse(resp, raw.recv(65536))
        assert ghc.body_buffer(resp) is buffer  # appended to, never replaced
        body += bytes(buffer)
        buffer.clear()  # consumed in place, as StreamReader does
    assert body == b"".join(CHUNKS)
    assert resp.message_complete
    assert calls == [("get", sock), ("return", sock)]
    assert ghc.response_socket(resp) is None
    http.close()


def test_the_parser_ends_a_read_to_close_message_on_an_empty_feed() -> None:
    resp = HTTPResponse()
    parse = ghc.response_parser_class().feed
    parse(resp, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\ndata: x\n")
    assert not resp.message_complete and bytes(ghc.body_buffer(resp)) == b"data: x\n"
    parse(resp, b"")  # the connection ended
    assert resp.message_complete
