"""The simulator's tokenizer counts like a byte-pair encoder, not one token per word: a client
that assumes 1 token per word, or forgets BOS, the chat template or the cost of a tag, is off."""

from __future__ import annotations

import pytest

from llmload.sim.tokens import chat_prompt, completion_text, count_tokens, prompt_hash, token_ids


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 1),  # BOS
        ("time", 2),
        ("time year people", 4),
        ("government", 3),  # 10 letters: two pieces
        (" information", 3),
        ("[0a1b2c3d4e5f] hello", 1 + 1 + 12 + 1 + 1),  # "[", 6 digits + 6 letter runs, "]", " hello"
        ("one  two", 1 + 1 + 1 + 1),  # "one", "  " (a whitespace run), "two"
    ],
)
def test_counts(text, tokens):
    assert count_tokens(text) == tokens
    assert len(token_ids(text)) == tokens


def test_chat_adds_the_template():
    _, n = chat_prompt([{"role": "user", "content": "time year"}])
    assert n == 1 + 2 + 3


def test_a_reply_sent_back_costs_its_completion_tokens():
    text = completion_text(prompt_hash("any prompt"), 0, 300)
    assert len(text.split()) == 300 and count_tokens(text) == 1 + 300
