"""Parse an OpenAI-compatible streaming response (SSE) into token timings and counts.

`StreamAccumulator.feed(line, t)` takes one raw SSE line and the time it arrived. It knows the
shapes real servers send (see shared/reference/shapes): usage in a separate `choices: []` chunk
(vLLM with include_usage), usage on the last chunk whose `choices` is not empty (llama.cpp),
usage on every chunk (vLLM continuous_usage_stats), empty-text token chunks (vLLM), a role-only
first delta (chat), and error objects sent inside a 200 stream.

Definitions (as vLLM `bench serve`, see README "Metric definitions"):
- t_first: the first message with non-empty `choices` (vLLM's TTFT point);
- t_first_content: the first message with non-empty text / delta content;
- t_last: the last message with non-empty `choices` (vLLM's end of the request);
- a *token chunk* is a `choices` message that carries generated text, or empty text without a
  finish_reason (vLLM sends a token whose bytes are not yet a full character that way); the
  role-only chat delta and llama.cpp's closing `text: ""` + finish_reason message are not.
"""

from __future__ import annotations

import json
from typing import Any

# The hot path: a prebuilt decoder's raw_decode on str skips json.loads's encoding detection and
# its two whitespace regex matches (the payload is already stripped): ~25 % less per event
# (benchmarks/sse_parse.py).
_decode = json.JSONDecoder().raw_decode


class MalformedStream(ValueError):
    """A data line that is not valid JSON or not an object."""


class StreamErrorEvent(RuntimeError):
    """The server sent an error object inside the stream."""


class StreamAccumulator:
    """Accumulates one streamed response. Times are seconds since the request's t0."""

    __slots__ = (
        "chat",
        "done",
        "t_first",
        "t_first_content",
        "t_last",
        "chunk_times",
        "chunk_tokens",
        "finish_reason",
        "usage",
        "_usage_per_chunk",
        "_last_completion_tokens",
        "timings",
    )

    def __init__(self, chat: bool = False) -> None:
        self.chat = chat
        self.done = False
        self.t_first: float | None = None
        self.t_first_content: float | None = None
        self.t_last: float | None = None
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self._usage_per_chunk = True  # stays True while every token chunk carried usage
        self._last_completion_tokens = 0
        self.timings: dict[str, Any] | None = None  # llama.cpp's timings, from the chunk with usage

    def feed(self, line: bytes, t: float) -> bool:
        """Consume one SSE line; returns True once `data: [DONE]` was seen."""
        if not line.startswith(b"data:"):
            return False  # blank separators, comments (":"), event:/id: fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            text = payload.decode()  # SSE is UTF-8; UnicodeDecodeError is a ValueError
            obj, end = _decode(text)
            if end != len(text):
                raise ValueError("data after the JSON value")
        except ValueError:
            raise MalformedStream(f"data line is not JSON: {payload[:80]!r}") from None
        if not isinstance(obj, dict):
            raise MalformedStream(f"data line is not a JSON object: {payload[:80]!r}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        if choices:
            self._on_choice(choices[0], usage, t)
        elif "error" in obj:
            raise StreamErrorEvent(str(obj["error"])[:200])
        if usage:
            self.usage = usage
            self.timings = obj.get("timings") or self.timings
        return False

    def _on_choice(self, choice: dict[str, Any], usage: dict[str, Any] | None, t: float) -> None:
        if self.t_first is None:
            self.t_first = t
        self.t_last = t
        if self.chat:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            role_only = text is None or (not text and "role" in delta)
        else:
            text = choice.get("text")
            role_only = text is None
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = finish
        if not (text or (not role_only and not finish)):
            return
        if text and self.t_first_content is None:
            self.t_first_content = t
        self.chunk_times.append(t)
        if usage and self._usage_per_chunk:
            tokens = int(usage.get("completion_tokens") or 0)
            self.chunk_tokens.append(tokens - self._last_completion_tokens)
            self._last_completion_tokens = tokens
        else:
            self._usage_per_chunk = False

    @property
    def completion_tokens(self) -> int | None:
        """usage.completion_tokens if the server sent usage, else None."""
        if self.usage is None or self.usage.get("completion_tokens") is None:
            return None
        return int(self.usage["completion_tokens"])

    @property
    def prompt_tokens(self) -> int | None:
        if self.usage is None or self.usage.get("prompt_tokens") is None:
            return None
        return int(self.usage["prompt_tokens"])

    def tokens_per_chunk(self) -> list[int] | None:
        """Tokens of each token chunk, when every one of them carried cumulative usage."""
        if self._usage_per_chunk and self.chunk_times and len(self.chunk_tokens) == len(self.chunk_times):
            return list(self.chunk_tokens)
        return None

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens the server's prefix cache served: usage.prompt_tokens_details.cached_tokens
        (vLLM, llama.cpp), else llama.cpp's timings.cache_n; None when the server says neither."""
        details = (self.usage or {}).get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None and self.timings is not None:
            cached = self.timings.get("cache_n")
        return int(cached) if isinstance(cached, int | float) else None


class TextCollector(StreamAccumulator):
    """A StreamAccumulator that also keeps the reply's text (multi-turn sessions resend it);
    the ordinary path uses the plain accumulator and pays nothing for it."""

    __slots__ = ("parts",)

    def __init__(self, chat: bool = False) -> None:
        super().__init__(chat)
        self.parts: list[str] = []

    def _on_choice(self, choice: dict[str, Any], usage: dict[str, Any] | None, t: float) -> None:
        super()._on_choice(choice, usage, t)
        text = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
        if text:
            self.parts.append(text)

    @property
    def text(self) -> str:
        return "".join(self.parts)
