"""The Responses API's stream (`POST /v1/responses` with `stream: true`), parsed into the same
token chunks, times, usage and reasoning as a chat stream (`ResponsesAccumulator`), and the
accumulator an endpoint's requests are read with (`accumulator_for`).

The stream is SSE events, `event: <type>` then `data: <json>` whose `type` field is
authoritative, and no `data: [DONE]` (vLLM and OpenAI; vLLM's order: `response.created`,
`response.in_progress`, per output item `response.output_item.added`,
`response.content_part.added`, its deltas, its `.done` events, then `response.completed` with
the response and its usage):
- a token chunk is a delta event with text: `response.output_text.delta` (answer),
  `response.reasoning_text.delta` (reasoning; OpenAI's models stream a summary of their
  reasoning instead, `response.reasoning_summary_text.delta`, taken as reasoning too),
  `response.refusal.delta` (answer: tokens the model generated); a tool call's pieces, its name
  (`response.output_item.added` of a `function_call` item) and its arguments
  (`response.function_call_arguments.delta`), are token chunks of a tool call
  (llmload.loadgen.stream.tool_calls). t_first is the first of them, t_last the last (there are
  no `choices`).
- `response.completed` or `response.incomplete` ends the stream: its `response.usage` becomes
  the usage the rest of llmload reads (`input_tokens` as prompt_tokens, `output_tokens` as
  completion_tokens, `input_tokens_details.cached_tokens`, `output_tokens_details.
  reasoning_tokens`), its status the finish_reason: `completed` is "stop", `incomplete` is
  "length" (vLLM's answer at max_output_tokens: status incomplete in a `response.completed`
  event) unless `incomplete_details.reason` names another reason.
- `error` and `response.failed` fail the request (`stream_error`, with the server's message).
- the other events of the API (lifecycle, `.added`, `.done`, tool-call progress) carry no
  token; an event type outside the API is named in the request's `odd_stream` and does not fail
  it (a new event type may carry tokens llmload does not count: the note under the table says
  which).
"""

from __future__ import annotations

from typing import Any

from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent, check_usage, decode_data, shown
from llmload.loadgen.stream.reasoning import ANSWER, THOUGHT, TOOL
from llmload.loadgen.stream.sse import StreamAccumulator

ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
ARGUMENTS_DELTA = "response.function_call_arguments.delta"
ITEM_ADDED = "response.output_item.added"
REASONING_DELTAS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
ENDS = frozenset({"response.completed", "response.incomplete"})
FAILURES = frozenset({"error", "response.failed"})
# events of the API that carry no token: lifecycle, item and part boundaries, tool-call progress
_QUIET = frozenset({"response.created", "response.in_progress", "response.queued", "keepalive"})
_QUIET_ENDINGS = (
    ".added", ".done", ".in_progress", ".completed", ".searching", ".generating", ".interpreting",
    ".failed", ".incomplete", ".partial_image", ".annotation.added",
)  # fmt: skip
UNKNOWN_EVENT = "unknown_event:"  # the odd_stream name of an event type outside the API, + the type


def accumulator_for(endpoint: str, keep_text: bool = False) -> StreamAccumulator:
    """The accumulator that reads an `endpoint`'s streams (completions, chat or responses)."""
    if endpoint == "responses":
        return ResponsesAccumulator(keep_text=keep_text)
    return StreamAccumulator(endpoint == "chat", keep_text=keep_text)


def finish_reason(response: dict[str, Any]) -> str | None:
    """The finish_reason of a finished response's status (module docstring)."""
    status = response.get("status")
    if status == "completed":
        return "stop"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    return status if isinstance(status, str) else None


def chat_usage(usage: Any, payload: bytes | bytearray) -> dict[str, Any]:
    """A Responses API usage object as the chat usage the rest of llmload reads; MalformedStream
    when it is not an object of counts."""
    if not isinstance(usage, dict):
        raise MalformedStream(f"response.usage is not an object: {shown(payload)!r}")
    out: dict[str, Any] = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
    }
    if usage.get("total_tokens") is not None:
        out["total_tokens"] = usage["total_tokens"]
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    if isinstance(inputs, dict) and inputs.get("cached_tokens") is not None:
        out["prompt_tokens_details"] = {"cached_tokens": inputs["cached_tokens"]}
    if isinstance(outputs, dict) and outputs.get("reasoning_tokens") is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": outputs["reasoning_tokens"]}
    check_usage(out, payload)
    return out


def _error_text(obj: dict[str, Any]) -> str:
    """The message of an `error` or `response.failed` event, on one line."""
    error = obj.get("response", {}).get("error") if isinstance(obj.get("response"), dict) else obj
    if isinstance(error, dict):
        parts = [str(error[k]) for k in ("code", "message") if error.get(k) is not None]
        text = ": ".join(parts) or str(error)
    else:
        text = str(error)
    return " ".join(f"{obj.get('type')}: {text}".split())[:200]


class ResponsesAccumulator(StreamAccumulator):
    """Accumulates one streamed Responses API answer (module docstring). Its events are parsed in
    full: no token-chunk template (every delta event carries its own `sequence_number`)."""

    __slots__ = ()

    def __init__(self, keep_text: bool = False) -> None:
        super().__init__(chat=False, keep_text=keep_text)
        self._tries = self._rtries = 0
        self._learning = False

    def _feed_data(self, payload: bytes | bytearray, t: float) -> bool:
        """One event's data; True at the event that ends the response."""
        obj = decode_data(payload)
        if obj is None:  # `[DONE]`: not sent by the API; a server that adds it is done
            self.done = True
            return True
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise MalformedStream(f"event without a type: {shown(payload)!r}")
        if kind in ANSWER_DELTAS or kind in REASONING_DELTAS:
            delta = obj.get("delta")
            if not isinstance(delta, str):
                raise MalformedStream(f"{kind}: delta is not a string: {shown(payload)!r}")
            if delta:
                self._token(t, delta, THOUGHT if kind in REASONING_DELTAS else ANSWER)
        elif kind in (ARGUMENTS_DELTA, ITEM_ADDED):
            self._tool_event(obj, kind, payload, t)
        elif kind in ENDS:
            response = obj.get("response")
            if not isinstance(response, dict):
                raise MalformedStream(f"{kind} without a response object: {shown(payload)!r}")
            if response.get("usage") is not None:
                self.usage = chat_usage(response["usage"], payload)
            self.finish_reason = finish_reason(response)
            self.done = True
            return True
        elif kind in FAILURES:
            raise StreamErrorEvent(_error_text(obj))
        elif kind not in _QUIET and not (kind.startswith("response.") and kind.endswith(_QUIET_ENDINGS)):
            name = UNKNOWN_EVENT + "_".join(kind.split())[:60]
            if name not in self.odd:
                self.odd.append(name)
        return False

    def _tool_event(self, obj: dict[str, Any], kind: str, payload: bytes | bytearray, t: float) -> None:
        """A function call's arguments piece, or an output item (a function call's name)."""
        index = obj.get("output_index", 0)
        if type(index) is not int:
            raise MalformedStream(f"{kind}: output_index is not an integer: {shown(payload)!r}")
        if kind == ARGUMENTS_DELTA:
            piece = self._tool_calls().add(index, None, obj.get("delta"))
        else:
            item = obj.get("item")
            if not isinstance(item, dict) or item.get("type") != "function_call":
                return  # another item: a message, reasoning, a built-in tool's call
            name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
            piece = self._tool_calls().add(index, name, arguments, call_id)
        if piece:
            self._token(t, piece, TOOL)

    def _token(self, t: float, delta: str, kind: int) -> None:
        """A delta event with text at t: a token chunk of answer, reasoning or a tool call."""
        if self.t_first is None:
            self.t_first = t
        self.t_last = t
        self._usage_per_chunk = False
        if kind == THOUGHT:
            self._on_reasoning(t, False)
        elif kind == TOOL:
            self._on_tool(t, delta)
        else:
            self._kind = ANSWER
            if self.t_first_content is None:
                self.t_first_content = t
        self._count_chunk(t, delta, None, len(delta) if kind == THOUGHT else 0)
