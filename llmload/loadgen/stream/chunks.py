"""One streamed answer's token chunks as they are counted, by kind (answer text, reasoning text,
tool-call pieces: llmload.loadgen.stream.tool_calls), and what they add up to: `TokenChunks`, the
state every accumulator fills (the parsing of a stream's messages is theirs:
llmload.loadgen.stream.sse, .responses) and reads back as the request's tokens, times and texts.
The definitions of these figures are in the docstring of llmload.loadgen.stream.sse.
"""

from __future__ import annotations

from typing import Any

from llmload.loadgen.stream.decode import MalformedStream
from llmload.loadgen.stream.reasoning import (
    ANSWER,
    BAD_REASONING_COUNT,
    BOTH,
    REASONING_AFTER_ANSWER,
    TAGS_UNKNOWN,
    THOUGHT,
    TOOL,
    reported_reasoning,
    split_texts,
)
from llmload.loadgen.stream.tool_calls import ToolCalls


class TokenChunks:
    """The token chunks of one stream, their times, texts and usage. Times are seconds since the
    request's t0."""

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
        "texts",
        "timings",
        "uncertain",
        "ttft_uncertain",
        "t_first_reasoning",
        "reasoning_chunks",
        "mixed_chunks",
        "odd",
        "_reasoning_tokens",
        "_spans",
        "_tags",
        "_kind",
        "_rfield",
        "t_first_tool_call",
        "tools",
        "_tool_spans",
    )

    def __init__(self, chat: bool = False, keep_text: bool = False) -> None:
        self.chat = chat
        self.texts: list[str] | None = [] if keep_text else None
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
        self.uncertain: dict[int, float] = {}
        self.ttft_uncertain: float | None = None
        self.t_first_reasoning: float | None = None
        self.reasoning_chunks = 0  # token chunks of reasoning text alone
        self.mixed_chunks = 0  # token chunks of reasoning and answer text
        self.odd: list[str] = []  # odd things that did not fail the stream (llmload.loadgen.stream.reasoning)
        self._reasoning_tokens = 0  # tokens of the reasoning chunks, where per-chunk usage says
        self._spans: list[tuple[int, int]] = []  # with keep_text: chunks with reasoning, its characters
        self._tags = TAGS_UNKNOWN  # `<think>` tags in the text (llmload.loadgen.stream.reasoning)
        self._kind = ANSWER  # what the chunk just counted carried (for the template to learn)
        self._rfield = "reasoning_content"  # where the reasoning text sits (its template's field)
        self.t_first_tool_call: float | None = None  # the first token chunk with a piece of a tool call
        self.tools: ToolCalls | None = None  # the reply's tool calls, once one began
        self._tool_spans: list[tuple[int, int]] = []  # with keep_text: tool chunks, their last characters

    def _count_chunk(self, t: float, text: str, tokens: int | None, reasoning: int = 0) -> None:
        """A token chunk at t: its text (its first `reasoning` characters reasoning), its tokens
        when per-chunk usage says."""
        if reasoning and self.texts is not None:
            self._spans.append((len(self.texts), reasoning))
        self.chunk_times.append(t)
        if self.texts is not None:
            self.texts.append(text)
        if tokens is not None:
            self.chunk_tokens.append(tokens)
            if reasoning:
                self._reasoning_tokens += tokens if reasoning == len(text) else max(tokens - 1, 1)

    def _on_reasoning(self, t: float, answer_too: bool) -> None:
        """A token chunk with reasoning text (and answer text after it when `answer_too`) at t."""
        if self.t_first_reasoning is None:
            self.t_first_reasoning = t
            self._reasoning_began()
        if self.t_first_content is not None and REASONING_AFTER_ANSWER not in self.odd:
            self.odd.append(REASONING_AFTER_ANSWER)
        if answer_too:
            self.mixed_chunks += 1
            self._kind = BOTH
            if self.t_first_content is None:
                self.t_first_content = t
        else:
            self.reasoning_chunks += 1
            self._kind = THOUGHT

    def _on_tool(self, t: float, piece: str) -> None:
        """A token chunk at t ends with `piece`, a piece of a tool call (its text is not the answer's)."""
        if self.t_first_tool_call is None:
            self.t_first_tool_call = t
        self._kind = TOOL
        if self.texts is not None:
            self._tool_spans.append((len(self.texts), len(piece)))

    def whole_tool_calls(self, calls: Any, t: float) -> None:
        """A non-streamed reply's `message.tool_calls`, each call whole (named by its place), at t."""
        if not isinstance(calls, list):
            raise MalformedStream(f"message.tool_calls is not a list: {str(calls)[:80]!r}")
        numbered = [{**call, "index": i} if isinstance(call, dict) else call for i, call in enumerate(calls)]
        self._tool_calls().add_chat(numbered, str(calls)[:80])
        self.t_first_tool_call = t

    def _tool_calls(self) -> ToolCalls:
        """The reply's tool calls, begun at the first piece."""
        if self.tools is None:
            self.tools = ToolCalls()
        return self.tools

    def _reasoning_began(self) -> None:
        """The stream's first reasoning chunk was just counted (a fast path may learn its shape)."""

    @property
    def completion_tokens(self) -> int | None:  # int or None: _check_usage saw every usage
        """usage.completion_tokens if the server sent usage, else None."""
        if self.usage is None or self.usage.get("completion_tokens") is None:
            return None
        return int(self.usage["completion_tokens"])

    def output_tokens(self, max_tokens: int) -> tuple[int, bool]:
        """(output tokens, estimated): usage.completion_tokens when the server sent it; else an
        estimate, never a chunk count passed off as tokens: max_tokens when finish_reason is
        "length" (the server stopped at the limit), else the content chunks, a lower bound (a chunk
        may carry several tokens: speculative decoding, servers that batch their writes)."""
        if self.completion_tokens is not None:
            return self.completion_tokens, False
        if self.finish_reason == "length" and len(self.chunk_times) <= max_tokens:
            return max_tokens, True
        return len(self.chunk_times), True

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

    @property
    def text(self) -> str:
        """The reply's answer text (built with `keep_text`; multi-turn sessions resend it)."""
        return self.answer_and_reasoning()[0]

    def answer_and_reasoning(self) -> tuple[str, str]:
        """(answer, reasoning) text of the reply (built with `keep_text`): a tool call's pieces
        are neither (ToolCalls.text)."""
        texts = self.texts or []
        if self._tool_spans:
            texts = list(texts)
            for i, chars in self._tool_spans:
                texts[i] = texts[i][: len(texts[i]) - chars]
        return split_texts(texts, self._spans)

    def reasoning_tokens(self) -> tuple[int | None, bool]:
        """(reasoning tokens, counted by the client): the server's count when it sent one
        (llmload.loadgen.stream.reasoning), else the reasoning chunks' tokens (per-chunk usage) or
        the reasoning chunks, a chunk with answer text too counting all its tokens but one (one
        when they are unknown); (None, False) for a stream without reasoning."""
        reported = reported_reasoning(self.usage)
        if reported == BAD_REASONING_COUNT:
            if BAD_REASONING_COUNT not in self.odd:
                self.odd.append(BAD_REASONING_COUNT)
        elif reported is not None:
            return int(reported), False
        if self.t_first_reasoning is None:
            return None, False
        if self.tokens_per_chunk() is not None:
            return self._reasoning_tokens, True
        return self.reasoning_chunks + self.mixed_chunks, True
