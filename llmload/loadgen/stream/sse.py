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
  role-only chat delta is not. A closing message with empty text (or none: vLLM closes a tool
  call's stream with `delta: {}`, its parser's held-back tokens in it) and a finish_reason is a token
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
- a tool call (llmload.loadgen.stream.tool_calls): a chat delta whose `tool_calls` carry a piece
  of a call's name or arguments is a token chunk (its text is the call's, not the answer's);
  t_first_tool_call: the first of them; `tools`: the reply's calls.
- `uncertain`: token chunk index -> seconds by which its time may be late, for chunks that
  shared a read with a message written at a later instant (`feed_read`: not the closing
  messages a server writes with its last token); `ttft_uncertain`: the same for t_first.

The token-chunk fast path (`feed_lines`, llmload.loadgen.stream.sse_template) records a line that
matches the stream's token-chunk template without a JSON decode; the chunks' state and what it
adds up to are llmload.loadgen.stream.chunks; decoding a data line is llmload.loadgen.stream.decode.
"""

from __future__ import annotations

from typing import Any

from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent, check_usage, decode_data, shown
from llmload.loadgen.stream.reasoning import ANSWER, TAGS_NONE, split_tags
from llmload.loadgen.stream.sse_template import TemplatePath

_STR_OR_NONE = (str, type(None))
EXACT_SLACK_S = 0.0005  # a read whose messages arrived within this of its stamp times them all


class StreamAccumulator(TemplatePath):
    """Accumulates one streamed response. Times are seconds since the request's t0."""

    __slots__ = ("_closing",)

    def __init__(self, chat: bool = False, keep_text: bool = False) -> None:
        super().__init__(chat, keep_text)
        self._closing: tuple[float, dict[str, Any] | None] | None = None  # candidate: time, its usage

    def feed(self, line: bytes, t: float) -> bool:
        """Consume one SSE line; returns True once `data: [DONE]` was seen."""
        if not line.startswith(b"data:"):
            return False  # blank separators, comments (":"), event:/id: fields
        return self._feed_data(line[5:], t)

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
                raise MalformedStream(f"choices is not a list of objects: {shown(payload)!r}")
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

    def _on_choice(self, choice: dict[str, Any], usage: dict[str, Any] | None, t: float) -> None:
        if self.t_first is None:
            self.t_first = t
        self.t_last = t
        reasoning = tool = None
        if self.chat:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise MalformedStream(f"delta is not an object: {str(delta)[:80]!r}")
            text = delta.get("content")
            role_only = text is None or (not text and "role" in delta)
            if "reasoning_content" in delta or "reasoning" in delta:
                reasoning = self._delta_reasoning(delta)
            if delta.get("tool_calls"):
                tool = self._tool_calls().add_chat(delta["tool_calls"], str(delta)[:80])
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
        elif not (text or tool or (not role_only and not finish)):
            if finish:  # text "" or none at all (vLLM's tool-call streams close with `delta: {}`)
                self._closing = (t, usage)
            return
        else:
            self._kind = ANSWER
            if text and self.t_first_content is None:
                self.t_first_content = t
        if tool:
            self._on_tool(t, tool)
            text = (text or "") + tool
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
