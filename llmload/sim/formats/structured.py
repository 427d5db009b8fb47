"""Tool calls and structured output in the simulator: the request's `tools`, `tool_choice`,
`parallel_tool_calls` and `response_format` (the Responses API: `text.format`), and the reply the
simulated model gives them, as tokens.

A request with tools answers with tool calls when `tool_choice` is `required` or names a function,
and when it is `auto` (the default with tools) for a share of prompts (`--auto-tool-share`, drawn
from the prompt); `none` answers in text. It calls one function, or, with `parallel_tool_calls`
(default true) and several tools, 1 to `MAX_PARALLEL_CALLS` different ones (drawn from the
prompt). Each call's arguments are JSON fitting the function's `parameters`
(`llmload.sim.formats.json_values`). A request with `response_format` `json_object` or
`json_schema` (and no tool call) answers with JSON text fitting the schema (`json_object`: an
object of a few keys). Everything is drawn from the prompt's hash and the request's tools and
format (a greedy model: the same request gets the same call), and the simulator's seed decides
which replies are invalid (`--invalid-share`, `is_invalid`): an invalid reply is cut before its
last token (its closing brace), so it does not parse.

Tokens: a call costs one header token (the function's name, as vLLM's parser sends it in its
first delta) and the tokens of its arguments (`llmload.core.workload.token_count`); JSON text its
own tokens. A reply longer than max_tokens is cut there (finish_reason `length`, invalid).
Structured replies end on their own: `ignore_eos` does not lengthen them, and they do not think
(`--reasoning` applies to text answers only). The tools are not counted in the prompt's tokens.
A reply decoded under a grammar (a schema, or tool_choice required or named, as vLLM enforces them
with guided decoding; `auto` is parsed after the fact) is `constrained`: its steps cost
`--constrained-ms` more (llmload.sim.engine).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from llmload.core.workload.token_count import text_tokens
from llmload.sim.api import ApiError
from llmload.sim.formats.json_values import value_for

MAX_PARALLEL_CALLS = 3
CHOICES = ("auto", "none", "required")
TOOL_CALLS, JSON = "tool_calls", "json"  # the kinds of structured reply


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StructuredRequest:
    """What a request asks of the reply's shape."""

    tools: tuple[Tool, ...] = ()
    choice: str = "none"  # auto, none, required, or "function" (then `named`)
    named: str | None = None
    parallel: bool = True
    schema: dict[str, Any] | None = None  # response_format's schema ({"type": "object"}: json_object)
    key: str = ""  # the canonical JSON of the fields above: a part of every draw

    @property
    def on(self) -> bool:
        return self.choice != "none" or self.schema is not None


@dataclass(frozen=True, slots=True)
class Call:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Piece:
    """One token of a structured reply: a call's header (its name), or text (arguments or JSON)."""

    call: int  # the call's index; -1 for JSON text
    text: str
    header: bool = False


@dataclass(frozen=True, slots=True)
class StructuredReply:
    kind: str  # TOOL_CALLS or JSON
    calls: tuple[Call, ...]
    pieces: tuple[Piece, ...]
    valid: bool  # before a cut at max_tokens (`cut`)
    constrained: bool = False  # decoded under a grammar: a schema, or tool_choice required or named

    def text_of(self, pieces: tuple[Piece, ...] | list[Piece]) -> str:
        """The text these pieces show: a header stands for its function's name."""
        return "".join(self.calls[p.call].name if p.header else p.text for p in pieces)


def _fail(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _tool(entry: Any, responses: bool) -> Tool:
    """A function tool: chat's {"type": "function", "function": {...}}, the Responses API's flat form."""
    if not isinstance(entry, dict) or entry.get("type", "function") != "function":
        raise _fail("each tool must be an object of type `function`", "tools")
    fn: Any = entry if responses and "function" not in entry else entry.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise _fail("each tool needs a function with a `name`", "tools")
    params = fn.get("parameters")
    params = {"type": "object", "properties": {}} if params is None else params
    if not isinstance(params, dict):
        raise _fail(f"the `parameters` of tool `{name[:40]}` must be an object", "tools")
    return Tool(name, params)


def _choice(value: Any, tools: tuple[Tool, ...]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if isinstance(value, str) and value in CHOICES:
        if value != "none" and not tools:
            raise _fail("When using `tool_choice`, `tools` must be set.", "tool_choice")
        return value, None
    fn = value.get("function", value) if isinstance(value, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise _fail("`tool_choice` must be auto, none, required or a named function", "tool_choice")
    if name not in {t.name for t in tools}:
        raise _fail(f"`tool_choice` names `{name[:40]}`, which is not among the tools", "tool_choice")
    return "function", name


def _schema(value: Any, param: str) -> dict[str, Any] | None:
    """response_format (chat) or text.format (Responses API): the schema of a JSON answer."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        holder = value.get("json_schema", value)  # chat nests it, the Responses API does not
        schema = holder.get("schema") if isinstance(holder, dict) else None
        if not isinstance(schema, dict):
            raise _fail("a `json_schema` format needs a `schema` object", param)
        return schema
    raise _fail("the format's `type` must be text, json_object or json_schema", param)


def parse_structured(body: dict[str, Any], *, responses: bool) -> StructuredRequest:
    """The request's tools and format (module docstring); ApiError naming the bad field."""
    raw = body.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise _fail("`tools` must be a list", "tools")
    tools = tuple(_tool(t, responses) for t in raw or ())
    choice, named = _choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if parallel is not None and not isinstance(parallel, bool):
        raise _fail("`parallel_tool_calls` must be a boolean", "parallel_tool_calls")
    if responses:
        text = body.get("text")
        schema = _schema(text.get("format") if isinstance(text, dict) else None, "text")
    else:
        schema = _schema(body.get("response_format"), "response_format")
    fields = [[t.name, t.parameters] for t in tools], choice, named, parallel is not False, schema
    key = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return StructuredRequest(tools, choice, named, parallel is not False, schema, key)


def tool_result_ids(body: dict[str, Any], *, responses: bool) -> list[str] | None:
    """The call ids the request's tool results answer, in order (chat: each `role: tool` message's
    `tool_call_id`; the Responses API: each `function_call_output` item's `call_id`); None: no
    result. Logged in the truth log, so a test sees that an agent answers the calls it was sent."""
    items = body.get("input" if responses else "messages")
    if not isinstance(items, list):
        return None
    if responses:
        ids = [
            m.get("call_id") for m in items if isinstance(m, dict) and m.get("type") == "function_call_output"
        ]
    else:
        ids = [m.get("tool_call_id") for m in items if isinstance(m, dict) and m.get("role") == "tool"]
    return [str(i) for i in ids] or None


def _draw(*parts: object) -> float:
    """A uniform number in [0, 1) from `parts`, stable across processes."""
    key = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


def is_invalid(seed: int, phash: int, share: float) -> bool:
    """Whether the structured reply to a prompt of hash `phash` is invalid, at `--invalid-share`
    `share` with `--seed` `seed` (tests compute which replies must be invalid with it)."""
    return share > 0 and _draw("invalid", seed, phash) < share


def _calls(spec: StructuredRequest, phash: int, auto_share: float) -> list[Tool]:
    """The tools this request calls (none: it answers in text or JSON)."""
    if spec.choice == "function":
        return [t for t in spec.tools if t.name == spec.named][:1]
    if spec.choice == "none" or (spec.choice == "auto" and _draw("auto", phash, spec.key) >= auto_share):
        return []
    n = len(spec.tools)
    count = 1 + int(_draw("parallel", phash, spec.key) * min(n, MAX_PARALLEL_CALLS)) if spec.parallel else 1
    first = int(_draw("first", phash, spec.key) * n)
    return [spec.tools[(first + i) % n] for i in range(count)]


def plan_reply(
    spec: StructuredRequest, phash: int, *, seed: int, invalid_share: float, auto_share: float
) -> StructuredReply | None:
    """The structured reply to a request (None: a text answer), from its prompt hash and its spec."""
    rng = random.Random(f"structured:{phash}:{spec.key}")
    calls = [
        Call(_call_id(phash, spec, i), tool.name, json.dumps(value_for(tool.parameters, rng)))
        for i, tool in enumerate(_calls(spec, phash, auto_share))
    ]
    if calls:
        pieces = [p for i, c in enumerate(calls) for p in [Piece(i, "", True), *_text_pieces(c.arguments, i)]]
        kind = TOOL_CALLS
    elif spec.schema is not None:
        pieces, kind = _text_pieces(json.dumps(value_for(spec.schema, rng)), -1), JSON
    else:
        return None
    valid = not is_invalid(seed, phash, invalid_share)
    if not valid:
        pieces = pieces[:-1]
    constrained = spec.schema is not None or spec.choice in ("required", "function")
    return StructuredReply(kind, tuple(calls), tuple(pieces), valid, constrained)


def _call_id(phash: int, spec: StructuredRequest, index: int) -> str:
    """A call's id, as vLLM names them, the same for the same request (greedy determinism)."""
    key = f"{phash}:{spec.key}:{index}".encode()
    return "chatcmpl-tool-" + hashlib.blake2b(key, digest_size=12).hexdigest()


def _text_pieces(text: str, call: int) -> list[Piece]:
    return [Piece(call, t) for t in text_tokens(text)]


def tool_call_deltas(reply: StructuredReply, pieces: tuple[Piece, ...]) -> list[dict[str, Any]]:
    """A chat delta's `tool_calls` for these consecutive pieces, as vLLM streams them: a call's
    first delta has its `id`, `type` and function `name`, the others only argument text."""
    out: list[dict[str, Any]] = []
    for piece in pieces:
        if not out or out[-1]["index"] != piece.call:
            out.append({"index": piece.call, "function": {"arguments": ""}})
        entry = out[-1]
        if piece.header:
            call = reply.calls[piece.call]
            entry.update(id=call.id, type="function")
            entry["function"] = {"name": call.name, "arguments": entry["function"]["arguments"]}
        else:
            entry["function"]["arguments"] += piece.text
    return out
