"""The installed aiohttp and asyncio still have what `llmload.sim.aiohttp_adapter` relies on: a
handler's count of parsed requests, grown by the `data_received` call whose bytes completed a
request's headers, and the transport's socket object, the one the listener's `accept()` returned.
A real aiohttp server on a loopback port, one connection, two requests."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from llmload.sim.aiohttp_adapter import requests_parsed, transport_socket

REQUEST = b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n"


class Listener(socket.socket):
    """Keeps what its `accept()` returned, as the simulator's stamping listener builds its own."""

    accepted: list[socket.socket]

    def accept(self) -> tuple[socket.socket, Any]:
        conn, addr = super().accept()
        self.accepted.append(conn)
        return conn, addr


async def until_read(feeds: list[Any], count: int) -> None:
    while len(feeds) <= count:
        await asyncio.sleep(0.001)


async def exchange(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[bytes, int, int]], list[Any], Any]:
    feeds: list[tuple[bytes, int, int]] = []  # (bytes, count before, count after) per data_received
    seen: list[Any] = []  # per request: its handler's transport socket
    data_received = RequestHandler.data_received

    def counted(handler: RequestHandler, data: bytes) -> None:
        before = requests_parsed(handler)
        data_received(handler, data)
        feeds.append((data, before, requests_parsed(handler)))

    monkeypatch.setattr(RequestHandler, "data_received", counted)

    async def answer(request: web.BaseRequest) -> web.Response:
        seen.append(transport_socket(request.protocol))
        return web.Response(text="ok")

    listener = Listener(socket.AF_INET, socket.SOCK_STREAM)
    listener.accepted = []
    listener.bind(("127.0.0.1", 0))
    runner = web.ServerRunner(web.Server(answer))
    await runner.setup()
    await web.SockSite(runner, listener).start()
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(REQUEST % 1)
        await reader.readuntil(b"ok")
        head, tail = (REQUEST % 2)[:-2], (REQUEST % 2)[-2:]  # the second one's headers in two reads
        for part in (head, tail):
            read = len(feeds)
            writer.write(part)
            await writer.drain()
            await asyncio.wait_for(until_read(feeds, read), 5.0)  # one part per server read
        await reader.readuntil(b"ok")
        writer.close()
    finally:
        await runner.cleanup()
    return feeds, seen, listener.accepted


def test_the_request_count_and_the_transport_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    feeds, seen, accepted = asyncio.run(exchange(monkeypatch))
    assert [(data, before, after) for data, before, after in feeds] == [
        (REQUEST % 1, 0, 1),
        ((REQUEST % 2)[:-2], 1, 1),
        ((REQUEST % 2)[-2:], 1, 2),
    ]
    assert len(accepted) == 1 and seen == [accepted[0], accepted[0]]
