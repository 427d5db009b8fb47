"""Send one completion request and turn what came back into a `RequestRecord`.

The hot path of the load generator. It talks to the server through the user's geventhttpclient
connection pool (the one Locust's FastHttpUser owns). Once the response headers are in, a stream
on a plain TCP socket is read by the hub's `StreamReader` (`llmload.loadgen.stream_reader`: read
in hub callbacks, no greenlet switch per chunk); a TLS stream is read line by line in the
request's greenlet (`readline(b"\\n")` on the raw response). Every way a request can go wrong
ends as a record with an `outcome` naming the failure kind and the tokens received until then;
nothing raises out of `send_request` except greenlet kills.

Failure kinds: `connect_error`, `reset` (connection closed before the headers), `timeout`,
`http_<status>`, `wrong_content_type`, `malformed` (a data line that is not JSON),
`stream_error` (an error object inside the stream), `drop` (stream ended or broke before a
finish_reason), `no_done` (finish_reason seen but no `data: [DONE]`), `bad_response`
(non-streaming body without choices).

Connections (`llmload.loadgen.connections`): with a user's `UserConnections`, the request goes
out on the user's pooled keep-alive connection, or a new one per request (`connection: close`).
A request whose pooled connection turns out closed by the server before any byte of the response
came back (`HTTPConnectionClosed`: EOF or RST with nothing received) is resent once on a new
connection: one record, `reconnect: resent`, not a failure, as the server never read it. Any other
failure, on any connection, stays a failure. The record says how the request got its connection
(`conn_reused`, `connect_ms`, `tls_ms`, `reconnect`, `conn_port`); the setup time of a new
connection is inside its TTFT, as in vLLM (t0 is taken before the client gets a connection).

Retries: none unless the run configures them (`retries.max` > 0, `llmload.core.config.RetryConfig`).
`send_request` then resends a request that failed with one of the `retries.on_status` HTTP
statuses, after the server's `Retry-After` (delta-seconds) or an exponential backoff. Every
attempt is its own record and its own Locust event (a retried attempt counts as a failure of
its kind, as the server answered it so); attempt n > 1 is sent with the request id
`<id>-retry<n-1>` (also its X-Request-Id), so each record matches one request the server saw.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import numpy as np
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from llmload.analysis.determinism import text_digests
from llmload.core.config import RetryConfig
from llmload.core.records import OUTCOME_OK, RequestRecord, encode_json, new_record
from llmload.loadgen.connections import UserConnections
from llmload.loadgen.receive_stamps import KERNEL, ReceiveClock
from llmload.loadgen.sse import MalformedStream, StreamAccumulator, StreamErrorEvent, check_usage
from llmload.loadgen.stream_reader import StreamEnded, reader_for

MAX_RETRY_WAIT_S = 60.0  # a longer Retry-After is cut to this
DRAIN_S = 1.0  # longest wait for the end of a stream's HTTP message after [DONE]
NO_RETRIES = RetryConfig()


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and why: every field of its record that does not come from the server
    (the record is built once, complete, from this and the answer: `_attempt`)."""

    request_id: str
    rung: int
    users: int
    phase: str
    endpoint: str
    stream: bool
    max_tokens: int
    worker: str
    prompt_tokens_asked: int | None = None  # synthetic prompts: the configured prompt_tokens
    prompt_hash: str | None = None  # set when the greedy-determinism check runs: texts are hashed
    record_text: bool = False  # keep the generated text in the record
    t_scheduled: float | None = None  # rate mode: the arrival the schedule gave it
    rate: float | None = None  # rate mode: the rung's target request rate
    trace_line: int | None = None  # mode trace: the trace line it replays
    session: str | None = None  # sessions: the session and turn it sends
    turn: int | None = None
    run_id: str | None = None  # the run of the stage it belongs to (the master stamps its own)


# the context's fields that are the record's, as they are (prompt_hash is set only when the texts
# are kept to be hashed; record_text says whether the record keeps the text)
_FROM_CONTEXT = tuple(f.name for f in dataclasses.fields(RequestContext) if f.name != "record_text")


class RequestFailed(Exception):
    """Raised inside `send_request` to end a request with a failure kind."""

    def __init__(
        self, kind: str, detail: str = "", status: int | None = None, retry_after: str | None = None
    ) -> None:
        super().__init__(kind)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after  # the Retry-After header of an HTTP error answer


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
    if acc.texts is not None:
        message = choices[0].get("message") or {}
        acc.texts.append(str(choices[0].get("text") or message.get("content") or ""))
    acc.done = True


def _open_response(
    http: HTTPClient, conns: UserConnections | None, path: str, body: bytes, headers: dict[str, str]
) -> Any:
    """Send the request; resend it once on a new connection if its pooled connection was closed
    by the server before any byte of the response came back."""
    try:
        return http.request("POST", path, body=body, headers=headers)
    except HTTPConnectionClosed:
        if conns is None or conns.lease is None or not conns.lease.reused:
            raise
        conns.resending()
    return http.request("POST", path, body=body, headers=headers)


def _drain(resp: Any) -> None:
    """Read the rest of the HTTP message after [DONE] (the chunked terminator), so the connection
    goes back to the pool instead of being closed as unfinished."""
    if not resp.message_complete:
        with gevent.Timeout(DRAIN_S, False):
            resp.read()


def _exchange(
    http: HTTPClient,
    conns: UserConnections | None,
    path: str,
    body: bytes,
    headers: dict[str, str],
    stream: bool,
    acc: StreamAccumulator,
    clock: ReceiveClock,
) -> int:
    """Send the request and read the answer into acc; returns the HTTP status."""
    try:
        resp = _open_response(http, conns, path, body, headers)
    except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as e:
        raise RequestFailed("reset", f"connection closed before the response headers: {e}") from None
    except TimeoutError as e:  # the connect timeout, or the first_token timeout on the headers
        raise RequestFailed("timeout", f"no connection or no response headers in time: {e}") from None
    except (OSError, HTTPParseError) as e:
        raise RequestFailed("connect_error", f"{type(e).__name__}: {e}") from None
    try:
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
    finally:
        resp.release()  # returns the connection to the pool only if the message was complete


def retry_wait(retry_after: str | None, backoff_s: float, retry: int) -> float:
    """Seconds to wait before retry number `retry` (1-based): the server's Retry-After when it is
    a number of seconds, else backoff_s * 2**(retry-1); never more than MAX_RETRY_WAIT_S."""
    try:
        wait = float(retry_after) if retry_after is not None else backoff_s * 2 ** (retry - 1)
    except ValueError:  # an HTTP-date: not honoured, use the backoff
        wait = backoff_s * 2 ** (retry - 1)
    return min(max(wait, 0.0), MAX_RETRY_WAIT_S)


def send_request(
    http: HTTPClient,
    path: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    ctx: RequestContext,
    *,
    total_timeout: float,
    retries: RetryConfig = NO_RETRIES,
    report: Callable[[RequestRecord], None],
    conns: UserConnections | None = None,
    on_reply: Callable[[str], None] | None = None,
) -> int:
    """Send a request, retrying as configured; `report` gets each attempt's record as it ends
    (failures are recorded, not raised), `on_reply` (sessions) the text of a completed reply.
    Returns the number of attempts (records). `conns`: the user's connections (their mode and
    the connection figures of the records)."""
    body = encode_json(payload)  # orjson: the request's body is encoded on the generator's hot path
    if conns is not None:
        headers = {**headers, **conns.request_headers}
    retry = 0
    while True:
        request_id = f"{ctx.request_id}-retry{retry}" if retry else ctx.request_id
        keep_text = ctx.prompt_hash is not None or on_reply is not None
        acc = StreamAccumulator(ctx.endpoint == "chat", keep_text=keep_text)
        rec, retry_after = _attempt(
            http,
            path,
            body,
            {**headers, "X-Request-Id": request_id},
            dataclasses.replace(ctx, request_id=request_id),
            total_timeout,
            acc,
            conns,
        )
        report(rec)
        if rec.ok and on_reply is not None:
            on_reply(acc.text)
        if rec.ok or retry >= retries.max or rec.status not in retries.on_status:
            return retry + 1
        retry += 1
        gevent.sleep(retry_wait(retry_after, retries.backoff_s, retry))


def _attempt(
    http: HTTPClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    ctx: RequestContext,
    total_timeout: float,
    acc: StreamAccumulator,
    conns: UserConnections | None = None,
) -> tuple[RequestRecord, str | None]:
    """One HTTP exchange read into `acc` -> its record and the server's Retry-After, if any."""
    if conns is not None:
        conns.lease = None
    outcome, error, status, retry_after = OUTCOME_OK, None, None, None
    t_wall = time.time()
    clock = ReceiveClock(t_wall, time.perf_counter())
    try:
        with (
            clock,
            gevent.Timeout(total_timeout, RequestFailed("timeout", f"request exceeded {total_timeout:g} s")),
        ):
            status = _exchange(http, conns, path, body, headers, ctx.stream, acc, clock)
    except RequestFailed as e:
        outcome, error, status, retry_after = e.kind, e.detail or None, e.status, e.retry_after
        if conns is not None:
            conns.failed()
    lease = conns.lease if conns is not None else None
    t_fail = time.perf_counter() - clock.t0
    output_tokens, estimated = acc.output_tokens(ctx.max_tokens)
    end = acc.t_last if (outcome == OUTCOME_OK and acc.t_last is not None) else t_fail
    texts = acc.texts  # kept for the greedy-determinism check or a session's reply
    text_hash, chunk_hashes = (None, None) if texts is None else text_digests(texts)
    record = new_record(
        **{name: getattr(ctx, name) for name in _FROM_CONTEXT},
        t_start=t_wall,
        t_end=t_wall + end,
        t_first=None if acc.t_first is None else t_wall + acc.t_first,
        t_first_content=None if acc.t_first_content is None else t_wall + acc.t_first_content,
        # to the microsecond: numpy rounds the whole list at once, and the array's own round skips
        # np.round's dispatch (same numbers as round() a time; timed in docs/generator-cost.md)
        chunk_times=np.asarray(acc.chunk_times, dtype=np.float64).round(6).tolist(),
        stamps=clock.source,
        read_delay_ms=round(clock.max_delay * 1000.0, 3) if clock.source == KERNEL else None,
        uncertain_chunks=list(acc.uncertain) if acc.uncertain else None,
        uncertain_ms=[round(u * 1000.0, 3) for u in acc.uncertain.values()] if acc.uncertain else None,
        ttft_uncertain_ms=None if acc.ttft_uncertain is None else round(acc.ttft_uncertain * 1000.0, 3),
        prompt_tokens=acc.prompt_tokens,
        output_tokens=output_tokens,
        tokens_estimated=estimated,
        chunks=len(acc.chunk_times),
        chunk_tokens=acc.tokens_per_chunk(),
        cached_tokens=acc.cached_tokens,
        finish_reason=acc.finish_reason,
        outcome=outcome,
        error=error,
        status=status,
        conn_reused=None if lease is None else lease.reused,
        connect_ms=None if lease is None else lease.connect_ms,
        tls_ms=None if lease is None else lease.tls_ms,
        reconnect=None if lease is None else lease.reconnect,
        conn_port=None if lease is None else lease.port,
        text_hash=text_hash,
        chunk_hashes=chunk_hashes,
        text="".join(texts) if texts is not None and ctx.record_text else None,
    )
    return record, retry_after
