"""A reasoning model's stream: which text is thinking and which is the answer, and how many tokens
the server says were thinking. Pure helpers of the SSE accumulator (`llmload.loadgen.stream.sse`,
`.chunks`).

Where servers put the thinking (tests/unit/test_sse_reasoning.py holds one stream of each):
- chat, `delta.reasoning_content` (SGLang, llama.cpp with `--reasoning-format`, DeepSeek's API,
  vLLM before its rename) or `delta.reasoning` (vLLM since, OpenRouter); a delta may carry both
  names with one text (a server keeping the old name for its clients): the text is taken once;
- the text itself, between `<think>` and `</think>` (a completions endpoint, or chat on a server
  without a reasoning parser): a stream whose first text starts with `<think>` (after
  whitespace) thinks until the chunk holding `</think>`; what follows the tag in that chunk is
  the answer's first text. A stream whose `<think>` was in the prompt (DeepSeek-R1's chat
  template without a parser) shows only `</think>`: that is not detected here, its reasoning
  counts as answer (run the server with its reasoning parser);
- the Responses API's `response.reasoning_text.delta` events (`llmload.loadgen.stream.responses`).

Reasoning tokens per request: the server's count when it sends one, `completion_tokens_details.
reasoning_tokens` (OpenAI, vLLM with a reasoning parser; the Responses API's
`output_tokens_details.reasoning_tokens`, mapped there) or `usage.reasoning_tokens` (SGLang);
else counted by the client from the chunks (`reasoning_count`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINK_CLOSE_BYTES = THINK_CLOSE.encode()
# the tag state of a text stream: its first text not seen yet, inside `<think>`, no tags (or closed)
TAGS_UNKNOWN, TAGS_OPEN, TAGS_NONE = 0, 1, 2
# what a token chunk carried (StreamAccumulator: the kind of the chunk just counted; TOOL: a piece
# of a tool call, llmload.loadgen.stream.tool_calls)
ANSWER, THOUGHT, BOTH, TOOL = 0, 1, 2, 3
# odd things in a stream that do not fail its request (the record's `odd_stream`, one name each)
REASONING_AFTER_ANSWER = "reasoning_after_answer"
BAD_REASONING_COUNT = "reasoning_tokens_not_a_count"


def split_tags(state: int, text: str) -> tuple[int, str, str]:
    """(new state, reasoning part, answer part) of a text chunk of a stream in tag `state`
    (module docstring). A stream's first text decides: it opens a `<think>` or the stream has no
    tags; whitespace before the first text leaves it undecided."""
    if state == TAGS_UNKNOWN:
        stripped = text.lstrip()
        if not stripped:
            return TAGS_UNKNOWN, "", text
        if not stripped.startswith(THINK_OPEN):
            return TAGS_NONE, "", text
        state = TAGS_OPEN
    end = text.find(THINK_CLOSE)
    if end < 0:
        return state, text, ""
    end += len(THINK_CLOSE)
    return TAGS_NONE, text[:end], text[end:]


def reported_reasoning(usage: dict[str, Any] | None) -> int | str | None:
    """The reasoning tokens the server counted (module docstring): an int, None when it says
    nothing, or BAD_REASONING_COUNT when the field is there but is not a count."""
    if not usage:
        return None
    details = usage.get("completion_tokens_details")
    count = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if count is None:
        count = usage.get("reasoning_tokens")
    if count is None:
        return None
    return count if type(count) is int and count >= 0 else BAD_REASONING_COUNT


def split_texts(texts: Sequence[str], spans: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """(answer, reasoning) text of a reply from the text of each token chunk and the chunks that
    carried reasoning: (chunk index, characters of reasoning at the start of its text)."""
    if not spans:
        return "".join(texts), ""
    reasoning = dict(spans)
    answer = [text[reasoning.get(i, 0) :] for i, text in enumerate(texts)]
    return "".join(answer), "".join(texts[i][:n] for i, n in spans)
