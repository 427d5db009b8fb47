"""The aiohttp application: vLLM's OpenAI-compatible routes on top of the engine, plus faults.

Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `POST /v1/responses` (the Responses
API: llmload.sim.formats.responses), `GET /v1/models`, `GET /health`,
`GET /metrics`, `POST /tokenize`. With an API key configured, `/v1/*` answers 401 (OpenAI error
JSON, as vLLM's `--api-key`) unless the request carries `Authorization: Bearer <key>`; such a
rejected request never reaches a handler and leaves no truth line. A generation request is
validated, gets its fault draw, is submitted to the engine as a `Sequence`, and its handler
writes one SSE message per engine step as soon as the step ends (all k tokens of the step in one
chunk). Every generation request, faulted or not, leaves one `request` line in the truth log when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
import struct
import time
import uuid
from typing import Any, NamedTuple

from aiohttp import web

from llmload.sim import metrics, power, shapes
from llmload.sim.api import ApiError, GenerationRequest, check_model, parse_generation, prompt_of
from llmload.sim.config import SimConfig
from llmload.sim.connections import ConnectionTracker
from llmload.sim.engine import ADMITTED, STOPPED, Engine, Sequence
from llmload.sim.faults import FaultPicker
from llmload.sim.formats.reasoning import SALT_SPAN, delta_chunk, tagged
from llmload.sim.formats.responses import ResponsesStream, parse_responses, responses_usage
from llmload.sim.formats.structured import (
    TOOL_CALLS,
    StructuredReply,
    parse_structured,
    plan_reply,
    tool_call_deltas,
    tool_result_ids,
)
from llmload.sim.prefix_cache import block_keys, prompt_units
from llmload.sim.tokens import (
    acceptance_rng,
    acceptance_seed,
    completion_text,
    natural_length,
    prompt_hash,
    token_ids,
)
from llmload.sim.truth import RequestTruth, TruthLog, text_hash

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
FLUSH_WAIT_S = 1.0  # longest wait for the socket buffer to drain before a deliberate RST
_HTTP_FAULTS = {
    "http_500": (500, "InternalServerError", "Injected fault: internal server error"),
    "http_503": (503, "ServiceUnavailableError", "Injected fault: service unavailable"),
    "http_429": (429, "RateLimitError", "Injected fault: rate limit reached"),
}
_HTML = "<!DOCTYPE html><html><head><title>Injected fault</title></head><body>not an API</body></html>"


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(data, separators=(",", ":")),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def error_response(err: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return json_response(
        shapes.error_body(err.status, err.message, err.err_type, err.param), err.status, headers
    )


def reset_connection(request: web.BaseRequest) -> None:
    """Close the client's TCP connection with an RST (SO_LINGER 0), dropping anything unsent."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def flush_then_reset(request: web.BaseRequest) -> None:
    """Let already-written bytes leave (bounded wait), then reset the connection."""
    transport = request.transport
    deadline = time.monotonic() + FLUSH_WAIT_S
    while transport is not None and transport.get_write_buffer_size() > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    reset_connection(request)


def _bearer_bytes(key: str) -> list[bytes]:
    """The header bytes that carry `Bearer <key>`: Latin-1, as HTTP clients encode a header, and
    UTF-8, as some send a key beyond Latin-1."""
    header = f"Bearer {key}"
    encoded = [header.encode("utf-8", "surrogateescape")]
    with contextlib.suppress(UnicodeEncodeError):  # beyond Latin-1: only its UTF-8 bytes
        encoded.append(header.encode("latin-1"))
    return encoded


class Reply(NamedTuple):
    """One answer being written: the request, its response, the engine's sequence, the shapes'
    formatter, the request's truth line and its structured reply (None: text)."""

    request: web.Request
    resp: web.StreamResponse
    seq: Sequence
    fmt: shapes.Formatter
    rec: RequestTruth
    plan: StructuredReply | None


class SimServer:
    """Request handlers sharing one engine, one fault picker and one truth log."""

    def __init__(self, config: SimConfig, engine: Engine, truth: TruthLog | None) -> None:
        self.config = config
        self.engine = engine
        self.truth = truth
        self.faults = FaultPicker(config.faults, config.fault_seed)
        self.created = int(time.time())
        self.connections = ConnectionTracker(config, truth)
        self.reasoning = config.reasoning_spec
        self.gpu_page = None if engine.energy is None else power.GpuPage(engine.energy)

    @web.middleware
    async def check_api_key(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """401 on /v1/* without the configured bearer token (constant-time comparison of the
        header's bytes: aiohttp decodes them as UTF-8 with surrogate escapes, so any byte a client
        sends, Latin-1 or broken UTF-8, comes back as it was and is simply a key that does not match)."""
        key = self.config.api_key
        if key and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not any(hmac.compare_digest(given, expected) for expected in _bearer_bytes(key)):
                return error_response(ApiError(401, "Invalid API key", "AuthenticationError"))
        response: web.StreamResponse = await handler(request)
        return response

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.check_api_key] if self.config.api_key else [])
        app.on_response_prepare.append(self.connections.on_prepare)
        app.add_routes(
            [
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat_completions),
                web.post("/v1/responses", self.responses),
                web.get("/v1/models", self.models),
                web.get("/health", self.health),
                web.get("/metrics", self.metrics),
                web.get("/gpu/metrics", self.gpu_metrics),
                web.post("/tokenize", self.tokenize),
            ]
        )
        return app

    # --- small routes -------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        model = self.config.model
        card = {
            "id": model,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [],
        }
        return json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        text = metrics.render(self.engine, self.config.model)
        return web.Response(text=text, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def gpu_metrics(self, request: web.Request) -> web.Response:
        """The simulated GPUs as a DCGM exporter shows them (llmload.sim.power)."""
        if self.gpu_page is None:
            raise web.HTTPNotFound()
        text = self.gpu_page.text(time.time(), self.engine.held_tokens())
        return web.Response(text=text, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ApiError(400, "request body must be a JSON object")
            check_model(body, self.config.model)
            prompt, _ = prompt_of(body, chat="messages" in body)
        except ApiError as err:
            return error_response(err)
        except ValueError:
            return error_response(ApiError(400, "request body is not valid JSON"))
        if "messages" in body:
            _, count = prompt_of(body, chat=True)
            tokens = token_ids(" ".join(str(m.get("content") or "") for m in body["messages"]))
            tokens += [0] * (count - len(tokens))  # the template tokens
        else:
            tokens = token_ids(prompt)
        return json_response(
            {"count": len(tokens), "max_model_len": self.config.max_model_len, "tokens": tokens}
        )

    # --- generation ---------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True, responses=True)

    async def _generate(
        self, request: web.Request, *, chat: bool, responses: bool = False
    ) -> web.StreamResponse:
        arrival = time.time()
        request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        rec = RequestTruth(
            id=request_id,
            endpoint="responses" if responses else "chat" if chat else "completions",
            stream=False,
            arrival=arrival,
            connection=self.connections.id_of(request),
            received=self.connections.received(request),
            session=request.headers.get("X-Session-Id"),
        )
        try:
            resp = await self._respond(request, chat, rec, {"X-Request-Id": request_id})
            rec.status = None if rec.fault == "reset" else resp.status
            return resp
        finally:
            if self.truth is not None:
                self.truth.request(rec)

    async def _respond(
        self, request: web.Request, chat: bool, rec: RequestTruth, headers: dict[str, str]
    ) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return error_response(ApiError(400, "request body is not valid JSON"), headers)
        try:
            model, max_len = self.config.model, self.config.max_model_len
            self._check_keys(body)
            if rec.endpoint == "responses":
                req = parse_responses(body, served_model=model, max_model_len=max_len)
            else:
                req = parse_generation(body, chat=chat, served_model=model, max_model_len=max_len)
            plan = self._plan(body, req) if chat else None
        except ApiError as err:
            return error_response(err, headers)
        rec.stream = req.stream
        rec.prompt_tokens = req.prompt_tokens
        rec.tool_results = tool_result_ids(body, responses=req.responses)
        rec.fault = self.faults.draw()
        return await self._serve(request, req, rec, headers, plan)

    def _check_keys(self, body: Any) -> None:
        """400 for a body key the server is configured to reject (--reject-keys)."""
        rejected = self.config.rejected_keys & set(body) if isinstance(body, dict) else ()
        for key in sorted(rejected):
            raise ApiError(400, f"`{key}` is not supported by this server", param=key)

    def _plan(self, body: dict[str, Any], req: GenerationRequest) -> StructuredReply | None:
        """The structured reply a chat or Responses request asks for (llmload.sim.formats.structured)."""
        spec = parse_structured(body, responses=req.responses)
        if not spec.on:
            return None
        cfg = self.config
        return plan_reply(
            spec,
            prompt_hash(req.prompt),
            seed=cfg.seed,
            invalid_share=cfg.invalid_share,
            auto_share=cfg.auto_tool_share,
        )

    async def _serve(
        self,
        request: web.Request,
        req: GenerationRequest,
        rec: RequestTruth,
        headers: dict[str, str],
        plan: StructuredReply | None,
    ) -> web.StreamResponse:
        fault = rec.fault
        if fault in _HTTP_FAULTS:
            status, err_type, message = _HTTP_FAULTS[fault]
            extra = {"Retry-After": "1"} if status == 429 else {}
            return error_response(ApiError(status, message, err_type), {**headers, **extra})
        if fault == "wrong_content_type":
            return web.Response(text=_HTML, content_type="text/html", headers=headers)
        if fault == "reset":
            reset_connection(request)
            return web.Response(status=500)  # never sent: the connection is gone
        if fault == "slow_headers":
            await asyncio.sleep(self.config.slow_headers_s)

        seq = self._sequence(req, plan)
        rec.accept_seed = acceptance_seed(self.config.seed, req.prompt)
        self.engine.submit(seq)
        fmt = shapes.Formatter(
            request_id=rec.id,
            model=self.config.model,
            created=int(rec.arrival),
            chat=req.chat,
            style=self.config.usage_style,
            prompt_tokens=req.prompt_tokens,
            include_usage=req.include_usage,
            continuous_usage=req.continuous_usage,
            usage_allowed=fault != "no_usage",
        )
        resp = web.StreamResponse(headers=headers)
        try:
            reply = Reply(request, resp, seq, fmt, rec, plan)
            await (self._stream if req.stream else self._complete)(reply)
        except ConnectionError:
            rec.finish_reason = "abort"  # the client went away
        except asyncio.CancelledError:
            rec.finish_reason = "abort"  # the server is shutting down
            raise
        finally:
            seq.abort()  # no-op for a finished sequence; frees the batch slot otherwise
            rec.admitted = seq.admitted_at
            rec.completion_tokens = seq.generated
            rec.flipped = seq.flipped
            self._truth_of_history(req, seq, rec)
            if plan is not None:
                self._truth_of_structure(plan, rec)
        return resp

    @staticmethod
    def _truth_of_structure(plan: StructuredReply, rec: RequestTruth) -> None:
        """A structured reply's truth: its kind, whether what was sent is valid, its calls and tokens."""
        sent = plan.pieces[: rec.tokens_sent]
        rec.structured = plan.kind
        rec.valid = plan.valid and rec.tokens_sent == len(plan.pieces) and rec.finish_reason != "length"
        rec.tokens = [plan.text_of([p]) for p in sent]
        calls = {p.call for p in sent if p.header}
        rec.tool_calls = [
            {"id": c.id, "name": c.name, "arguments": "".join(p.text for p in sent if p.call == i)}
            for i, c in enumerate(plan.calls)
            if i in calls
        ]
        rec.reply_hash = text_hash(plan.text_of(sent))

    def _truth_of_history(self, req: GenerationRequest, seq: Sequence, rec: RequestTruth) -> None:
        """The prefix cache's hit and, for chat, hashes of the history sent and of the reply."""
        if self.engine.prefix_cache is not None and seq.admitted_at is not None:
            rec.cached_tokens = seq.cached_tokens
        if req.messages is not None:
            sent = [m for m in req.messages if isinstance(m, dict) and m.get("role") == "assistant"]
            rec.history_hashes = [text_hash(str(m.get("content") or "")) for m in sent]
            answer = max(0, rec.tokens_sent - rec.reasoning_tokens)
            rec.reply_hash = text_hash(completion_text(seq.prompt_hash, rec.reasoning_tokens, answer))

    def _note_cached(self, seq: Sequence, fmt: shapes.Formatter) -> int:
        """The admitted sequence's cached prompt tokens, also put into the usage the client gets
        (llama.cpp always reports them, vLLM when prefix caching is on)."""
        if self.engine.prefix_cache is not None or fmt.llamacpp:
            fmt.cached_tokens = seq.cached_tokens
        return seq.cached_tokens

    def _sequence(self, req: GenerationRequest, plan: StructuredReply | None) -> Sequence:
        phash = prompt_hash(req.prompt)
        natural = natural_length(phash) if plan is None else len(plan.pieces)
        honour_ignore_eos = req.ignore_eos and not self.config.ignore_eos_unsupported and plan is None
        if honour_ignore_eos or natural >= req.max_tokens:
            target, reason = req.max_tokens, "length"
        else:
            target, reason = natural, "stop"
        seq = Sequence(
            prompt_tokens=req.prompt_tokens,
            target_tokens=target,
            finish_reason=reason,
            prompt_hash=phash,
            rng=acceptance_rng(self.config.seed, req.prompt),
            constrained=plan is not None and plan.constrained,
        )
        cache = self.engine.prefix_cache
        if cache is not None:
            seq.block_keys = block_keys(prompt_units(req.prompt, req.messages), cache.block_size)
        return seq

    def _timings(self, rec: RequestTruth, cached: int) -> shapes.Timings:
        first = rec.first_token if rec.first_token is not None else rec.arrival
        last = rec.last_token if rec.last_token is not None else first
        return shapes.Timings(
            prompt_n=(rec.prompt_tokens or 0) - cached,
            prompt_ms=(first - rec.arrival) * 1000.0,
            predicted_n=rec.tokens_sent,
            predicted_ms=(last - first) * 1000.0,
            cache_n=cached,
        )

    async def _stream(self, reply: Reply) -> None:
        request, resp, seq, fmt, rec, plan = reply
        cfg, fault = self.config, rec.fault
        resp.content_type = SSE_CONTENT_TYPE
        resp.headers["Cache-Control"] = "no-cache"
        await resp.prepare(request)
        target = seq.target_tokens
        thinking = rec.reasoning_tokens = (
            self.reasoning.tokens(seq.prompt_hash, target) if self.reasoning.on and plan is None else 0
        )
        if thinking and not fmt.llamacpp:
            fmt.reasoning_tokens = thinking
        events = (
            ResponsesStream(f"resp_{rec.id}", cfg.model, int(rec.arrival))
            if rec.endpoint == "responses"
            else None
        )
        if events is not None:
            await resp.write(events.start())
        cut_at = min(cfg.drop_after, target - 1) if fault == "drop" else None
        malformed_at = max(1, target // 2) if fault == "malformed" else None
        if cut_at == 0:
            await flush_then_reset(request)
            return
        sent = 0
        held = b""  # the bunched fault's chunk, written with the next
        while sent < target:
            k = await seq.events.get()
            if k == STOPPED:
                rec.finish_reason = "abort"
                return
            if k == ADMITTED:
                if fmt.chat and events is None:  # the Responses API has no role chunk
                    await resp.write(fmt.role_chunk())
                    rec.role_sent = time.time()
                continue
            if cut_at is not None:
                k = min(k, cut_at - sent)
            done = sent + k == target
            if plan is not None:
                message = self._structured_chunk(reply, events, sent, k)
            elif thinking or events is not None:
                message = self._thinking_chunk(seq, fmt, events, sent, k, thinking)
                rec.chunk_reasoning.append(max(0, min(sent + k, thinking) - sent))
            else:
                text = (
                    ""
                    if done and cfg.empty_last_text
                    else completion_text(seq.prompt_hash, sent, k, seq.flipped)
                )
                message = fmt.content_chunk(text, sent + k, seq.finish_reason if done else None)
            if fault == "bunched" and not done and not held:
                held = message  # the truth keeps the time it was due, as a proxy's client never sees
            else:
                await resp.write(held + message)
                held = b""
            rec.content_written(time.time(), k)
            sent += k
            if cut_at is not None and sent >= cut_at:
                await flush_then_reset(request)
                return
            if fault == "stall" and len(rec.chunk_times) == 1:
                await asyncio.sleep(cfg.stall_s)
            if malformed_at is not None and sent >= malformed_at and not done:
                await resp.write(shapes.MALFORMED)
                malformed_at = None
        rec.finish_reason = seq.finish_reason
        timings = self._timings(rec, self._note_cached(seq, fmt))
        if events is not None:
            usage = (
                responses_usage(fmt.prompt_tokens, sent, thinking, fmt.cached_tokens)
                if fmt.usage_allowed
                else None
            )
            await resp.write(events.finish(seq.finish_reason, usage))
            await resp.write_eof()
            return
        for chunk in fmt.final_chunks(wire_finish(seq, plan), sent, timings):
            await resp.write(chunk)
        if fault != "no_done":
            await resp.write(shapes.DONE)
        rec.closed = time.time()
        await resp.write_eof()
        if cfg.close_after_stream and request.transport is not None:
            request.transport.close()  # after the buffered reply is flushed, as llama-server does

    @staticmethod
    def _structured_chunk(reply: Reply, events: ResponsesStream | None, sent: int, k: int) -> bytes:
        """The message of a step of k tokens of a structured reply: JSON text or tool-call deltas
        (chat), or the Responses API's events."""
        seq, fmt, plan = reply.seq, reply.fmt, reply.plan
        assert plan is not None
        pieces = plan.pieces[sent : sent + k]
        if events is not None:
            return events.structured(plan, pieces)
        finish = wire_finish(seq, plan) if sent + k == seq.target_tokens else None
        if plan.kind != TOOL_CALLS:
            return fmt.content_chunk(plan.text_of(pieces), sent + k, finish)
        usage = shapes.usage(fmt.prompt_tokens, sent + k) if fmt.continuous_usage else None
        delta = {"tool_calls": tool_call_deltas(plan, pieces)}
        return delta_chunk(fmt.head, delta, None if fmt.llamacpp else finish, usage)

    def _thinking_chunk(
        self,
        seq: Sequence,
        fmt: shapes.Formatter,
        events: ResponsesStream | None,
        sent: int,
        k: int,
        thinking: int,
    ) -> bytes:
        """The message of a step of k tokens at position `sent` of a request whose first `thinking`
        tokens are reasoning, in the configured format (llmload.sim.formats)."""
        cfg = self.config
        think = max(0, min(sent + k, thinking) - sent)
        salt = cfg.reasoning_salt * SALT_SPAN
        flipped = {p + salt for p in seq.flipped}
        reasoning = completion_text(seq.prompt_hash, sent + salt, think, flipped) if think else ""
        answer = completion_text(seq.prompt_hash, sent + think, k - think, seq.flipped) if k > think else ""
        if events is not None:
            return events.delta(reasoning, answer)
        done = sent + k == seq.target_tokens
        finish = seq.finish_reason if done else None
        if not fmt.chat or cfg.reasoning_format == "tags":
            text = (tagged(reasoning, sent == 0, sent + k >= thinking) if think else "") + answer
            return fmt.content_chunk(text, sent + k, finish)
        delta = {cfg.reasoning_format: reasoning} if reasoning else {}
        if answer:
            delta["content"] = answer
        usage = shapes.usage(fmt.prompt_tokens, sent + k) if fmt.continuous_usage else None
        return delta_chunk(fmt.head, delta, None if fmt.llamacpp else finish, usage)

    async def _complete(self, reply: Reply) -> None:
        request, resp, seq, fmt, rec, plan = reply
        cfg, fault = self.config, rec.fault
        first = None  # when the engine produced the first token (for llama.cpp's timings)
        while seq.generated < seq.target_tokens:
            event = await seq.events.get()
            if event == STOPPED:
                rec.finish_reason = "abort"
                return
            if event != ADMITTED and first is None:
                first = time.time()
        last = time.time()
        if fault == "stall":
            await asyncio.sleep(cfg.stall_s)
        text = (
            completion_text(seq.prompt_hash, 0, seq.generated, seq.flipped)
            if plan is None
            else plan.text_of(plan.pieces[: seq.generated])
        )
        first = first or last
        cached = self._note_cached(seq, fmt)
        timings = shapes.Timings(
            (rec.prompt_tokens or 0) - cached,
            (first - rec.arrival) * 1000.0,
            seq.generated,
            (last - first) * 1000.0,
            cache_n=cached,
        )
        calls = None
        if plan is not None and plan.kind == TOOL_CALLS:
            calls = tool_call_deltas(plan, plan.pieces[: seq.generated])
        body = fmt.full_response(text, wire_finish(seq, plan), seq.generated, timings, calls)
        complete = fault not in ("drop", "malformed")
        if fault == "malformed":
            body = body[: len(body) // 2]  # a 200 whose JSON body is cut in the middle
        resp.content_type = "application/json"
        resp.content_length = len(body)
        await resp.prepare(request)
        if fault == "drop":
            await resp.write(body[: len(body) // 2])
            await flush_then_reset(request)
            return
        await resp.write(body)
        if complete:
            rec.content_written(time.time(), seq.generated)
            rec.finish_reason = seq.finish_reason
        await resp.write_eof()


def wire_finish(seq: Sequence, plan: StructuredReply | None) -> str:
    """The finish_reason a chat client is sent: `tool_calls` for a tool-call reply that ended on
    its own, the sequence's own reason otherwise."""
    if plan is not None and plan.kind == TOOL_CALLS and seq.finish_reason == "stop":
        return TOOL_CALLS
    return seq.finish_reason
