"""llmload's model of a byte-pair-encoding tokenizer: how many tokens a text costs, without the
server.

The text is cut into pieces as GPT-2's pre-tokenizer cuts it (a run of ASCII letters with its
leading space, each digit, each other character, runs of whitespace); a letters piece costs one
token per started `LETTERS_PER_TOKEN` letters (common short words: 1, "government": 2), every
other piece 1. Two users: the simulator counts prompts with it (`llmload.sim.tokens`, which adds
BOS and the chat template), and the `replies` form of an empirical length distribution
(`llmload.core.workload.lengths`) counts a prompt file's replies with it, so on the simulator a reply's
length is exactly the tokens the simulator's tokenizer gives its text. On a real server it is an
estimate: real tokenizers merge common pairs of punctuation, digits and whitespace, and split
rare words differently.
"""

from __future__ import annotations

import re

LETTERS_PER_TOKEN = 6  # a run of letters costs one token per started 6 letters
_PIECES = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\s+")
_LONG_LETTERS = re.compile(f"[A-Za-z]{{{LETTERS_PER_TOKEN + 1},}}")


def text_tokens(text: str) -> list[str]:
    """The tokens of `text` (no BOS), as strings."""
    out: list[str] = []
    for piece in _PIECES.findall(text):
        letters = piece.lstrip(" ")
        if letters.isalpha() and len(letters) > LETTERS_PER_TOKEN:
            lead = piece[: len(piece) - len(letters)]
            cuts = range(0, len(letters), LETTERS_PER_TOKEN)
            out.extend((lead if i == 0 else "") + letters[i : i + LETTERS_PER_TOKEN] for i in cuts)
        else:
            out.append(piece)
    return out


def count_text_tokens(text: str) -> int:
    """Tokens of `text` (no BOS): `len(text_tokens(text))`, counted without building the tokens.
    A letters piece is a whole run of ASCII letters (the pattern's `[A-Za-z]+` is greedy and no
    other piece ends in a letter), so the long ones are the runs of more than LETTERS_PER_TOKEN
    letters, and each costs ceil(letters / LETTERS_PER_TOKEN) - 1 tokens more than one piece."""
    pieces = len(_PIECES.findall(text))
    extra = sum(-(-len(run) // LETTERS_PER_TOKEN) - 1 for run in _LONG_LETTERS.findall(text))
    return pieces + extra
