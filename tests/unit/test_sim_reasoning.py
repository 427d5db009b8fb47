"""The simulator's thinking flags: how many tokens a request thinks, and a bad value's one line."""

from __future__ import annotations

import pytest

from llmload.sim.__main__ import SimFlagError, config_from_args
from llmload.sim.formats.reasoning import ReasoningSpec, parse_reasoning, tagged


def test_reasoning_lengths():
    assert parse_reasoning("20").tokens(123, 30) == 20
    assert parse_reasoning("20").tokens(123, 8) == 8  # never more than the request's tokens
    assert parse_reasoning("50%").tokens(1, 30) == 15
    drawn = parse_reasoning("10-40")
    lengths = {drawn.tokens(h, 100) for h in range(200)}
    assert min(lengths) >= 10 and max(lengths) <= 40 and len(lengths) > 10
    assert drawn.tokens(7, 100) == drawn.tokens(7, 100)  # the same prompt thinks as long
    assert not parse_reasoning("0").on and ReasoningSpec(3, 3).on


def test_tags_on_the_first_and_last_reasoning_token():
    assert tagged(" a", True, False) == "<think> a" and tagged(" b", False, True) == " b</think>"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--reasoning", "lots"], "--reasoning: expected N, LO-HI or P%"),
        (["--reasoning", "40-10"], "--reasoning: expected N, LO-HI or P%"),
        (["--reasoning", "150%"], "--reasoning: expected N, LO-HI or P%"),
        (["--reasoning-format", "think"], "--reasoning-format"),
        (["--reasoning-salt", "x"], "--reasoning-salt"),
    ],
)
def test_bad_reasoning_flags(argv, message):
    with pytest.raises(SimFlagError, match=message) as caught:
        config_from_args(argv, exit_on_error=False)
    assert "\n" not in str(caught.value)
