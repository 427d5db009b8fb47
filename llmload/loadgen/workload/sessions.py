"""Multi-turn sessions (`sessions:`): each user plays conversations that resend their history.

A session is `turns` chat requests. Turn k sends the session's system message (if
`system_tokens` > 0), then turns 1..k-1 as they happened (each user message and the server's
actual reply, the text the client received, unchanged), then a new user message of
`user_tokens` tokens. Between a reply and the next turn the user thinks for `think_time_s`
(constant, or exponentially distributed with that mean). A turn that fails ends its session
(there is no reply to resend). The system and user messages are `system_tokens` / `user_tokens`
words of the run's calibrated vocabulary (`Calibration.vocab`, `llmload.loadgen.workload.prompts`: words
that cost one token each after a space on the server), each preceded by a space, the first one
too (some of them cost two tokens at the very start of a text), drawn by a generator seeded by
(seed, session id), so sessions never share a prefix with each other. The server adds its chat
template around each message (the simulator: `CHAT_TEMPLATE_TOKENS_PER_MESSAGE`, 3, plus one BOS
per request; ChatML: 5, see docs/sessions.md).

Count-based rungs: each user plays `per_user` sessions. Time-based rungs (`duration`): users play
sessions until the deadline and start no turn after it. Every turn's record carries `session`
and `turn` (and `cached_tokens` when the server reports it), so metrics can be taken per turn.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gevent

from llmload.core.clock import wall
from llmload.core.config import SessionConfig
from llmload.loadgen.workload.prompts import synthetic_text


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a session: the messages it sends."""

    session: str
    number: int  # 1-based
    messages: list[dict[str, Any]]  # a trace's authored messages may hold more than strings


class Session:
    """One conversation: its history so far, its next message, its think times."""

    def __init__(self, config: SessionConfig, seed: int, vocab: Sequence[str]) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.config = config
        self._rng = random.Random(f"llmload-session:{seed}:{self.id}")
        self._vocab = tuple(vocab)
        self.history: list[dict[str, str]] = []
        if config.system_tokens:
            self.history.append({"role": "system", "content": self._text(config.system_tokens)})
        self.turns = 0

    def _text(self, tokens: int) -> str:
        return " " + synthetic_text(self._rng, tokens, self._vocab)  # every word after a space

    def next_turn(self) -> Turn:
        """The next turn: the history plus a new user message."""
        self.turns += 1
        self.history.append({"role": "user", "content": self._text(self.config.user_tokens)})
        return Turn(self.id, self.turns, list(self.history))

    def answered(self, reply: str) -> None:
        """The server's reply to the last turn joins the history, as received."""
        self.history.append({"role": "assistant", "content": reply})

    def think_time(self) -> float:
        mean = self.config.think_time_s
        if self.config.think_time == "exponential" and mean > 0:
            return self._rng.expovariate(1.0 / mean)
        return mean


class SessionSender(Protocol):
    """What plays a session: sends one turn, hands a completed reply to `on_reply`, returns the
    number of records (attempts) it made."""

    def __call__(self, turn: Turn, on_reply: Callable[[str], None]) -> int: ...


def play_sessions(
    config: SessionConfig, seed: int, vocab: Sequence[str], deadline: float | None, send: SessionSender
) -> int:
    """Play this user's sessions of a rung (see the module docstring); returns the records sent."""
    sent = 0
    played = 0
    while (played < config.per_user) if deadline is None else (wall() < deadline):
        played += 1
        session = Session(config, seed, vocab)
        for number in range(1, config.turns + 1):
            if deadline is not None and wall() >= deadline:
                break
            replies: list[str] = []
            sent += send(session.next_turn(), replies.append)
            if not replies:
                break  # the turn failed: no reply to resend, the session ends
            session.answered(replies[-1])
            if number < config.turns:
                gevent.sleep(session.think_time())
    return sent
