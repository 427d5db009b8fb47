"""Send one completion request, with its configured retries, and turn what came back into a
`RequestRecord`.

The hot path of the load generator. Each attempt is one exchange on the user's transport
(`llmload.loadgen.transport.exchange.Transport`: its connections, the request written, the
response's head and body read into a `StreamAccumulator`); this module times it, bounds it by the
total timeout and records it. Every way a request can go wrong ends as a record with an `outcome`
naming the failure kind (listed in `llmload.loadgen.transport.exchange`; and this module's own two,
`no_finish` and `bad_usage`, for an answer that ended well but is not one: `judge_answer`) and the
tokens received until then; nothing raises out of `send_request` except greenlet kills. The record
says how the request got its connection (`conn_reused`, `connect_ms`, `handshake_ms`, `tls_ms`,
`reconnect`, `conn_port`: `llmload.loadgen.transport.connections`).

Retries: none unless the run configures them (`retries.max` > 0, `llmload.core.config.RetryConfig`).
`send_request` then resends a request that failed with one of the `retries.on_status` HTTP
statuses, after the server's `Retry-After` (delta-seconds) or an exponential backoff. Every
attempt is its own record and its own Locust event (a retried attempt counts as a failure of
its kind, as the server answered it so); attempt n > 1 is sent with the request id
`<id>-retry<n-1>` (also its X-Request-Id), so each record matches one request the server saw.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import numpy as np

from llmload.analysis.identity.determinism import digest, text_digests
from llmload.core.clock import offset as clock_offset
from llmload.core.config import RetryConfig
from llmload.core.files.records import OUTCOME_OK, RequestRecord, encode_json, new_record
from llmload.loadgen.stream.responses import accumulator_for
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.transport.exchange import RequestFailed, Transport
from llmload.loadgen.transport.receive_stamps import KERNEL, ReceiveClock
from llmload.loadgen.workload.sessions import Reply, ToolCall

MAX_RETRY_WAIT_S = 60.0  # a longer Retry-After is cut to this
NO_RETRIES = RetryConfig()
NO_FINISH, BAD_USAGE = "no_finish", "bad_usage"  # an answer that ended well but is not one
PROMPT_SLACK_TOKENS = 4096  # a prompt's tokens beyond its request's bytes: a chat template's at most


def judge_answer(acc: StreamAccumulator, max_tokens: int, body_bytes: int) -> tuple[str, str | None]:
    """(outcome, error) of an answer that ended as the protocol asks ([DONE], or a whole body):
    `ok`, or `no_finish` when no choice carried a finish_reason (`[DONE]` before any choice
    included), or `bad_usage` when its usage counts more completion tokens than max_tokens
    allowed, or more prompt tokens than its request had bytes (plus PROMPT_SLACK_TOKENS for a
    chat template): a count no server can have produced, which would make a figure of it."""
    if acc.finish_reason is None:
        if acc.t_first is None:
            return NO_FINISH, "data: [DONE] before any choice"
        return NO_FINISH, f"the answer ended without a finish_reason ({len(acc.chunk_times)} chunks)"
    completion = acc.completion_tokens
    if completion is not None and completion > max_tokens:
        return BAD_USAGE, f"usage.completion_tokens {completion} is over max_tokens {max_tokens}"
    prompt = acc.prompt_tokens
    if prompt is not None and prompt > body_bytes + PROMPT_SLACK_TOKENS:
        return BAD_USAGE, f"usage.prompt_tokens {prompt} is over the request's {body_bytes} bytes"
    return OUTCOME_OK, None


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
    parent_session: str | None = None  # a sub-agent's turn: its parent session
    tool_wait_s: float | None = None  # the wait before this turn (agent sessions: the tool latency drawn)
    run_id: str | None = None  # the run of the stage it belongs to (the master stamps its own)
    structured: bool = False  # it carries tools or a response_format
    reply_check: Callable[[str], bool | None] | None = None  # response_format: whether an answer fits


# the context's fields that are the record's, as they are (prompt_hash is set only when the texts
# are kept to be hashed; record_text says whether the record keeps the text; reply_check gives
# the record's reply_valid)
_FROM_CONTEXT = tuple(
    f.name for f in dataclasses.fields(RequestContext) if f.name not in ("record_text", "reply_check")
)


def retry_wait(retry_after: str | None, backoff_s: float, retry: int) -> float:
    """Seconds to wait before retry number `retry` (1-based): the server's Retry-After when it is
    a number of seconds, else backoff_s * 2**(retry-1); never more than MAX_RETRY_WAIT_S."""
    try:
        wait = float(retry_after) if retry_after is not None else backoff_s * 2 ** (retry - 1)
    except ValueError:  # an HTTP-date: not honoured, use the backoff
        wait = backoff_s * 2 ** (retry - 1)
    return min(max(wait, 0.0), MAX_RETRY_WAIT_S)


def send_request(
    transport: Transport,
    path: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    ctx: RequestContext,
    *,
    total_timeout: float,
    retries: RetryConfig = NO_RETRIES,
    report: Callable[[RequestRecord], None],
    on_reply: Callable[[Reply], None] | None = None,
) -> int:
    """Send a request, retrying as configured; `report` gets each attempt's record as it ends
    (failures are recorded, not raised), `on_reply` (sessions) a completed reply (its text and tool calls).
    Returns the number of attempts (records), sent on `transport` (the user's connections)."""
    body = encode_json(payload)  # orjson: the request's body is encoded on the generator's hot path
    headers = {**headers, **transport.request_headers}
    retry = 0
    while True:
        request_id = f"{ctx.request_id}-retry{retry}" if retry else ctx.request_id
        keep_text = ctx.prompt_hash is not None or on_reply is not None or ctx.reply_check is not None
        acc = accumulator_for(ctx.endpoint, keep_text=keep_text)
        rec, retry_after = _attempt(
            transport,
            path,
            body,
            {**headers, "X-Request-Id": request_id},
            dataclasses.replace(ctx, request_id=request_id) if retry else ctx,
            total_timeout,
            acc,
        )
        report(rec)
        if rec.ok and on_reply is not None:
            calls = () if acc.tools is None else tuple(ToolCall(*call) for call in acc.tools.calls())
            on_reply(Reply(acc.text, calls))
        if rec.ok or retry >= retries.max or rec.status not in retries.on_status:
            return retry + 1
        retry += 1
        gevent.sleep(retry_wait(retry_after, retries.backoff_s, retry))


def _attempt(
    transport: Transport,
    path: str,
    body: bytes,
    headers: dict[str, str],
    ctx: RequestContext,
    total_timeout: float,
    acc: StreamAccumulator,
) -> tuple[RequestRecord, str | None]:
    """One HTTP exchange read into `acc` -> its record and the server's Retry-After, if any."""
    outcome, error, status, retry_after = OUTCOME_OK, None, None, None
    offset = clock_offset()  # this worker's clock minus the master's (llmload.core.clock)
    t_raw = time.time()  # the kernel's receive stamps are on this raw clock
    t_wall = t_raw - offset  # the record's times are on the master's
    clock = ReceiveClock(t_raw, time.perf_counter())
    try:
        with (
            clock,
            gevent.Timeout(total_timeout, RequestFailed("timeout", f"request exceeded {total_timeout:g} s")),
        ):
            status = transport.exchange(path, body, headers, ctx.stream, acc, clock)
    except RequestFailed as e:
        outcome, error, status, retry_after = e.kind, e.detail or None, e.status, e.retry_after
    lease = transport.lease
    t_fail = time.perf_counter() - clock.t0
    if outcome == OUTCOME_OK:
        outcome, error = judge_answer(acc, ctx.max_tokens, len(body))
    output_tokens, estimated = acc.output_tokens(ctx.max_tokens)
    if outcome == BAD_USAGE:  # the server's count is not believed: the chunks received, a lower bound
        output_tokens, estimated = len(acc.chunk_times), True
    end = acc.t_last if (outcome == OUTCOME_OK and acc.t_last is not None) else t_fail
    texts = acc.texts  # kept for the greedy-determinism check or a session's reply
    text_hash, chunk_hashes, reasoning_hash, tool_hash, answer = None, None, None, None, None
    tools = acc.tools
    if texts is not None:
        answer, reasoning = acc.answer_and_reasoning()
        text_hash, chunk_hashes = text_digests(texts, answer)
        reasoning_hash = digest(reasoning) if reasoning else None
        tool_hash = digest(tools.text()) if tools is not None else None
    reasoning_tokens, reasoning_counted = acc.reasoning_tokens()
    reply_valid = None  # a response_format answer checked against its schema (reply_check)
    if ctx.reply_check is not None and outcome == OUTCOME_OK and answer is not None:
        reply_valid = ctx.reply_check(answer)
    record = new_record(
        **{name: getattr(ctx, name) for name in _FROM_CONTEXT},
        t_start=t_wall,
        t_end=t_wall + end,
        t_first=None if acc.t_first is None else t_wall + acc.t_first,
        t_first_content=None if acc.t_first_content is None else t_wall + acc.t_first_content,
        t_first_reasoning=None if acc.t_first_reasoning is None else t_wall + acc.t_first_reasoning,
        t_first_tool_call=None if acc.t_first_tool_call is None else t_wall + acc.t_first_tool_call,
        # to the microsecond: numpy rounds the whole list at once, and the array's own round skips
        # np.round's dispatch (same numbers as round() a time; timed in docs/measurements.md)
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
        reasoning_tokens=reasoning_tokens,
        reasoning_counted=reasoning_counted,
        tool_calls=None if tools is None else tools.count,
        tool_calls_invalid=None if tools is None else tools.invalid(),
        finish_reason=acc.finish_reason,
        outcome=outcome,
        error=error,
        status=status,
        odd_stream=" ".join(acc.odd) or None,
        conn_reused=None if lease is None else lease.reused,
        connect_ms=None if lease is None else lease.connect_ms,
        handshake_ms=None if lease is None else lease.handshake_ms,
        tls_ms=None if lease is None else lease.tls_ms,
        reconnect=None if lease is None else lease.reconnect,
        clock_offset_ms=round(offset * 1000.0, 3) if offset else None,
        conn_port=None if lease is None else lease.port,
        text_hash=text_hash,
        reasoning_hash=reasoning_hash,
        tool_hash=tool_hash,
        chunk_hashes=chunk_hashes,
        text=answer if ctx.record_text else None,
        reply_valid=reply_valid,
    )
    return record, retry_after
