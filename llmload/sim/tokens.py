"""The simulator's toy tokenizer and its deterministic "model output".

Prompts are counted like a byte-pair-encoding tokenizer counts them, so a client that assumes
one token per word is caught: by llmload's model of one (`llmload.core.workload.token_count`: the text cut
into pieces as GPT-2's pre-tokenizer does, a run of letters with its leading space, each digit,
each other character, runs of whitespace; a letters piece costs one token per started
`LETTERS_PER_TOKEN` letters, common short words: 1, "government": 2, every other piece 1), and a
prompt starts with one BOS token; a chat prompt adds
`CHAT_TEMPLATE_TOKENS_PER_MESSAGE` per message. A tag like `[1f3a9c0b2d4e]` costs ~10 tokens, as
on a real tokenizer. Every generated token is `" " + word` from a fixed vocabulary of short
words, so `len(text.split())` of a completion equals its `usage.completion_tokens` exactly, and
the text, sent back in a prompt, counts that many tokens again.
Everything here is a pure function of the prompt (and the seed for the acceptance pattern), so
the same prompt always gets the same text, the same natural stop length and the same
speculative-decoding step pattern, like a greedy model on a real server.

Batch variance (`--batch-variance P`, the ground truth of the greedy-determinism check): a token
generated in a step whose batch holds more than one sequence is replaced by another word with
probability P, drawn from (prompt hash, position, batch size) alone (`flips`), so a rerun with
the same batch sizes flips the same tokens, and batch 1 never flips.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from collections.abc import Collection, Sequence

from llmload.core.workload.token_count import text_tokens

# Plain ASCII words with no characters JSON would escape, so a chunk's text can be built by
# concatenation and the token count survives any client-side whitespace split; none longer than
# LETTERS_PER_TOKEN, so a reply sent back as context (sessions) costs its completion_tokens again.
_WORDS = (
    "the of and to in is was for on that with as by at from it his an were are which this "
    "be or has had not first one their its new after but who they have her she two been "
    "other when there all during into school time may years more most only over city some "
    "world would where later up such used many can state about nation out known under "
    "united then made"
)
VOCAB: tuple[str, ...] = tuple(_WORDS.split())
CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 3  # role header + separators a real chat template adds
BOS_TOKENS = 1  # the beginning-of-sequence token every prompt starts with
NATURAL_MIN_TOKENS = 16
NATURAL_MAX_TOKENS = 511
TOKEN_ID_SPACE = 32000  # ids returned by /tokenize are crc32(word) modulo this

_MASK64 = (1 << 64) - 1


def count_tokens(text: str) -> int:
    """Tokens of a prompt `text`: BOS + its pieces (module docstring)."""
    return BOS_TOKENS + len(text_tokens(text))


def token_ids(text: str) -> list[int]:
    """Stable integer ids of the tokens of a prompt, BOS (id 1) first (what `/tokenize` returns)."""
    return [1] * BOS_TOKENS + [zlib.crc32(t.encode()) % TOKEN_ID_SPACE for t in text_tokens(text)]


def message_text(message: dict[str, object]) -> str:
    """A chat message's text as the model reads it: its content, then (an assistant's tool calls
    sent back) the JSON of its `tool_calls`."""
    content = str(message.get("content") or "")
    calls = message.get("tool_calls")
    return content + json.dumps(calls, sort_keys=True) if calls else content


def chat_prompt(messages: Sequence[dict[str, object]]) -> tuple[str, int]:
    """The prompt text of a chat request and its token count: BOS, the messages' tokens
    (`message_text`) and `CHAT_TEMPLATE_TOKENS_PER_MESSAGE` per message."""
    contents = [message_text(m) for m in messages]
    text = "\n".join(f"{m.get('role', '')}: {c}" for m, c in zip(messages, contents, strict=True))
    tokens = BOS_TOKENS + sum(len(text_tokens(c)) for c in contents)
    return text, tokens + CHAT_TEMPLATE_TOKENS_PER_MESSAGE * len(messages)


def prompt_hash(prompt: str) -> int:
    """A 64-bit hash of the prompt, stable across processes (unlike `hash()`)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "big")


def natural_length(phash: int) -> int:
    """Tokens the "model" generates before its end-of-sequence token, for a prompt hash."""
    span = NATURAL_MAX_TOKENS - NATURAL_MIN_TOKENS + 1
    return NATURAL_MIN_TOKENS + (phash >> 20) % span


def _mix(phash: int, pos: int) -> int:
    return ((phash ^ (pos * 0x9E3779B97F4A7C15)) * 0xBF58476D1CE4E5B9) & _MASK64


def completion_text(phash: int, start: int, count: int, flipped: Collection[int] = ()) -> str:
    """The generated tokens at positions start .. start+count-1, concatenated (" word" each);
    a position in `flipped` gets another word than the prompt's own (batch variance)."""
    n = len(VOCAB)
    words = []
    for pos in range(start, start + count):
        mixed = _mix(phash, pos)
        shift = 1 + (mixed & 0xFFFF) % (n - 1) if pos in flipped else 0
        words.append(VOCAB[((mixed >> 32) + shift) % n])
    return " " + " ".join(words) if words else ""


def flips(phash: int, start: int, count: int, batch: int, probability: float) -> list[int]:
    """Positions among start .. start+count-1 that a step of `batch` sequences flips: each with
    `probability`, drawn from (prompt hash, position, batch size); none when batch is 1."""
    if batch <= 1 or probability <= 0.0:
        return []
    out = []
    for pos in range(start, start + count):
        key = f"{phash}:{pos}:{batch}".encode()
        draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64
        if draw < probability:
            out.append(pos)
    return out


def acceptance_seed(seed: int, prompt: str) -> int:
    """The 64-bit seed of a sequence's per-step accepted-token counts, from (seed, prompt); the
    truth log records it (`accept_seed`), so the draws of any acceptance setting can be replayed
    offline (llmload.sim.engine.steps_to_generate)."""
    key = f"{seed}\x00{prompt}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def acceptance_rng(seed: int, prompt: str) -> random.Random:
    """The generator of a sequence's per-step accepted-token counts, seeded by (seed, prompt)."""
    return random.Random(acceptance_seed(seed, prompt))
