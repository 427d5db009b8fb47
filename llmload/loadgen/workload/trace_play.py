"""Playing one conversation of a conversation trace (`mode: trace` with AIPerf's multi-turn Mooncake
or DAG trace, or a Weka agentic trace: `llmload.core.workload.trace_formats`).

A client slot takes a conversation when its first turn is due (the trace's schedule, as a line of
a flat trace) and sends its turns in order, each `wait_s / speed` seconds after the last of its
predecessors ended: the turn before it and the sub-agents that turn before waits for
(`Conversation.join_turn`: by default the next turn waits for those the turn before spawned). A
turn's sub-agents start together when it ends, each `wait_s / speed` later, each on a connection
of its own, and play their own turns the same way; the conversation ends when its last turn and
every sub-agent it spawned have ended. A turn sends its own messages (authored, else one user
message of its synthetic text) after the history: `HISTORY_DELTAS`, every earlier turn's messages
and the reply as the client received it; `HISTORY_AUTHORED`, every earlier turn's messages;
`HISTORY_ISOLATED`, nothing; with `HISTORY_WHOLE` its prompt is its whole context. A turn that
fails ends its conversation (its earlier sub-agents still end): there is no reply to resend.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import gevent

from llmload.core.clock import wall
from llmload.core.workload.conversations import HISTORY_AUTHORED, HISTORY_DELTAS, HISTORY_WHOLE, Conversation
from llmload.loadgen.workload.sessions import Reply
from llmload.loadgen.workload.trace import TraceWorkload


@dataclass(frozen=True, slots=True)
class TraceTurn:
    """One request of a conversation, ready to send."""

    session: str  # the conversation's id (a sub-agent's: `<parent>/<k>`)
    number: int  # 1-based
    parent: str | None  # a sub-agent's parent conversation
    line: int  # the trace line it replays
    prompt: str  # its whole prompt (HISTORY_WHOLE), else its new user message or its last message's text
    messages: list[dict[str, Any]] | None  # the history as its conversation resends it, then its own
    max_tokens: int
    t_scheduled: float  # when it was due
    wait_s: float | None  # the wait before it after its predecessors ended; None: a first turn


class TurnSender(Protocol):
    """What sends a turn: hands a completed reply to `on_reply`, returns the records made."""

    def __call__(self, *, trace_turn: TraceTurn, on_reply: Callable[[Reply], None]) -> int: ...


SubagentSender = Callable[[], AbstractContextManager[TurnSender]]  # a sender on a connection of its own


class Connection(Protocol):
    """A user's transport, as far as a sub-agent needs it."""

    def close(self) -> None: ...


@contextlib.contextmanager
def own_connection(
    open_connection: Callable[[], Connection], send: Callable[..., int]
) -> Iterator[Callable[..., int]]:
    """`send` (called with `transport=`) on a connection of its own, closed when the sub-agent ends:
    a `SubagentSender` once its two arguments are bound (an agent session's sub-agent's too,
    llmload.loadgen.workload.session_play)."""
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
    history: list[dict[str, Any]] = []
    pending: list[tuple[int, gevent.Greenlet]] = []  # sub-agents running: (the turn that waits, it)
    ready = due
    for number, turn in enumerate(conv.turns, start=1):
        if joined := [g for join, g in pending if join <= number]:
            sent += _join(joined)
            pending = [(join, g) for join, g in pending if join > number]
            ready = max(ready, wall())
        wait = turn.wait_s / workload.speed
        scheduled = ready + wait if number > 1 else due
        if (delay := scheduled - wall()) > 0:
            gevent.sleep(delay)
        text = workload.turn_text(conv, number)
        new = list(turn.messages) if turn.messages is not None else [{"role": "user", "content": text}]
        replies: list[Reply] = []
        sent += send(
            trace_turn=TraceTurn(
                session=conv.id,
                number=number,
                parent=conv.parent,
                line=turn.line,
                prompt=text,
                messages=None if conv.history == HISTORY_WHOLE else [*history, *new],
                max_tokens=turn.output_length,
                t_scheduled=scheduled,
                wait_s=wait if number > 1 else None,
            ),
            on_reply=replies.append,
        )
        if not replies:
            break
        if conv.history in (HISTORY_DELTAS, HISTORY_AUTHORED):
            history += new
        if conv.history == HISTORY_DELTAS:
            history.append({"role": "assistant", "content": replies[-1].text})
        ready = wall()
        for sub in turn.subagents:
            start = ready + sub.wait_s / workload.speed
            greenlet = gevent.spawn(_play_subagent, workload, sub, start, subagent_sender)
            pending.append((sub.join_turn or number + 1, greenlet))
    return sent + _join([g for _, g in pending])  # the last turn's, or a failed turn's, sub-agents


def _join(greenlets: list[gevent.Greenlet]) -> int:
    """Wait for sub-agents to end; the records they sent."""
    gevent.joinall(greenlets, raise_error=True)
    return sum(g.value for g in greenlets)


def _play_subagent(
    workload: TraceWorkload, conv: Conversation, due: float, subagent_sender: SubagentSender
) -> int:
    with subagent_sender() as send:
        return play_conversation(workload, conv, due, send, subagent_sender)
