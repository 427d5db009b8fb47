"""A rung's sessions rolled up (definitions in docs/sessions.md#figures-per-session).

A session is the conversation of one `session` id; a top-level id holds no "/", a sub-agent's is
`<parent id>/<k>`, so every id belongs to the top-level session before its first "/". The
figures are of top-level sessions with their sub-agents (a tree), per rung, from the measured
records of every attempt, failed ones too:
- makespan: the tree's first request start to its last request end (s);
- turns: the top-level session's turns (its highest `turn`); sub_agents: the tree's sub-agent
  sessions; tool_calls: the calls every reply of the tree made (`tool_calls`);
- model time: the union of the tree's request intervals [t_start, t_end]; tool time: the union of
  its waits before a turn ([t_start - tool_wait_s, t_start]: an agent's tool latency, a trace's
  recorded wait) outside model time; the rest (think time, the client) is other time. The rung's
  shares pool its finished trees: their model (tool, other) time summed / their makespans summed.
A tree finished when every session of it ended: its last turn (highest `turn`; of its attempts,
the last to end) completed, and it reached its turn limit or, in an agent session, gave a final
answer (a reply without a tool call: `SessionEnds`). The others are cut, apart from the
figures: `failed` (a session's last turn failed: a failed turn ends its session), else
`unended` (the rung's deadline stopped it before its end). Makespan percentiles, turns, tool
calls, sub-agents and shares are of finished trees only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llmload.analysis.sessions.intervals import Span, length, outside, union
from llmload.core.config import SessionConfig
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE
from llmload.core.stats import DEFAULT_PERCENTILES, mean, percentile, percentile_label

SUB_AGENT_SEPARATOR = "/"  # a sub-agent's id is `<parent id>/<k>`


def top_level(session: str) -> str:
    """The top-level session a session id belongs to (itself when it is one)."""
    return session.split(SUB_AGENT_SEPARATOR, 1)[0]


@dataclass(frozen=True, slots=True)
class SessionEnds:
    """When a session has reached its end: `turns`, a top-level session's turn limit, and
    `sub_agent_turns`, a sub-agent's (None: not known, as for a records file without its run file
    or a trace's conversations: then a session whose last turn completed ended); `final_answer`:
    a reply without a tool call ends it too (agent sessions)."""

    turns: int | None = None
    sub_agent_turns: int | None = None
    final_answer: bool = False

    @classmethod
    def of(cls, sessions: SessionConfig | None) -> SessionEnds:
        """The rule of a run's `sessions:` section (None: not known)."""
        if sessions is None:
            return cls()
        agent = sessions.agent  # only agent sessions fan out (sub_agent_turns) and end on an answer
        return cls(sessions.turns, sessions.sub_agent_turns if agent else None, final_answer=agent)

    def ended(self, last: RequestRecord) -> bool:
        """Whether a session whose last turn is `last` (completed) reached its end."""
        limit = self.sub_agent_turns if SUB_AGENT_SEPARATOR in (last.session or "") else self.turns
        if limit is None or (last.turn or 0) >= limit:
            return True
        return self.final_answer and not last.tool_calls


@dataclass(slots=True)
class _Tree:
    """A top-level session and its sub-agents, as their records came."""

    spans: list[Span] = field(default_factory=list)
    waits: list[Span] = field(default_factory=list)  # the waits before turns (tool_wait_s)
    tool_calls: int = 0
    last: dict[str, RequestRecord] = field(default_factory=dict)  # each session id's last turn

    def add(self, rec: RequestRecord) -> None:
        self.spans.append((rec.t_start, rec.t_end))
        if rec.tool_wait_s:
            self.waits.append((rec.t_start - rec.tool_wait_s, rec.t_start))
        self.tool_calls += rec.tool_calls or 0
        assert rec.session is not None
        known = self.last.get(rec.session)
        if known is None or ((rec.turn or 0), rec.t_end) > ((known.turn or 0), known.t_end):
            self.last[rec.session] = rec

    def cut(self, ends: SessionEnds) -> str | None:
        """Why the tree did not finish (`failed`, `unended`), None when it did."""
        if not all(r.ok for r in self.last.values()):
            return "failed"
        return None if all(ends.ended(r) for r in self.last.values()) else "unended"


@dataclass(frozen=True, slots=True)
class SessionFigures:
    """A rung's sessions (module docstring); times in s, shares 0..1, None without a finished tree."""

    rung: int
    users: int
    sessions: int  # top-level sessions with a measured record in the rung
    finished: int
    failed: int  # cut: a session's last turn failed
    unended: int  # cut: stopped before its end (the rung's deadline)
    makespan_s: dict[str, float] | None  # mean and DEFAULT_PERCENTILES ("p50"...)
    turns_mean: float | None
    turns_max: int | None
    tool_calls_mean: float | None
    tool_calls_max: int | None
    sub_agents_mean: float | None
    sub_agents_max: int | None
    model_share: float | None
    tool_share: float | None
    other_share: float | None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name not in ("rung", "users")}


class SessionTally:
    """The session trees of one rung, fed record by record (`add`), rolled up by `figures`."""

    def __init__(self, rung: int, users: int) -> None:
        self.rung, self.users = rung, users
        self.trees: dict[str, _Tree] = {}

    def add(self, rec: RequestRecord) -> None:
        """A measured record of the rung; one without a session is not a session's."""
        if rec.session is not None:
            self.trees.setdefault(top_level(rec.session), _Tree()).add(rec)

    def figures(self, ends: SessionEnds) -> SessionFigures:
        cuts = {name: tree.cut(ends) for name, tree in self.trees.items()}
        done = {name: self.trees[name] for name, why in cuts.items() if why is None}
        makespans, model, tool = [], 0.0, 0.0
        for tree in done.values():
            starts, stops = zip(*tree.spans, strict=True)
            makespans.append(max(stops) - min(starts))
            busy = union(tree.spans)
            model += length(busy)
            tool += outside(tree.waits, busy)
        turns = [(t.last[name].turn or 0) if name in t.last else 0 for name, t in done.items()]
        subs = [sum(SUB_AGENT_SEPARATOR in s for s in t.last) for t in done.values()]
        calls = [t.tool_calls for t in done.values()]
        total = sum(makespans)
        share = total > 0
        return SessionFigures(
            rung=self.rung,
            users=self.users,
            sessions=len(self.trees),
            finished=len(done),
            failed=sum(why == "failed" for why in cuts.values()),
            unended=sum(why == "unended" for why in cuts.values()),
            makespan_s=_makespan(makespans),
            turns_mean=mean(turns) if done else None,
            turns_max=max(turns, default=None),
            tool_calls_mean=mean(calls) if done else None,
            tool_calls_max=max(calls, default=None),
            sub_agents_mean=mean(subs) if any(subs) else None,
            sub_agents_max=max(subs) if any(subs) else None,
            model_share=model / total if share else None,
            tool_share=tool / total if share else None,
            other_share=max(0.0, 1.0 - (model + tool) / total) if share else None,
        )


def _makespan(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": mean(values)} | {percentile_label(q): percentile(values, q) for q in DEFAULT_PERCENTILES}


def session_figures(records: Iterable[RequestRecord], ends: SessionEnds) -> dict[int, SessionFigures]:
    """Each rung's session figures by rung index, from a run's records (measured ones count);
    empty when no record is a session's."""
    tallies: dict[int, SessionTally] = {}
    for rec in records:
        if rec.phase == MEASURE_PHASE and rec.session is not None:
            tallies.setdefault(rec.rung, SessionTally(rec.rung, rec.users)).add(rec)
    return {rung: tally.figures(ends) for rung, tally in sorted(tallies.items())}
