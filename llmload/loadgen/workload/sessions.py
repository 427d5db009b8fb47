"""Multi-turn sessions (`sessions:`): one conversation, its seeded id and text, and the history
each of its turns resends. Playing them (the turn loop, tool waits, fan-out) is
`llmload.loadgen.workload.session_play`.

A session is a list of chat requests. Turn k sends the session's system message (if
`system_tokens` > 0), then turns 1..k-1 as they happened (each message the client sent and the
server's actual reply, as received, unchanged), then its own new message: a user message of
`user_tokens` tokens, or, in an agent session after a reply with tool calls, the results of those
calls. The system, user and tool-result messages are words of the run's calibrated vocabulary
(`Calibration.vocab`, `llmload.loadgen.workload.prompts`: words that cost one token each after a
space on the server), each preceded by a space, the first one too (some of them cost two tokens
at the very start of a text). The server adds its chat template around each message (the
simulator: `CHAT_TEMPLATE_TOKENS_PER_MESSAGE`, 3, plus one BOS per request; ChatML: 5, see
docs/sessions.md).

Seeded: a session's id is given by where it is played (`session_id`: the rung, the user's slot
and the session's number; a sub-agent's is its parent's id, "/" and its 1-based number), and
everything it draws (its text, its tool results' lengths, its think times and tool latencies)
comes from generators seeded by (seed, id). So a rerun with the same seed sends the same
conversations (as long as the server gives the same replies), and two runs' turns pair up by
(session, turn).

An agent session's reply with tool calls joins the history as received (chat: one assistant
message with its text, or null, and `tool_calls`, each call's id, name and arguments as
streamed; the Responses API: the text as an assistant message, if any, then a `function_call`
item per call), followed by one result per call (chat: a `role: tool` message with the call's
`tool_call_id`; the Responses API: a `function_call_output` item with its `call_id`) of
`tool_result_tokens` tokens, drawn per result.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from llmload.core.config import SessionConfig
from llmload.core.workload.lengths import draw
from llmload.loadgen.workload.prompts import synthetic_text


def session_id(rung: int, slot: int, number: int) -> str:
    """A top-level session's id: rung `rung`'s user slot `slot`, its session `number` (1-based).
    The rung is part of it so that no two rungs send the same conversation (a prefix cache would
    serve one rung's sessions from another's)."""
    return f"r{rung}u{slot}s{number}"


class ToolCall(NamedTuple):
    """One call of a reply, whole, as the client received it."""

    id: str  # "" when the server sent none
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    """A completed reply as the client received it: its answer text and its tool calls."""

    text: str
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a session: the messages it sends, and where it stands in its session."""

    session: str
    number: int  # 1-based
    messages: list[dict[str, Any]]  # a trace's authored messages may hold more than strings
    parent: str | None = None  # a sub-agent's parent session
    wait_s: float | None = None  # the tool latency waited before it (None: it follows no tool)


class Session:
    """One conversation: its history so far, its next message, its draws (module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        seed: int,
        vocab: Sequence[str],
        sid: str,
        *,
        responses: bool = False,
        parent: str | None = None,
    ) -> None:
        self.id = sid
        self.parent = parent
        self.config = config
        self._seed = seed
        self._rng = random.Random(f"llmload-session:{seed}:{sid}")
        self._latency = random.Random(f"llmload-tool-latency:{seed}:{sid}")
        self._vocab = tuple(vocab)
        self._responses = responses
        self.history: list[dict[str, Any]] = []
        if config.system_tokens:
            self.history.append({"role": "system", "content": self._text(config.system_tokens)})
        self.turns = 0
        self._results = 0  # tool results drawn so far
        self._answered_tools = False  # the history ends with tool results: the next turn sends them

    def _text(self, tokens: int) -> str:
        return " " + synthetic_text(self._rng, tokens, self._vocab)  # every word after a space

    def next_turn(self, wait_s: float | None = None) -> Turn:
        """The next turn: the history plus a new user message, or the tool results just added."""
        self.turns += 1
        if not self._answered_tools:
            self.history.append({"role": "user", "content": self._text(self.config.user_tokens)})
        self._answered_tools = False
        return Turn(self.id, self.turns, list(self.history), self.parent, wait_s)

    def answered(self, reply: Reply) -> None:
        """The server's reply to the last turn joins the history, as received (module docstring).
        A user session resends the text only: a user, not a tool, answers next, and an API
        refuses tool calls left without their results."""
        if not reply.calls or not self.config.agent:
            self.history.append({"role": "assistant", "content": reply.text})
        elif self._responses:
            if reply.text:
                self.history.append({"role": "assistant", "content": reply.text})
            self.history += [
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
                for c in reply.calls
            ]
        else:
            calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.calls
            ]
            self.history.append({"role": "assistant", "content": reply.text or None, "tool_calls": calls})

    def answer_tools(self, calls: Sequence[ToolCall], first: str | None = None) -> None:
        """One result per call joins the history: `first` for the first call when given (a
        fan-out's sub-agents' answers), else each a drawn synthetic text."""
        for i, call in enumerate(calls):
            result = first if (i == 0 and first is not None) else self._tool_result()
            if self._responses:
                self.history.append({"type": "function_call_output", "call_id": call.id, "output": result})
            else:
                self.history.append({"role": "tool", "tool_call_id": call.id, "content": result})
        self._answered_tools = True

    def _tool_result(self) -> str:
        self._results += 1
        tokens = draw(self.config.tool_result_tokens, self._seed, f"tool-result:{self.id}", self._results)
        return self._text(tokens)

    def think_time(self) -> float:
        """A user's pause before the next turn."""
        return _pause(self._rng, self.config.think_time_s, self.config.think_time)

    def tool_wait(self, calls: int) -> float:
        """How long `calls` tool calls run, all at once: the longest of one latency each."""
        cfg = self.config
        return max(_pause(self._latency, cfg.tool_latency_s, cfg.tool_latency) for _ in range(max(1, calls)))


def _pause(rng: random.Random, mean: float, distribution: str) -> float:
    if distribution == "exponential" and mean > 0:
        return rng.expovariate(1.0 / mean)
    return mean
