"""The Responses API in the simulator (`POST /v1/responses`): the request's fields, and its stream
as vLLM writes it.

Request: `input` (a string, or a list of messages whose `content` is a string or a list of parts
with `text`; a `function_call` item sent back counts its `arguments`, a `function_call_output`
its `output`), `max_output_tokens`, `stream`, `ignore_eos` (vLLM accepts it), `model`, `tools`,
`tool_choice`, `parallel_tool_calls` and `text.format` (llmload.sim.formats.structured); sampling
fields are accepted and ignored. Stream (`ResponsesStream`): `event: <type>` and `data: <json>`
per event, no `[DONE]`: `response.created`, `response.in_progress`, for the reasoning item
`response.output_item.added`, `response.content_part.added`, a `response.reasoning_text.delta` per
chunk, `response.reasoning_text.done`, `response.content_part.done`, `response.output_item.done`,
then the message item the same way with `response.output_text.delta`, then `response.completed`
with status `incomplete` when max_output_tokens ended it (as vLLM) and the usage
(`output_tokens_details.reasoning_tokens`). A step spanning the end of the thinking writes its
reasoning delta, the reasoning item's end, the message item's start and its text delta at once.
A tool call (llmload.sim.formats.structured) is a `function_call` item per call:
`response.output_item.added` with its name and call id when its header token is written, a
`response.function_call_arguments.delta` per step of its arguments, then
`response.function_call_arguments.done` and `response.output_item.done` with the whole call.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.sim.api import ApiError, GenerationRequest, check_model
from llmload.sim.formats.structured import Call, Piece, StructuredReply
from llmload.sim.tokens import chat_prompt


def _messages(value: Any) -> list[dict[str, Any]]:
    """`input` as chat messages (role, content text)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        raise ApiError(400, "`input` must be a string or a non-empty list of messages", param="input")
    out = []
    for m in value:
        content = m.get("content")
        if content is None:  # a function_call item sent back (its arguments), or its output
            content = m.get("arguments") or m.get("output")
        if isinstance(content, list):
            content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
        out.append({"role": m.get("role", "user"), "content": str(content or "")})
    return out


def parse_responses(body: Any, *, served_model: str, max_model_len: int) -> GenerationRequest:
    """Validate a Responses API request body (module docstring)."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    check_model(body, served_model)
    messages = _messages(body.get("input"))
    prompt, prompt_tokens = chat_prompt(messages)
    max_tokens = body.get("max_output_tokens")
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, "`max_output_tokens` must be an integer >= 1", param="max_output_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens", param="input")
    flags = {}
    for key in ("stream", "ignore_eos"):
        value = body.get(key, False)
        if value is not None and not isinstance(value, bool):
            raise ApiError(400, f"`{key}` must be a boolean", param=key)
        flags[key] = bool(value)
    return GenerationRequest(
        chat=True,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=flags["stream"],
        include_usage=True,
        continuous_usage=False,
        ignore_eos=flags["ignore_eos"],
        messages=tuple(messages),
        responses=True,
    )


def event(kind: str, seq: int, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": seq, **fields}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


class ResponsesStream:
    """The events of one streamed response (module docstring), in order, as bytes."""

    def __init__(self, response_id: str, model: str, created: int) -> None:
        self.response = {"id": response_id, "object": "response", "created_at": created, "model": model}
        self.seq = 0
        self.item: str | None = None  # "reasoning", "message" or "function_call": the open output item
        self.index = -1
        self.texts: dict[str, str] = {"reasoning": "", "message": "", "function_call": ""}
        self.call: dict[str, Any] = {}  # the open function_call item

    def _event(self, kind: str, **fields: Any) -> bytes:
        out = event(kind, self.seq, **fields)
        self.seq += 1
        return out

    def start(self) -> bytes:
        head = {**self.response, "status": "in_progress", "usage": None, "output": []}
        return self._event("response.created", response=head) + self._event(
            "response.in_progress", response=head
        )

    def _open(self, item: str) -> bytes:
        out = self._close()
        self.item, self.index = item, self.index + 1
        part = (
            {"type": "reasoning_text", "text": ""}
            if item == "reasoning"
            else {"type": "output_text", "text": ""}
        )
        ids = {"item_id": f"{item}-{self.index}", "output_index": self.index}
        out += self._event(
            "response.output_item.added", output_index=self.index, item={"type": item, "id": ids["item_id"]}
        )
        return out + self._event("response.content_part.added", content_index=0, part=part, **ids)

    def _close(self) -> bytes:
        if self.item is None:
            return b""
        if self.item == "function_call":
            return self._close_call()
        item, text = self.item, self.texts[self.item]
        ids = {"item_id": f"{item}-{self.index}", "output_index": self.index}
        kind = "response.reasoning_text.done" if item == "reasoning" else "response.output_text.done"
        part = {"type": "reasoning_text" if item == "reasoning" else "output_text", "text": text}
        out = self._event(kind, content_index=0, text=text, **ids)
        out += self._event("response.content_part.done", content_index=0, part=part, **ids)
        self.item = None
        return out + self._event(
            "response.output_item.done", output_index=self.index, item={"type": item, "id": ids["item_id"]}
        )

    def delta(self, reasoning: str, answer: str) -> bytes:
        """One step's text: its reasoning delta, its answer delta, or both (module docstring)."""
        out = b""
        for item, text in (("reasoning", reasoning), ("message", answer)):
            if not text:
                continue
            if self.item != item:
                out += self._open(item)
            self.texts[item] += text
            kind = "response.reasoning_text.delta" if item == "reasoning" else "response.output_text.delta"
            extra: dict[str, Any] = {} if item == "reasoning" else {"logprobs": []}
            out += self._event(kind, content_index=0, delta=text, item_id=f"{item}-{self.index}",
                               output_index=self.index, **extra)  # fmt: skip
        return out

    def _open_call(self, call: Call) -> bytes:
        out = self._close()
        self.item, self.index = "function_call", self.index + 1
        self.texts["function_call"] = ""
        self.call = {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name}
        item = {**self.call, "arguments": "", "status": "in_progress"}
        return out + self._event("response.output_item.added", output_index=self.index, item=item)

    def _arguments(self, text: str) -> bytes:
        if not text:
            return b""
        self.texts["function_call"] += text
        ids = {"item_id": self.call["id"], "output_index": self.index}
        return self._event("response.function_call_arguments.delta", delta=text, **ids)

    def _close_call(self) -> bytes:
        arguments = self.texts["function_call"]
        ids = {"item_id": self.call["id"], "output_index": self.index}
        out = self._event("response.function_call_arguments.done", arguments=arguments, **ids)
        self.item = None
        item = {**self.call, "arguments": arguments, "status": "completed"}
        return out + self._event("response.output_item.done", output_index=self.index, item=item)

    def structured(self, reply: StructuredReply, pieces: tuple[Piece, ...]) -> bytes:
        """One step of a structured reply: JSON text as the message's text, or tool calls' items
        and argument deltas (module docstring)."""
        if not reply.calls:
            return self.delta("", reply.text_of(pieces))
        out, text = b"", ""
        for piece in pieces:
            if piece.header:
                out += self._arguments(text) + self._open_call(reply.calls[piece.call])
                text = ""
            else:
                text += piece.text
        return out + self._arguments(text)

    def finish(self, finish_reason: str, usage: dict[str, Any] | None) -> bytes:
        """The items' ends and `response.completed` (status incomplete at max_output_tokens)."""
        status = "incomplete" if finish_reason == "length" else "completed"
        details = {"reason": "max_output_tokens"} if status == "incomplete" else None
        final = {**self.response, "status": status, "incomplete_details": details, "usage": usage}
        return self._close() + self._event("response.completed", response=final)


def responses_usage(
    prompt: int, completion: int, reasoning: int | None, cached: int | None
) -> dict[str, Any]:
    """The Responses API's usage object."""
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": prompt + completion,
    }
