"""Playing one conversation of a conversation trace (`mode: trace` with AIPerf's multi-turn Mooncake
trace or a Weka agentic trace: `llmload.core.workload.conversations`).

A client slot takes a conversation when its first turn is due (the trace's schedule, as a line of
a flat trace) and sends its turns in order, each `wait_s / speed` seconds after the last of its
predecessors ended: the turn before it and the sub-agents that turn spawned. A turn's sub-agents
start together when it ends, each `wait_s / speed` later, each on a connection of its own, and
play their own turns the same way; the parent's next turn waits for the last of them. With
`HISTORY_DELTAS` a turn sends the conversation's messages so far (each user message and the reply
as the client received it) and its own user message; with `HISTORY_WHOLE` its prompt is its whole
context. A turn that fails ends its conversation (and spawns nothing): there is no reply to resend.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import gevent

from llmload.core.clock import wall
from llmload.core.workload.conversations import HISTORY_DELTAS, Conversation
from llmload.loadgen.workload.trace import TraceWorkload


@dataclass(frozen=True, slots=True)
class TraceTurn:
    """One request of a conversation, ready to send."""

    session: str  # the conversation's id (a sub-agent's: `<parent>/<k>`)
    number: int  # 1-based
    parent: str | None  # a sub-agent's parent conversation
    line: int  # the trace line it replays
    prompt: str  # its whole prompt (HISTORY_WHOLE) or its new user message (HISTORY_DELTAS)
    messages: list[dict[str, str]] | None  # HISTORY_DELTAS: the history, then its user message
    max_tokens: int
    t_scheduled: float  # when it was due
    wait_s: float | None  # the wait before it after its predecessors ended; None: a first turn


class TurnSender(Protocol):
    """What sends a turn: hands a completed reply's text to `on_reply`, returns the records made."""

    def __call__(self, *, trace_turn: TraceTurn, on_reply: Callable[[str], None]) -> int: ...


SubagentSender = Callable[[], AbstractContextManager[TurnSender]]  # a sender on a connection of its own


class Connection(Protocol):
    """A user's transport, as far as a sub-agent needs it."""

    def close(self) -> None: ...


@contextlib.contextmanager
def own_connection(
    open_connection: Callable[[], Connection], send: Callable[..., int]
) -> Iterator[TurnSender]:
    """`send` (called with `transport=`) on a connection of its own, closed when the sub-agent ends:
    a `SubagentSender` once its two arguments are bound."""
    connection = open_connection()
    try:
        yield functools.partial(send, transport=connection)
    finally:
        connection.close()


def play_conversation(
    workload: TraceWorkload, conv: Conversation, due: float, send: TurnSender, subagent_sender: SubagentSender
) -> int:
    """Play `conv` from `due` (wall clock) on; returns the records sent (the module docstring)."""
    sent = 0
    history: list[dict[str, str]] = []
    ready = due
    for number, turn in enumerate(conv.turns, start=1):
        wait = turn.wait_s / workload.speed
        scheduled = ready + wait if number > 1 else due
        if (delay := scheduled - wall()) > 0:
            gevent.sleep(delay)
        text = workload.turn_text(conv, number)
        message = {"role": "user", "content": text}
        replies: list[str] = []
        sent += send(
            trace_turn=TraceTurn(
                session=conv.id,
                number=number,
                parent=conv.parent,
                line=turn.line,
                prompt=text,
                messages=[*history, message] if conv.history == HISTORY_DELTAS else None,
                max_tokens=turn.output_length,
                t_scheduled=scheduled,
                wait_s=wait if number > 1 else None,
            ),
            on_reply=replies.append,
        )
        if not replies:
            break
        history += [message, {"role": "assistant", "content": replies[-1]}]
        ready = wall()
        if turn.subagents:
            greenlets = [
                gevent.spawn(
                    _play_subagent, workload, sub, ready + sub.wait_s / workload.speed, subagent_sender
                )
                for sub in turn.subagents
            ]
            gevent.joinall(greenlets, raise_error=True)
            sent += sum(g.value for g in greenlets)
            ready = wall()
    return sent


def _play_subagent(
    workload: TraceWorkload, conv: Conversation, due: float, subagent_sender: SubagentSender
) -> int:
    with subagent_sender() as send:
        return play_conversation(workload, conv, due, send, subagent_sender)
