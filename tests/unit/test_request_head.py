"""A request head built once (`llmload.loadgen.transport.request_head`) puts on the wire the
fields geventhttpclient's `HTTPClient.request` puts there for the same request, and a request it
would build differently is left to geventhttpclient. Both go to a loopback server that keeps what
it received."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gevent.socket
import pytest
from fixtures.loopback import loopback_server
from geventhttpclient.client import HTTPClient

from llmload.loadgen.transport.request_head import RequestHeads, send_post

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "text/event-stream",
    "Authorization": "Bearer sk-test",
    "Connection": "keep-alive",
    "X-Request-Id": "0f" * 16,
}


@pytest.fixture
def received() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that keeps each request's bytes (head and body) and answers `{}`."""
    got: list[bytes] = []

    def handle(conn: gevent.socket.socket, _: Any) -> None:
        data = b""
        while True:
            head, sep, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            if sep and len(body) >= length:
                got.append(data)
                conn.sendall(ANSWER)
                data = data[len(head) + 4 + length :]
                continue
            more = conn.recv(65536)
            if not more:
                return
            data += more

    with loopback_server(handle) as port:
        yield port, got


def fields(request: bytes) -> tuple[bytes, list[bytes], bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    start, *lines = head.split(b"\r\n")
    return start, sorted(lines), body


def test_the_head_carries_what_geventhttpclient_sends(received: tuple[int, list[bytes]]) -> None:
    port, got = received
    http = HTTPClient("127.0.0.1", port, concurrency=1)
    body = b'{"prompt": "\xc3\xa9t\xc3\xa9", "max_tokens": 4}'
    assert http.request("POST", "/v1/completions", body=body, headers=HEADERS).read() == b"{}"
    head = RequestHeads(http).head("/v1/completions", HEADERS, len(body))
    assert head is not None
    assert send_post(http, head, body).read() == b"{}"
    assert len(got) == 2
    assert fields(got[1]) == fields(got[0])


def test_one_prefix_serves_every_request_id() -> None:
    heads = RequestHeads(HTTPClient("127.0.0.1", 8000, concurrency=1))
    one = heads.head("/v1/completions", {**HEADERS, "X-Request-Id": "a"}, 10)
    two = heads.head("/v1/completions", {**HEADERS, "X-Request-Id": "b"}, 123)
    assert one is not None and two is not None
    assert b"X-Request-Id: a\r\n" in one and b"Content-Length: 10\r\n" in one
    assert b"X-Request-Id: b\r\n" in two and b"Content-Length: 123\r\n" in two
    assert one.split(b"Content-Length")[0] == two.split(b"Content-Length")[0]


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/completions", {"Expect": "100-continue"}),
        ("/v1/completions", {"Transfer-Encoding": "chunked"}),
        ("/v1/completions", {"Host": "elsewhere"}),
        ("/v1/completions", {"Bad Name": "x"}),
        ("/v1/completions", {"X-Evil": "a\r\nInjected: yes"}),
        ("/v1/completions", {"X-Request-Id": "a\r\nInjected: yes"}),
        ("//other/v1/completions", {}),
        ("v1/completions", {}),
    ],
)
def test_what_geventhttpclient_must_build_is_left_to_it(path: str, extra: dict[str, str]) -> None:
    heads = RequestHeads(HTTPClient("127.0.0.1", 8000, concurrency=1))
    assert heads.head(path, {**HEADERS, **extra}, 10) is None


def test_a_proxied_client_builds_its_own_heads() -> None:
    http = HTTPClient("127.0.0.1", 8000, concurrency=1, proxy_host="127.0.0.1", proxy_port=3128)
    assert RequestHeads(http).head("/v1/completions", HEADERS, 10) is None
