"""A reasoning model's thinking in the simulator: how many of a request's tokens are reasoning
(`--reasoning`), their words, and how a chunk carries them (`--reasoning-format`).

`--reasoning` is `0` (no thinking, the default), `N` (the first N tokens of every request),
`LO-HI` (drawn per prompt, uniformly, from the prompt's hash: the same prompt thinks as long at
every rung, as a greedy model does) or `P%` (that share of each request's max_tokens, rounded
down). A request of max_tokens T thinks min(N, T) tokens; the rest is its answer. The thinking's
words are the model's own for the prompt (`llmload.sim.tokens.completion_text`), at a position
offset by `--reasoning-salt` (another salt: other thoughts, the same answer and timing).

Formats of the thinking in a chat stream: `reasoning` (vLLM: `delta.reasoning`),
`reasoning_content` (SGLang, llama.cpp, DeepSeek: `delta.reasoning_content`), `tags` (`<think>`
before the first reasoning token's text and `</think>` after the last one's, in the content, as a
server without a reasoning parser sends it). A completions stream always sends tags; the
Responses API its reasoning events (`llmload.sim.formats.responses`). A step whose tokens span the
end of the thinking sends one chunk with both (vLLM's delta then carries reasoning and content).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

REASONING_FORMATS = ("reasoning", "reasoning_content", "tags")
SALT_SPAN = 1 << 20  # positions a salt moves the thinking's words by


@dataclass(frozen=True, slots=True)
class ReasoningSpec:
    """`--reasoning` parsed: fixed tokens, a drawn range, or a share of max_tokens."""

    low: int = 0
    high: int = 0
    share: float | None = None

    @property
    def on(self) -> bool:
        return self.high > 0 or bool(self.share)

    def tokens(self, phash: int, max_tokens: int) -> int:
        """The reasoning tokens of a request of this prompt hash and max_tokens."""
        if self.share is not None:
            return min(max_tokens, int(self.share * max_tokens))
        if self.high == self.low:
            return min(max_tokens, self.low)
        draw = int.from_bytes(hashlib.blake2b(f"think:{phash}".encode(), digest_size=8).digest(), "big")
        return min(max_tokens, self.low + draw % (self.high - self.low + 1))


def parse_reasoning(text: str) -> ReasoningSpec:
    """`N`, `LO-HI` or `P%` (module docstring); ValueError naming the flag otherwise."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            share = float(raw[:-1]) / 100.0
            if not 0.0 <= share <= 1.0:
                raise ValueError
            return ReasoningSpec(share=share)
        low, _, high = raw.partition("-")
        lo, hi = int(low), int(high) if high else int(low)
        if lo < 0 or hi < lo or hi > 10**7:
            raise ValueError
        return ReasoningSpec(lo, hi)
    except ValueError:
        raise ValueError(
            f"--reasoning: expected N, LO-HI or P% (e.g. 20, 10-40, 60%), got {text[:40]!r}"
        ) from None


def tagged(text: str, first: bool, last: bool) -> str:
    """A reasoning text with the `<think>` tags of the first and last reasoning token."""
    return ("<think>" if first else "") + text + ("</think>" if last else "")


def delta_chunk(
    head: dict[str, Any], delta: dict[str, Any], finish: str | None, usage: dict[str, Any] | None
) -> bytes:
    """A chat chunk of `delta` (reasoning, content or both), vLLM's shape."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    data = {**head, "choices": [choice], **({"usage": usage} if usage is not None else {})}
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
