"""Playing sessions (`sessions:`): a user's conversations turn by turn, with their pauses, tool
waits and sub-agents. The conversation itself (its id, text and history) is
`llmload.loadgen.workload.sessions`.

User sessions: a session is `turns` turns; between a reply and the next turn the user thinks for
`think_time_s` (constant, or exponentially distributed with that mean).

Agent sessions (`agent: true`): a session runs turns until a reply without tool calls (its final
answer) or `turns`. After a reply with tool calls the client waits the tools' latency
(`tool_latency_s`, `tool_latency`: one draw per call, the calls run at once, so the longest) and
sends the next turn with their results. At `fan_out_turn`, a reply with tool calls instead starts
`fan_out` sub-agent sessions at once (greenlets spawned together, each on a connection of its own),
agent sessions themselves of at most `sub_agent_turns` turns that do not fan out; when the last
one ends, their last replies' texts (joined by a blank line) are the result of the reply's first
call (its other calls get drawn results, taken as done by then), and the parent's next turn is
sent with no tool wait of its own.

Either kind: a turn that fails ends its session (there is no reply to resend). Count-based rungs:
each user plays `per_user` sessions. Time-based rungs (`duration`): users play sessions until the
deadline, and no session or sub-agent starts a turn after it. A user plays one top-level session
at a time: a rung's users are its concurrent top-level sessions; sub-agents are requests in
flight beyond them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import gevent

from llmload.core.clock import wall
from llmload.core.config import SessionConfig
from llmload.loadgen.workload.sessions import Reply, Session, Turn, session_id


class SessionSender(Protocol):
    """What sends one turn of a session: hands a completed reply to `on_reply`, returns the
    number of records (attempts) it made."""

    def __call__(self, *, turn: Turn, on_reply: Callable[[Reply], None]) -> int: ...


@dataclass(frozen=True, slots=True)
class SessionPlayer:
    """What one user's sessions of a rung need: the configuration, the draws' seed and words, the
    deadline of a time-based rung, and how to send (`send`: on the user's own connections;
    `subagent_sender()`: a sender on a connection of its own, closed when the sub-agent ends, as
    llmload.loadgen.workload.trace_play's `own_connection` gives them)."""

    config: SessionConfig
    seed: int
    vocab: Sequence[str]
    deadline: float | None
    responses: bool  # the Responses API: tool calls and results as its input items
    send: SessionSender
    subagent_sender: Callable[[], AbstractContextManager[SessionSender]]

    def play(self, rung: int, slot: int) -> int:
        """Play the sessions of user slot `slot` at rung `rung` (module docstring); returns the
        records sent, sub-agents' included."""
        sent = 0
        played = 0
        per_user = self.config.per_user
        while (played < per_user) if self.deadline is None else not self._late():
            played += 1
            session = self._session(session_id(rung, slot, played))
            sent += self._play(session, self.send, self.config.turns, fan_out=self.config.fan_out)[0]
        return sent

    def _session(self, sid: str, parent: str | None = None) -> Session:
        return Session(self.config, self.seed, self.vocab, sid, responses=self.responses, parent=parent)

    def _late(self) -> bool:
        return self.deadline is not None and wall() >= self.deadline

    def _play(
        self, session: Session, send: SessionSender, limit: int, fan_out: int | None
    ) -> tuple[int, str]:
        """One session's turns -> (records sent, its last reply's text)."""
        cfg, sent, wait, last = self.config, 0, None, ""
        for number in range(1, limit + 1):
            if self._late():
                break
            replies: list[Reply] = []
            sent += send(turn=session.next_turn(wait), on_reply=replies.append)
            if not replies:
                break  # the turn failed: no reply to resend, the session ends
            reply = replies[-1]
            last = reply.text
            session.answered(reply)
            if number == limit or (cfg.agent and not reply.calls):
                break  # the turn limit, or an agent's final answer
            if not cfg.agent:
                gevent.sleep(session.think_time())
                continue
            if fan_out is not None and number == cfg.fan_out_turn:
                extra, answers = self._fan_out(session, fan_out)
                sent += extra
                session.answer_tools(reply.calls, answers)
                wait = None  # the sub-agents are model work, recorded as their own requests
            else:
                wait = session.tool_wait(len(reply.calls))
                gevent.sleep(wait)
                session.answer_tools(reply.calls)
        return sent, last

    def _fan_out(self, parent: Session, count: int) -> tuple[int, str]:
        """Run `count` sub-agents of `parent` at once -> (their records, their answers joined)."""
        subs = [self._session(f"{parent.id}/{k}", parent=parent.id) for k in range(1, count + 1)]
        jobs = [gevent.spawn(self._play_subagent, sub) for sub in subs]
        try:
            gevent.joinall(jobs, raise_error=True)
        finally:
            gevent.killall(jobs)  # the user stopped (Locust kills its greenlet): its sub-agents too
        done = [job.value for job in jobs]
        return sum(records for records, _ in done), "\n\n".join(text for _, text in done if text)

    def _play_subagent(self, session: Session) -> tuple[int, str]:
        with self.subagent_sender() as send:
            return self._play(session, send, self.config.sub_agent_turns, None)
