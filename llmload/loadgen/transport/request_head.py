"""The head of a user's requests, built once per path and header set, and the request written
with one `sendall`.

geventhttpclient's `HTTPClient.request` builds every request's head from header objects: it
merges the client's default headers and the request's into a case-insensitive `Headers` twice,
validates each field, and joins the lines. For a load generator every request of a user has the
same method, path and headers but its `X-Request-Id` and `Content-Length`, so `RequestHeads`
builds the rest once (with the same fields, checks and order as geventhttpclient: its default
headers, the request's, `Host`) and appends the two per request. The answer is read as before:
geventhttpclient's `HTTPSocketPoolResponse` on the socket the pool handed out.

A request geventhttpclient would send differently (through a proxy, chunked or with
`Expect: 100-continue`) is left to `HTTPClient.request`.
"""

from __future__ import annotations

import errno
import re
from typing import Any

import gevent.socket
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import HTTPSocketPoolResponse

from llmload.loadgen.transport.ghc_adapter import pool_of

REQUEST_ID = "X-Request-Id"
# RFC 9110 field names and values, as geventhttpclient checks them
_TOKEN = re.compile(r"\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_FIELD_VALUE = re.compile(r"\A[\t\x20-\x7e\x80-\xff]*\Z")
_TARGET = re.compile(r"\A/[^\x00-\x20\x7f]*\Z")
_OWN_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "expect", REQUEST_ID.lower()})


class RequestHeads:
    """The request heads of one `HTTPClient` (module docstring): `head(path, headers, length)`
    -> the head's bytes (the request id taken from `headers`), or None where `HTTPClient.request`
    must build it."""

    __slots__ = ("_http", "_prefixes", "_direct")

    def __init__(self, http: HTTPClient) -> None:
        self._http = http
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str | None] = {}
        self._direct = not http.use_proxy and pool_of(http) is not None

    def head(self, path: str, headers: dict[str, str], length: int) -> bytes | None:
        request_id = headers.get(REQUEST_ID)
        fields = tuple(item for item in headers.items() if item[0] != REQUEST_ID)
        key = (path, fields)
        prefix = self._prefixes.get(key, "")  # "": not built yet (a built prefix is never empty)
        if prefix == "":
            prefix = self._prefixes[key] = self._prefix(path, fields)
        if prefix is None or (request_id is not None and not _FIELD_VALUE.fullmatch(request_id)):
            return None
        tail = f"{REQUEST_ID}: {request_id}\r\n" if request_id is not None else ""
        return f"{prefix}Content-Length: {length}\r\n{tail}\r\n".encode("latin-1")

    def _prefix(self, path: str, fields: tuple[tuple[str, str], ...]) -> str | None:
        """Everything of the head before Content-Length; None when geventhttpclient must build it
        (a proxy, a field that sets the framing or the host, a name or value it would refuse)."""
        http = self._http
        if not self._direct or not _TARGET.fullmatch(path) or path.startswith("//"):
            return None
        merged: dict[str, tuple[str, str]] = {}  # lower-case name -> (name, value): later wins
        for name, value in (*http.default_headers.items(), *fields):
            merged[name.lower()] = (name, str(value))
        if _OWN_FRAMING & merged.keys():
            return None
        if not all(_TOKEN.fullmatch(n) and _FIELD_VALUE.fullmatch(v) for n, v in merged.values()):
            return None
        host = http.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        if http.port not in (80, 443):
            host = f"{host}:{http.port}"
        lines = [f"POST {path} {http.version}\r\n", *(f"{n}: {v}\r\n" for n, v in merged.values())]
        return "".join([*lines, f"Host: {host}\r\n"])


def send_post(http: HTTPClient, head: bytes, body: bytes) -> Any:
    """Write `head + body` on a connection of `http`'s pool and read the answer's head: what
    `HTTPClient.request` does for a POST with a length (no retry once the request may have been
    processed; a connection reset while writing still yields an answer the server sent first)."""
    pool = pool_of(http)
    sock = pool.get_socket()
    try:
        sock.sendall(head + body)
    except gevent.socket.error as e:
        if e.errno not in (errno.ECONNRESET, errno.EPIPE):
            pool.release_socket(sock)
            raise
    return HTTPSocketPoolResponse(
        sock, pool, block_size=http.block_size, method="POST", headers_type=http.headers_type
    )
