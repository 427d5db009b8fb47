"""Parse an OpenAI-compatible streaming response (SSE) into token timings and counts.

`StreamAccumulator.feed(line, t)` takes one raw SSE line and the time it arrived. It knows the
shapes real servers send (tests/unit/test_sse.py, and live in tests/real): usage in a separate
`choices: []` chunk (vLLM with include_usage), usage on the last chunk whose `choices` is not empty
(llama.cpp), usage on every chunk (vLLM continuous_usage_stats), empty-text token chunks (vLLM), a
role-only first delta (chat), error objects sent inside a 200 stream, and a reasoning model's
thinking (`delta.reasoning_content` / `delta.reasoning`, or `<think>` tags in the text:
llmload.loadgen.stream.reasoning).

Definitions (as vLLM `bench serve`, see docs/metrics.md):
- t_first: the first message with non-empty `choices` (vLLM's TTFT point);
- t_first_content: the first message with non-empty answer text (AIPerf's TTFO point): text /
  delta content that is not reasoning;
- t_first_reasoning: the first message with reasoning text (reasoning text makes a token chunk
  as answer text does);
- t_last: the last message with non-empty `choices` (vLLM's end of the request);
- a *token chunk* is a `choices` message that carries generated text, or empty text without a
  finish_reason (vLLM sends a token whose bytes are not yet a full character that way); the
  role-only chat delta is not. A closing message with empty text and a finish_reason is a token
  for vLLM (its last token, when that token's bytes end inside a character) and not one for
  llama.cpp (a closing chunk after the last token): only the server's count can tell, so it is
  held as a candidate until usage arrives and counted when usage proves it a token (per-chunk
  usage that grew on it, or a final count one above the token chunks seen).
- `texts` (only when built with `keep_text`): the text of each token chunk, in order (one list
  append per chunk; the greedy-determinism check hashes them when the request ends); a chunk
  with reasoning holds it first, its answer text after (`answer_and_reasoning` splits them).
- `reasoning_chunks` / `mixed_chunks`: token chunks that carried reasoning only / reasoning and
  answer text; `odd`: names of odd things in the stream that did not fail it (reasoning after
  the answer began).
- `uncertain`: token chunk index -> seconds by which its time may be late, for chunks that
  shared a read with a message written at a later instant (`feed_read`: not the closing
  messages a server writes with its last token); `ttft_uncertain`: the same for t_first.

The token-chunk fast path (`feed_lines`): a line that matches the stream's token-chunk template
is a token chunk, recorded without a JSON decode (llmload.loadgen.stream.sse_template); a reasoning
stream learns a second template for its reasoning chunks, tried on a data line that is not an
answer chunk (so a plain stream's token chunks cost what they cost without it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from llmload.loadgen.stream.reasoning import (
    ANSWER,
    BAD_REASONING_COUNT,
    BOTH,
    REASONING_AFTER_ANSWER,
    TAGS_NONE,
    TAGS_OPEN,
    TAGS_UNKNOWN,
    THINK_CLOSE_BYTES,
    THOUGHT,
    reported_reasoning,
    split_tags,
    split_texts,
)
from llmload.loadgen.stream.sse_template import TEMPLATE_TRIES, learn_template, not_ascii_plain, plain

# The hot path decodes a data line with orjson straight from bytes (the parse is the reader's
# largest cost after the socket: benchmarks/sse_parse.py, figures in docs/measurements.md).
# orjson is stricter than json (NaN, integers beyond 64 bits, lone surrogates): a line it refuses
# is decoded again by json, so both accept the same lines.
_fast_decode = orjson.loads
_decode = json.JSONDecoder().raw_decode
_STR_OR_NONE = (str, type(None))
EXACT_SLACK_S = 0.0005  # a read whose messages arrived within this of its stamp times them all
# the accumulator's caches of its fast path (feed_lines): the templates and what learns them
# (`_rfield`, the field the reasoning template is learned from, is last set by the full parse:
# a reasoning chunk that takes the fast path leaves it as it was)
TEMPLATE_SLOTS = ("_head", "_tail", "_tries", "_rhead", "_rtail", "_rtries", "_rfield", "_learning", "_kind")


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
        "_closing",
        "texts",
        "timings",
        "_head",
        "_tail",
        "_tries",
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
        "_rhead",
        "_rtail",
        "_rtries",
        "_learning",
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
        self._closing: tuple[float, dict[str, Any] | None] | None = None  # candidate: time, its usage
        self.timings: dict[str, Any] | None = None  # llama.cpp's timings, from the chunk with usage
        self._head: bytes | None = None  # the token-chunk template (module docstring): line before the text
        self._tail = b""  # and after it
        self._tries = TEMPLATE_TRIES
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
        self._rhead: bytes | None = None  # the reasoning-chunk template, as _head and _tail
        self._rtail = b""
        self._rtries = TEMPLATE_TRIES
        self._learning = True  # a template is still to learn (a reasoning one once reasoning came)

    def feed(self, line: bytes, t: float) -> bool:
        """Consume one SSE line; returns True once `data: [DONE]` was seen."""
        if not line.startswith(b"data:"):
            return False  # blank separators, comments (":"), event:/id: fields
        return self._feed_data(line[5:], t)

    def feed_lines(self, lines: Iterable[bytes | bytearray], t: float) -> bool:
        """Consume the SSE lines of one read (no line ends), all arrived at t; True at [DONE]
        (the lines after it are not read). Token chunks that match the stream's template take
        the fast path (module docstring)."""
        head, tail, texts, times = self._head, self._tail, self.texts, self.chunk_times
        start, after = (len(head), len(tail)) if head is not None else (0, 0)
        rhead = self._rhead
        for line in lines:
            if head is not None and line.startswith(head) and line.endswith(tail):
                end = len(line) - after
                if end > start and (not_ascii_plain(line, start, end) is None or plain(line[start:end])):
                    self.t_last = t
                    times.append(t)
                    if texts is not None:
                        texts.append(line[start:end].decode())
                    continue
            if line[:5] != b"data:":
                continue
            if rhead is not None and line.startswith(rhead) and self._reasoning_fast(line, t):
                continue
            if not self._learning:
                if self._feed_data(line[5:], t):
                    return True
            else:
                chunks = len(times)
                if self._feed_data(line[5:], t):
                    return True
                if len(times) > chunks:
                    self._learn_template(line)
            if self._head is not head or self._rhead is not rhead:  # a template learned or moved
                head, tail, rhead = self._head, self._tail, self._rhead
                start, after = (len(head), len(tail)) if head is not None else (0, 0)
        return False

    def _reasoning_fast(self, line: bytes | bytearray, t: float) -> bool:
        """The reasoning template's fast path (module docstring): whether `line`, which starts
        with the template's head, is a reasoning chunk of it, counted."""
        tail = self._rtail
        if not line.endswith(tail):
            return False
        start, end = len(self._rhead or b""), len(line) - len(tail)
        if end <= start or (not_ascii_plain(line, start, end) is not None and not plain(line[start:end])):
            return False
        if self._tags == TAGS_OPEN and line.find(THINK_CLOSE_BYTES, start, end) >= 0:
            return False  # the end of the thinking: parsed in full
        if self.t_first_content is not None and REASONING_AFTER_ANSWER not in self.odd:
            self.odd.append(REASONING_AFTER_ANSWER)
        self.t_last = t
        self.reasoning_chunks += 1
        self.chunk_times.append(t)
        if self.texts is not None:
            text = line[start:end].decode()
            self._spans.append((len(self.texts), len(text)))
            self.texts.append(text)
        return True

    def feed_read(
        self, lines: list[bytes | bytearray], t: float, slack: float, since_read: float, ends_whole: bool
    ) -> bool:
        """Consume the lines of one read whose stamp `t` is exact for the message it times; True
        at [DONE]. That message is the read's last one, or, when the stream ended in this read
        (its finish_reason came in it, and no closing message is left in doubt), the stream's
        last token chunk: a server writes the closing messages (a finish chunk that is not a
        token, usage, [DONE]) with its last token, so their stamp is that token's. The read's
        earlier messages arrived at most `slack` before it (by the stream's previous read and
        the hub's polls) or, when a token chunk came before the timed message, `since_read` (by
        the previous read alone). `ends_whole`: the read ended at the end of a line (else its
        stamp is the next, incomplete line's). Token chunks (and t_first) not timed by the stamp
        are marked in `uncertain` (and `ttft_uncertain`) when the bound exceeds EXACT_SLACK_S."""
        last = len(lines) - 1
        while last > 0 and not lines[last]:
            last -= 1
        before, first_before, open_before = len(self.chunk_times), self.t_first, self.finish_reason is None
        done = self.feed_lines(lines[:last], t)
        middle, first_middle, closing = len(self.chunk_times), self.t_first, self._closing is not None
        if not done:
            done = self.feed_lines(lines[last:], t)
        times = self.chunk_times
        end = len(times)
        if end > before and times[-1] != t:
            end -= 1  # an earlier read's closing message that usage proved a token: timed by that read
        first_new = first_before is None and self.t_first is not None
        if open_before and self.finish_reason is not None and self._closing is None:
            # the stream ended in this read: the stamp times its last token chunk; a token chunk
            # before it in the read was written a step earlier (so was a chat stream's role delta)
            timed = end - 1
            bound = since_read if timed > before else slack
            first_late = first_new and (timed > before or self.chat)
        else:
            # A token chunk and a later message were written at two instants (two steps), yet
            # they became readable together: the polls' bound assumes data is readable once it
            # arrived, which fails when the kernel (or a buffering proxy) delivers a backlog at
            # once, after a poll that waited for it.
            bound = since_read if middle > before else slack
            timed = end - 1 if ends_whole and end > middle and not closing else -1
            first_late = first_new and (first_middle is not None or not ends_whole)
        if bound <= EXACT_SLACK_S:
            return done
        for i in range(before, end):
            if i != timed:
                self.uncertain[i] = bound
        if first_late:
            self.ttft_uncertain = bound
        return done

    def _learn_template(self, line: bytes | bytearray) -> None:
        """Make `line`, just parsed in full and counted as a token chunk, the stream's template of
        its kind (answer or reasoning) if it is one and that template is still to learn
        (llmload.loadgen.stream.sse_template); else leave it."""
        if self._kind == ANSWER and self._tags == TAGS_NONE and self._head is None and self._tries:
            # (not while the stream's first text is still whitespace: its next chunk may open a
            # `<think>`, which the fast path would not look for)
            self._tries -= 1
            template = learn_template(line, "content" if self.chat else "text")
            if template is not None:
                self._head, self._tail = template
        elif self._kind == THOUGHT and self._rhead is None and self._rtries:
            self._rtries -= 1
            template = learn_template(line, self._rfield)
            if template is not None:
                self._rhead, self._rtail = template
        self._learning = bool(
            (self._head is None and self._tries)
            or (self._rhead is None and self._rtries and self._spans_seen)
        )

    @property
    def _spans_seen(self) -> bool:
        """Whether a reasoning chunk was seen (its template is worth learning)."""
        return self.t_first_reasoning is not None

    def _feed_data(self, payload: bytes | bytearray, t: float) -> bool:
        """One data field (JSON may have whitespace around it)."""
        obj = decode_data(payload)
        if obj is None:
            self.done = True
            return True
        choices = obj.get("choices")
        usage = obj.get("usage")
        if usage is not None:
            check_usage(usage, payload)
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise MalformedStream(f"choices is not a list of objects: {_shown(payload)!r}")
            self._on_choice(choices[0], usage, t)
        elif "error" in obj:
            raise StreamErrorEvent(" ".join(str(obj["error"]).split())[:200] or "an empty error object")
        if usage:
            self.usage = usage
            self.timings = obj.get("timings") or self.timings
            if self._closing is not None:
                self._settle_closing(usage)
        return False

    def _settle_closing(self, usage: dict[str, Any]) -> None:
        """Count the held closing message (module docstring) as a token chunk if usage says so."""
        assert self._closing is not None
        t, own_usage = self._closing
        self._closing = None
        tokens = int(usage.get("completion_tokens") or 0)
        if self._usage_per_chunk and own_usage is not None:
            if tokens > self._last_completion_tokens:
                self._count_chunk(t, "", tokens - self._last_completion_tokens)
                self._last_completion_tokens = tokens
        elif tokens == len(self.chunk_times) + 1:
            self._usage_per_chunk = False
            self._count_chunk(t, "", None)

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

    def _on_choice(self, choice: dict[str, Any], usage: dict[str, Any] | None, t: float) -> None:
        if self.t_first is None:
            self.t_first = t
        self.t_last = t
        reasoning = None
        if self.chat:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise MalformedStream(f"delta is not an object: {str(delta)[:80]!r}")
            text = delta.get("content")
            role_only = text is None or (not text and "role" in delta)
            if "reasoning_content" in delta or "reasoning" in delta:
                reasoning = self._delta_reasoning(delta)
        else:
            text = choice.get("text")
            role_only = text is None
        finish = choice.get("finish_reason")
        if not isinstance(text, _STR_OR_NONE) or not isinstance(finish, _STR_OR_NONE):
            raise MalformedStream(f"text or finish_reason is not a string: {str(choice)[:80]!r}")
        if finish:
            self.finish_reason = finish
        self._closing = None  # a later choices message: an earlier candidate was not the last
        if text and self._tags != TAGS_NONE:
            text, reasoning = self._split_tags(text, reasoning)
        if reasoning:
            self._on_reasoning(t, bool(text))
            text = reasoning + (text or "")
        elif not (text or (not role_only and not finish)):
            if finish and not role_only:
                self._closing = (t, usage)
            return
        else:
            self._kind = ANSWER
            if text and self.t_first_content is None:
                self.t_first_content = t
        thought_chars = len(reasoning) if reasoning else 0
        if usage and self._usage_per_chunk:
            tokens = int(usage.get("completion_tokens") or 0)
            self._count_chunk(t, text or "", tokens - self._last_completion_tokens, thought_chars)
            self._last_completion_tokens = tokens
        else:
            self._usage_per_chunk = False
            self._count_chunk(t, text or "", None, thought_chars)

    def _delta_reasoning(self, delta: dict[str, Any]) -> str | None:
        """A chat delta's reasoning text (`reasoning_content`, else `reasoning`: one text under
        either name, llmload.loadgen.stream.reasoning), and the field its template would use."""
        for field in ("reasoning_content", "reasoning"):
            value = delta.get(field)
            if value is not None and not isinstance(value, str):
                raise MalformedStream(f"delta.{field} is not a string: {str(delta)[:80]!r}")
            if value:
                self._rfield = field
                return value
        return None

    def _split_tags(self, text: str, reasoning: str | None) -> tuple[str, str | None]:
        """(answer text, reasoning text) of a text chunk of a stream whose `<think>` tags are not
        yet closed (llmload.loadgen.stream.reasoning.split_tags). After the `</think>` the tagged
        reasoning chunks' template is dropped: its lines are the answer's shape, and the answer's
        own template is learned from its first chunk (which sets the first answer's time)."""
        self._tags, thought, text = split_tags(self._tags, text)
        if thought:
            self._rfield = "content" if self.chat else "text"
            reasoning = (reasoning or "") + thought
        if self._tags == TAGS_NONE and self._rfield in ("content", "text"):
            self._rhead, self._rtries = None, 0
        return text, reasoning

    def _on_reasoning(self, t: float, answer_too: bool) -> None:
        """A token chunk with reasoning text (and answer text after it when `answer_too`) at t."""
        if self.t_first_reasoning is None:
            self.t_first_reasoning = t
            self._learning = self._learning or bool(self._rtries)
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
        """(answer, reasoning) text of the reply (built with `keep_text`)."""
        return split_texts(self.texts or (), self._spans)

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


def decode_data(payload: bytes | bytearray) -> dict[str, Any] | None:
    """A data field's JSON object; None for `[DONE]`; MalformedStream for anything else."""
    try:
        obj = _fast_decode(payload)
    except orjson.JSONDecodeError:
        payload = payload.strip()
        if payload == b"[DONE]":
            return None
        obj = _slow_decode(payload)
    if not isinstance(obj, dict):
        raise MalformedStream(f"data line is not a JSON object: {_shown(payload)!r}")
    return obj


def _shown(payload: bytes | bytearray) -> bytes:
    """The start of a data field, for an error message."""
    return bytes(payload.strip()[:80])


def _slow_decode(payload: bytes | bytearray) -> Any:
    """json's decode of a data line orjson refused; MalformedStream if json refuses it too."""
    try:
        text = payload.decode()  # SSE is UTF-8; UnicodeDecodeError is a ValueError
        obj, end = _decode(text)
        if end != len(text):
            raise ValueError("data after the JSON value")
    except ValueError:
        raise MalformedStream(f"data line is not JSON: {_shown(payload)!r}") from None
    return obj


def check_usage(usage: Any, payload: bytes | bytearray) -> None:
    """MalformedStream unless usage is an object whose token counts are integers >= 0 (or absent)."""
    if not isinstance(usage, dict):
        raise MalformedStream(f"usage is not an object: {_shown(payload)!r}")
    for key in ("completion_tokens", "prompt_tokens"):
        count = usage.get(key)
        if count is not None and (type(count) is not int or count < 0):
            raise MalformedStream(f"usage.{key} is not a count: {_shown(payload)!r}")
