"""One user's HTTP path: its connections to the server, and the exchange of one request on them.

A `Transport` is what a user sends through (one per user, `Transport.open`): a geventhttpclient
`HTTPClient` built with its public constructor, its plain-TCP connections made to record kernel
receive stamps (`llmload.loadgen.transport.receive_stamps`), and the user's `UserConnections`
(`llmload.loadgen.transport.connections`: keep-alive policy, drop detection, the lease of each
request). `Transport.exchange` sends one request and reads the answer into a `StreamAccumulator`.
Once the response headers are in, a stream on a plain TCP socket is read by the hub's
`StreamReader` (`llmload.loadgen.transport.stream_reader`: read in hub callbacks, no greenlet
switch per chunk); a TLS stream is read line by line in the request's greenlet
(`readline(b"\\n")` on the raw response). Every way an exchange can go wrong ends in
`RequestFailed` with the failure kind; the request's record is `llmload.loadgen.request.client`'s.

Failure kinds: `connect_error`, `reset` (connection closed before the headers), `timeout`,
`http_<status>`, `wrong_content_type`, `malformed` (a data line that is not JSON),
`stream_error` (an error object inside the stream), `drop` (stream ended or broke before a
finish_reason), `no_done` (finish_reason seen but no `data: [DONE]`), `bad_response`
(non-streaming body without choices).

Connections: the request goes out on the user's pooled keep-alive connection, or a new one per
request (`connection: close`). A request whose pooled connection turns out closed by the server
before any byte of the response came back (`HTTPConnectionClosed`: EOF or RST with nothing
received) is resent once on a new connection: one record, `reconnect: resent`, not a failure, as
the server never read it. Any other failure, on any connection, stays a failure. The lease says
how the request got its connection (`conn_reused`, `connect_ms`, `tls_ms`, `reconnect`,
`conn_port` of its record); the setup time of a new connection is inside its TTFT, as in vLLM
(t0 is taken before the client gets a connection).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gevent
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent, check_usage
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.transport.connections import Lease, UserConnections
from llmload.loadgen.transport.preflight import tls_context
from llmload.loadgen.transport.receive_stamps import ReceiveClock, stamp_receive_times
from llmload.loadgen.transport.request_head import RequestHeads, send_post
from llmload.loadgen.transport.stream_reader import StreamEnded, reader_for

DRAIN_S = 1.0  # longest wait for the end of a stream's HTTP message after [DONE]


class RequestFailed(Exception):
    """Ends a request with a failure kind (raised by `Transport.exchange`, or by the request's
    total timeout around it)."""

    def __init__(
        self, kind: str, detail: str = "", status: int | None = None, retry_after: str | None = None
    ) -> None:
        super().__init__(kind)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after  # the Retry-After header of an HTTP error answer


class Transport:
    """One user's HTTP client and connections (module docstring). Without `conns` the requests
    go through geventhttpclient's own pool: no keep-alive rules, no leases, no resend."""

    __slots__ = ("http", "conns", "heads")

    def __init__(self, http: HTTPClient, conns: UserConnections | None = None) -> None:
        self.http = http
        self.conns = conns
        self.heads = RequestHeads(http)  # each request's head, built once per path and headers

    @classmethod
    def open(
        cls,
        url: str,
        *,
        connect_s: float,
        read_s: float,
        connection: str,
        ca_bundle: str = "",
        insecure: bool = False,
    ) -> Transport:
        """A user's transport to `url` (scheme, host, port): connections time out after `connect_s`
        to connect and `read_s` of silence; TLS verifies with the system's CAs (geventhttpclient's
        default context), trusts `ca_bundle` in addition, or, `insecure`, verifies nothing (the
        options `--ca-bundle` and `--tls-insecure`, as for the preflight: `preflight.tls_context`).
        One request at a time: the pool holds one connection."""
        factory: Callable[[], Any] | None = None
        if ca_bundle or insecure:

            def factory() -> Any:
                return tls_context(ca_bundle, insecure)

        http = HTTPClient.from_url(
            url,
            connection_timeout=connect_s,
            network_timeout=read_s,
            concurrency=1,
            ssl_context_factory=factory,
            insecure=insecure,
        )
        stamp_receive_times(http)  # message times from the kernel where it can
        return cls(http, UserConnections(http, connection))

    @property
    def lease(self) -> Lease | None:
        """How the latest request got its connection; None without `conns`."""
        return None if self.conns is None else self.conns.lease

    @property
    def request_headers(self) -> dict[str, str]:
        """Headers the connection mode adds to every request."""
        return {} if self.conns is None else self.conns.request_headers

    def set_mode(self, connection: str) -> None:
        """The connection mode of the next requests (`keep-alive` or `close`)."""
        if self.conns is not None:
            self.conns.mode = connection

    def exchange(
        self,
        path: str,
        body: bytes,
        headers: dict[str, str],
        stream: bool,
        acc: StreamAccumulator,
        clock: ReceiveClock,
    ) -> int:
        """POST `body` to `path` and read the answer into acc; returns the HTTP status, or raises
        `RequestFailed`."""
        conns = self.conns
        if conns is not None:
            conns.lease = None
        try:
            resp = _open(self, path, body, headers)
            try:
                return _read_answer(resp, conns, stream, acc, clock)
            finally:
                resp.release()  # returns the connection to the pool only if the message was complete
        except BaseException as e:  # a greenlet kill too: the connection must not stay handed out
            if conns is not None:
                conns.abandon()
                if isinstance(e, RequestFailed):
                    conns.failed()
            raise

    def close(self) -> None:
        """Close the user's connections (the pooled one now, one in use when it is released)."""
        self.http.close()


def _read_stream(resp: Any, acc: StreamAccumulator, clock: ReceiveClock) -> None:
    reader = reader_for(resp)
    if reader is not None:
        try:
            reader.read(resp, acc, clock)
            return
        except StreamEnded:
            pass
    else:  # TLS, not Linux: line by line in this greenlet
        now = clock.now
        readline = resp.readline
        while line := readline(b"\n"):
            if acc.feed(line, now()):
                return
    if acc.finish_reason is None:
        raise RequestFailed("drop", "stream ended before a finish_reason")
    raise RequestFailed("no_done", "stream ended without data: [DONE]")


def _read_body(resp: Any, acc: StreamAccumulator, clock: ReceiveClock) -> None:
    """Non-streaming: the whole body is one message; its arrival is both first and last token."""
    body = resp.read()
    t = clock.now()
    try:
        obj = json.loads(body)
    except ValueError:
        raise RequestFailed("malformed", f"body is not JSON: {body[:80]!r}") from None
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise RequestFailed("bad_response", "response has no choices")
    if obj.get("usage") is not None:
        check_usage(obj["usage"], body)  # MalformedStream: a usage of the wrong shape
    finish = choices[0].get("finish_reason")
    if not isinstance(finish, str | None):
        raise RequestFailed("bad_response", f"finish_reason is not a string: {finish!r:.80}")
    acc.usage = obj.get("usage")
    acc.finish_reason = finish
    acc.t_first = acc.t_first_content = acc.t_last = t
    acc.chunk_times.append(t)
    message = choices[0].get("message") or {}
    if isinstance(message, dict) and message.get("tool_calls"):
        acc.whole_tool_calls(message["tool_calls"], t)  # MalformedStream: calls of the wrong shape
    if acc.texts is not None:
        acc.texts.append(str(choices[0].get("text") or message.get("content") or ""))
    acc.done = True


def _post(transport: Transport, path: str, body: bytes, headers: dict[str, str]) -> Any:
    head = transport.heads.head(path, headers, len(body))
    if head is None:
        return transport.http.request("POST", path, body=body, headers=headers)
    return send_post(transport.http, head, body)


def _open_response(transport: Transport, path: str, body: bytes, headers: dict[str, str]) -> Any:
    """Send the request; resend it once on a new connection if its pooled connection was closed
    by the server before any byte of the response came back."""
    conns = transport.conns
    try:
        return _post(transport, path, body, headers)
    except HTTPConnectionClosed:
        if conns is None or conns.lease is None or not conns.lease.reused:
            raise
        conns.resending()
    return _post(transport, path, body, headers)


def _drain(resp: Any) -> None:
    """Read the rest of the HTTP message after [DONE] (the chunked terminator), so the connection
    goes back to the pool instead of being closed as unfinished."""
    if not resp.message_complete:
        with gevent.Timeout(DRAIN_S, False):
            resp.read()


def _open(transport: Transport, path: str, body: bytes, headers: dict[str, str]) -> Any:
    """Send the request -> the response, its headers read."""
    try:
        return _open_response(transport, path, body, headers)
    except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
        raise RequestFailed("reset", f"connection closed before the response headers: {e}") from None
    except TimeoutError as e:  # the connect timeout, or the first_token timeout on the headers
        raise RequestFailed("timeout", f"no connection or no response headers in time: {e}") from None
    except (OSError, HTTPParseError) as e:
        raise RequestFailed("connect_error", f"{type(e).__name__}: {e}") from None


def _read_answer(
    resp: Any, conns: UserConnections | None, stream: bool, acc: StreamAccumulator, clock: ReceiveClock
) -> int:
    """Read the answer into acc; returns the HTTP status."""
    if conns is not None:
        conns.note_response(resp)
    status = int(resp.get_code())
    if status != 200:
        detail = resp.read()[:200].decode("utf-8", "replace")
        raise RequestFailed(f"http_{status}", detail, status, resp.get("retry-after"))
    ctype = str(resp.get("content-type") or "")
    expected = "text/event-stream" if stream else "application/json"
    if expected not in ctype:
        raise RequestFailed("wrong_content_type", f"content-type {ctype!r}, expected {expected}", status)
    try:
        (_read_stream if stream else _read_body)(resp, acc, clock)
        _drain(resp)
    except MalformedStream as e:
        raise RequestFailed("malformed", str(e), status) from None
    except StreamErrorEvent as e:
        raise RequestFailed("stream_error", str(e), status) from None
    except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError, HTTPParseError) as e:
        raise RequestFailed("drop", f"connection broke mid-stream: {type(e).__name__}", status) from None
    except TimeoutError:
        raise RequestFailed("timeout", "no data within the read timeout", status) from None
    return status
