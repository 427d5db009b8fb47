"""Response bodies and SSE messages in the shapes real servers send.

Two usage styles (what vLLM and llama.cpp's llama-server send; tests/unit/test_sse.py):

- `vllm`: `finish_reason` on the last content chunk; usage only when the client asked with
  `stream_options.include_usage`, as a separate chunk with `choices: []`; with
  `continuous_usage_stats` too, every chunk also carries the running usage.
- `llamacpp`: content chunks never carry `finish_reason`; a final chunk with empty text (chat:
  empty delta), the `finish_reason`, `usage` and `timings` follows, whatever stream_options say.

Content chunks are built from a prefix/suffix template made once per request, so a chunk costs
one `json.dumps` of its text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = b"data: [DONE]\n\n"
# What the `malformed` fault writes: an SSE message whose data is cut-off JSON.
MALFORMED = b'data: {"choices": [\n\n'
SYSTEM_FINGERPRINT = "llmload-sim"


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI/vLLM error JSON."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None, reasoning: int | None = None
) -> dict[str, Any]:
    """The usage object; `prompt_tokens_details.cached_tokens` when the cached count is given,
    `completion_tokens_details.reasoning_tokens` when the reasoning count is (vLLM with a
    reasoning parser)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


@dataclass(frozen=True, slots=True)
class Timings:
    """llama.cpp's `timings` object, from the server's own clock."""

    prompt_n: int  # prompt tokens processed (not served by the prefix cache)
    prompt_ms: float  # arrival -> first token
    predicted_n: int
    predicted_ms: float  # first token -> last token
    cache_n: int = 0  # prompt tokens served by the prefix cache

    def to_dict(self) -> dict[str, Any]:
        pn, pms, gn, gms = self.prompt_n, self.prompt_ms, self.predicted_n, self.predicted_ms
        return {
            "cache_n": self.cache_n,
            "prompt_n": pn,
            "prompt_ms": pms,
            "prompt_per_token_ms": pms / pn if pn else 0.0,
            "prompt_per_second": 1000.0 * pn / pms if pms > 0 else 0.0,
            "predicted_n": gn,
            "predicted_ms": gms,
            "predicted_per_token_ms": gms / gn if gn else 0.0,
            "predicted_per_second": 1000.0 * gn / gms if gms > 0 else 0.0,
        }


class Formatter:
    """Builds every message of one response (streamed or not) for one request."""

    def __init__(
        self,
        *,
        request_id: str,
        model: str,
        created: int,
        chat: bool,
        style: str,
        prompt_tokens: int,
        include_usage: bool,
        continuous_usage: bool,
        usage_allowed: bool = True,
    ) -> None:
        self.chat = chat
        self.llamacpp = style == "llamacpp"
        self.prompt_tokens = prompt_tokens
        self.usage_allowed = usage_allowed
        self.cached_tokens: int | None = None  # set once admitted: reported in the final usage
        self.reasoning_tokens: int | None = None  # a thinking request's count (vLLM style only)
        # vLLM sends usage only when asked; llama-server always does.
        self.final_usage = usage_allowed and (self.llamacpp or include_usage)
        self.continuous_usage = usage_allowed and not self.llamacpp and include_usage and continuous_usage
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.head: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        if self.llamacpp:
            self.head["system_fingerprint"] = SYSTEM_FINGERPRINT
        head = json.dumps(self.head, separators=(",", ":"))[:-1]
        if chat:
            prefix = ',"choices":[{"index":0,"delta":{"content":'
            middle = '},"logprobs":null,"finish_reason":'
        else:
            prefix = ',"choices":[{"index":0,"text":'
            middle = ',"logprobs":null,"finish_reason":'
        self._prefix = "data: " + head + prefix
        self._middle = middle
        self._choice_end = "}]" if self.llamacpp else ',"stop_reason":null}]'

    def role_chunk(self) -> bytes:
        """Chat only: the first message, a role-only delta."""
        content = None if self.llamacpp else ""
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": content},
            "logprobs": None,
            "finish_reason": None,
        }
        return sse({**self.head, "choices": [choice]})

    def content_chunk(self, text: str, completion_so_far: int, finish_reason: str | None) -> bytes:
        """One content message; `finish_reason` is only passed (vLLM style) on the last one."""
        finish = "null" if finish_reason is None or self.llamacpp else f'"{finish_reason}"'
        tail = self._choice_end
        if self.continuous_usage:
            tail += ',"usage":' + json.dumps(usage(self.prompt_tokens, completion_so_far))
        return (self._prefix + json.dumps(text) + self._middle + finish + tail + "}\n\n").encode()

    def final_chunks(self, finish_reason: str, completion_tokens: int, timings: Timings) -> list[bytes]:
        """Messages after the last content chunk (before `[DONE]`)."""
        if self.llamacpp:
            delta_key, empty = ("delta", {}) if self.chat else ("text", "")
            data: dict[str, Any] = {
                **self.head,
                "choices": [{"index": 0, delta_key: empty, "logprobs": None, "finish_reason": finish_reason}],
            }
            if self.final_usage:
                data["usage"] = usage(self.prompt_tokens, completion_tokens, self.cached_tokens)
                data["timings"] = timings.to_dict()
            return [sse(data)]
        if self.final_usage:
            final = usage(self.prompt_tokens, completion_tokens, self.cached_tokens, self.reasoning_tokens)
            return [sse({**self.head, "choices": [], "usage": final})]
        return []

    def full_response(
        self,
        text: str,
        finish_reason: str,
        completion_tokens: int,
        timings: Timings,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> bytes:
        """The non-streaming response body; chat's message carries `tool_calls` when given (each
        call's index, id, type and function), and no content then."""
        if self.chat and tool_calls is not None:
            calls = [{k: v for k, v in c.items() if k != "index"} for c in tool_calls]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            choice: dict[str, Any] = {"index": 0, "message": message}
        elif self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason=finish_reason)
        data: dict[str, Any] = {
            **self.head,
            "object": "chat.completion" if self.chat else "text_completion",
            "choices": [choice],
        }
        if self.usage_allowed:
            data["usage"] = usage(self.prompt_tokens, completion_tokens, self.cached_tokens)
            if self.llamacpp:
                data["timings"] = timings.to_dict()
        return json.dumps(data, separators=(",", ":")).encode()
