"""The connection rules of llmload.loadgen.transport.connections without the simulator: the Keep-Alive
header, the liveness check of an idle socket, the `connection` setting, and the one resend of a
request whose pooled connection the server had closed (against a scripted loopback server that
counts what it received)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import uuid
from argparse import Namespace

import pytest
from geventhttpclient import HTTPClient

from llmload.core.config import ConfigError, SweepConfig, parse_config
from llmload.core.files.records import RequestRecord
from llmload.loadgen.options import run_config
from llmload.loadgen.request.client import RequestContext, send_request
from llmload.loadgen.transport.connections import UserConnections, handshake_ms, is_dropped, keep_alive_limits
from llmload.loadgen.transport.exchange import Transport

SSE = (
    b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"text":" b","finish_reason":"length"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
    b"data: [DONE]\n\n"
)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)


@pytest.mark.parametrize(
    ("header", "limits"),
    [
        ("timeout=5, max=100", (5.0, 100)),
        ("max=3", (None, 3)),
        ("Timeout=1.5", (1.5, None)),
        ("", (None, None)),
        (None, (None, None)),
        ("timeout=x, max=", (None, None)),
    ],
)
def test_keep_alive_header(header, limits):
    assert keep_alive_limits(header) == limits


def test_idle_socket_check():
    a, b = socket.socketpair()
    assert not is_dropped(a)  # idle and open
    b.sendall(b"x")
    assert is_dropped(a)  # unasked data
    a.recv(1)
    b.close()
    assert is_dropped(a)  # EOF: the peer closed it
    a.close()
    assert is_dropped(a)


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="the kernel's TCP_INFO is Linux's")
def test_the_handshake_is_the_kernels_round_trip_of_the_syn():
    """On loopback the SYN's round trip is tens of microseconds however long the connecting thread
    took to resume; a socket that is no TCP connection has none."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        t0 = time.perf_counter()
        client = socket.create_connection(server.getsockname())
        time.sleep(0.05)  # the connecting greenlet resumed 50 ms late: not the handshake's time
        wall_ms = (time.perf_counter() - t0) * 1000.0
        rtt = handshake_ms(client)
        assert rtt is not None and 0.0 <= rtt < 5.0 < 50.0 <= wall_ms
        client.close()
    finally:
        server.close()
    a, b = socket.socketpair()
    assert handshake_ms(a) is None
    a.close(), b.close()


def test_connection_setting():
    assert SweepConfig().connection == "keep-alive"
    assert parse_config({"connection": "close"}, "f.yaml").connection == "close"
    with pytest.raises(ConfigError, match=r"f.yaml: 'connection' must be one of keep-alive, close"):
        parse_config({"connection": "reuse"}, "f.yaml")
    opts = Namespace(ladder="config/sweep.yaml", connection="close")
    assert run_config(opts).connection == "close"


class Scripted:
    """A loopback HTTP server that plays `script`: per connection, a list of answers, one per
    request read (None: close without answering). Keeps the requests it read."""

    def __init__(self, script: list[list[bytes | None]]) -> None:
        self.script = script
        self.received: list[tuple[int, str]] = []  # (connection index, X-Request-Id)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for n, answers in enumerate(self.script):
            conn, _ = self.server.accept()
            with conn:
                for answer in answers:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = int(next(v for k, v in _headers(head) if k == "content-length"))
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.received.append((n, dict(_headers(head))["x-request-id"]))
                    if answer is None:
                        break
                    conn.sendall(answer)
        self.server.close()


def _headers(head: bytes) -> list[tuple[str, str]]:
    lines = head.decode().split("\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines)]


def _send(http: HTTPClient, conns: UserConnections) -> RequestRecord:
    records: list[RequestRecord] = []
    ctx = RequestContext(uuid.uuid4().hex, 0, 1, "measure", "completions", True, 2, "t")
    payload = {"model": "m", "prompt": "x", "max_tokens": 2, "stream": True}
    send_request(
        Transport(http, conns), "/v1/completions", payload, {}, ctx, total_timeout=10, report=records.append
    )
    (rec,) = records
    return rec


def test_request_on_a_connection_closed_before_answering_is_resent_once():
    server = Scripted([[OK, None], [OK]])
    http = HTTPClient("127.0.0.1", server.port, concurrency=1)
    conns = UserConnections(http)
    first, second = _send(http, conns), _send(http, conns)
    server.thread.join(5)
    assert first.ok and first.conn_reused is False and first.connect_ms is not None
    assert second.ok and second.output_tokens == 2
    assert second.conn_reused is False and second.reconnect == "resent" and second.connect_ms is not None
    # the server read the second request twice: on the old connection (no answer), then the new
    assert [n for n, _ in server.received] == [0, 0, 1]
    assert server.received[1][1] == server.received[2][1] == second.request_id
    assert json.dumps(second.to_dict())  # the record stays plain data


def test_a_failure_after_response_bytes_is_not_resent():
    server = Scripted([[OK, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"], [OK]])
    http = HTTPClient("127.0.0.1", server.port, concurrency=1)
    conns = UserConnections(http)
    first, second = _send(http, conns), _send(http, conns)
    assert first.ok and not second.ok and second.conn_reused is True
    third = _send(http, conns)
    server.thread.join(5)
    assert third.ok and third.reconnect == "error"
    assert [n for n, _ in server.received] == [0, 0, 1]  # the failed request was sent once


def test_a_request_interrupted_while_sending_frees_its_connection():
    """The total timeout fires while the request is still being written (a server that does not
    read an 8 MB body): the user's one connection is closed and freed, so its next request goes
    out on a new one instead of waiting for it forever."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # accepted sockets inherit it
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []

    def serve() -> None:
        accepted.append(server.accept()[0])  # never read: the client's send blocks
        conn = server.accept()[0]
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(OK)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    http = HTTPClient("127.0.0.1", port, concurrency=1)
    transport = Transport(http, UserConnections(http))
    ctx = RequestContext(uuid.uuid4().hex, 0, 1, "measure", "completions", True, 2, "t")
    records: list[RequestRecord] = []
    payload = {"model": "m", "prompt": "x" * 8_000_000, "max_tokens": 2, "stream": True}
    send_request(transport, "/v1/completions", payload, {}, ctx, total_timeout=0.5, report=records.append)
    (stuck,) = records
    assert stuck.outcome == "timeout" and stuck.error == "request exceeded 0.5 s"
    ctx = dataclasses.replace(ctx, request_id=uuid.uuid4().hex)
    payload["prompt"] = "x"
    send_request(transport, "/v1/completions", payload, {}, ctx, total_timeout=5, report=records.append)
    thread.join(5)
    next_one = records[1]
    assert next_one.ok and next_one.conn_reused is False and next_one.reconnect == "error"
    for sock in (*accepted, server):
        sock.close()
