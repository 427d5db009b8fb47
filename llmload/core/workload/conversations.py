"""Conversation traces: what a conversation of a trace is (its turns, their waits, its sub-agents,
how its history is resent), and two of the peers' formats read into it (docs/traces.md says
which fields are read and which are not, and from which package versions; AIPerf's DAG trace is
`llmload.core.workload.dag_trace`, and `llmload.core.workload.trace_formats` tells them apart):
- AIPerf's multi-turn Mooncake trace: the JSONL of `trace_file` with a `session_id` on its lines
  (`llmload.core.workload.trace_file` reads the lines). The lines of a session, in file order,
  are its turns; each turn is a new user message of `input_length` tokens after the history
  (every earlier message and the server's replies as received: `HISTORY_DELTAS`), sent `delay`
  milliseconds after its predecessor ends. The conversation starts at its first turn's
  `timestamp` (0 without one). A line without `session_id` is a conversation of one turn.
- The Weka agentic trace (inference-perf's `weka_trace_replay`, AIPerf's `weka_trace`): a JSON
  object `{"id", "block_size", "requests": [...]}`, the whole file or one per line. Its normal and
  streaming requests (`"type": "n"` / `"s"`) are the turns of the conversation `id`, each a whole
  context of `in` tokens (`HISTORY_WHOLE`: the history is in the prompt's `hash_ids`, one per
  `block_size` tokens; the replies are not resent); a `"type": "subagent"` entry is a sub-agent
  conversation `<id>/<k>` (k-th sub-agent, 1-based) spawned when the turn before it ends, and the
  next turn waits for it to end. A turn (or a sub-agent) waits `t` minus the end of the last of
  its predecessors, as recorded (`t + api_time`; a sub-agent's end: `t + duration_ms`), at least
  0: inference-perf's `wait_ms`. Every conversation starts at the replay's start.

Every mistake is a `ConfigError` naming the file, the line (a Weka request: its line, then its
place in `requests`) and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmload.core.config import ConfigError
from llmload.core.schema import shown
from llmload.core.workload.trace_file import BLOCK_TOKENS, TraceLine

HISTORY_DELTAS = "deltas"  # each turn adds its messages; the replies as received are resent
HISTORY_AUTHORED = "authored"  # each turn adds its messages (replies as authored); live ones not resent
HISTORY_ISOLATED = "isolated"  # each turn sends its own messages only
HISTORY_WHOLE = "whole"  # each turn's prompt is its whole context (its hash_ids), nothing resent
WEKA_TURN_TYPES = ("n", "s")  # a normal and a streaming API call: both are sent streamed here
WEKA_SUBAGENT = "subagent"


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """One request of a conversation."""

    line: int  # the line of the file it comes from (the records' `trace_line`)
    input_length: int  # synthetic: the new user message's tokens, or the whole prompt's; authored: 0
    output_length: int
    hash_ids: tuple[int, ...] | None = None
    input_text: str | None = None
    wait_s: float = 0.0  # after the last of its predecessors ends (a first turn: after the start)
    subagents: tuple[Conversation, ...] = ()  # spawned when this turn ends; `join_turn` waits for each
    messages: tuple[dict[str, Any], ...] | None = None  # authored messages, sent instead of synthetic text


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation of a trace: its turns, in order, and how its history is resent."""

    id: str
    timestamp_ms: float  # its first turn's, in trace time (sub-agents: 0, they start on a turn)
    turns: tuple[ConversationTurn, ...]
    history: str = HISTORY_DELTAS
    block_tokens: int = BLOCK_TOKENS  # tokens per hash_ids block
    parent: str | None = None  # a sub-agent's parent conversation
    wait_s: float = 0.0  # a sub-agent: after the turn that spawns it ends
    join_turn: int | None = None  # a sub-agent: the parent's turn that waits for it (None: the next)

    def requests(self) -> int:
        """Its turns and its sub-agents' turns, all."""
        return sum(1 + sum(s.requests() for s in t.subagents) for t in self.turns)


def mooncake_conversations(lines: Sequence[TraceLine]) -> list[Conversation]:
    """The conversations of an AIPerf multi-turn Mooncake trace (module docstring), by start."""
    sessions: dict[str, list[TraceLine]] = {}
    for t in sorted(lines, key=lambda t: t.line):
        sessions.setdefault(t.session_id or f"line{t.line}", []).append(t)
    conversations = [
        Conversation(
            id=sid,
            timestamp_ms=turns[0].timestamp_ms,
            turns=tuple(
                ConversationTurn(
                    line=t.line,
                    input_length=t.input_length,
                    output_length=t.output_length,
                    hash_ids=t.hash_ids,
                    input_text=t.input_text,
                    wait_s=0.0 if i == 0 else (t.delay_ms or 0.0) / 1000.0,
                )
                for i, t in enumerate(turns)
            ),
        )
        for sid, turns in sessions.items()
    ]
    return sorted(conversations, key=lambda c: c.timestamp_ms)


def is_weka(obj: Any) -> bool:
    """Whether a JSON value is a Weka trace (an object with a `requests` list)."""
    return isinstance(obj, dict) and "requests" in obj and "input_length" not in obj


def _number(where: str, obj: dict[str, Any], key: str, default: float | None = None) -> float:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: '{key}' must be a number >= 0, got {shown(value)}")
    return float(value)


def _count(where: str, obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: '{key}' must be an integer >= 1, got {shown(value)}")
    return value


def _weka_hash_ids(where: str, obj: dict[str, Any]) -> tuple[int, ...] | None:
    value = obj.get("hash_ids", [])
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: 'hash_ids' must be a list of integers, got {shown(value)}")
    return tuple(value) or None


class _WekaReader:
    """One Weka trace object: its turns and sub-agents, with the waits between them."""

    def __init__(self, where: str, line: int, obj: dict[str, Any]) -> None:
        self.where = where
        self.line = line
        sid = obj.get("id")
        if not isinstance(sid, str | int) or isinstance(sid, bool) or str(sid) == "":
            raise ConfigError(f"{where}: 'id' must be a non-empty string, got {shown(sid)}")
        self.id = str(sid)
        self.block_tokens = _count(where, obj, "block_size")
        requests = obj.get("requests")
        if not isinstance(requests, list) or not requests:
            raise ConfigError(f"{where}: 'requests' must be a non-empty list")
        self.requests = requests

    def _request(self, where: str, req: Any, kinds: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(req, dict) or req.get("type") not in kinds:
            got = req.get("type") if isinstance(req, dict) else req
            raise ConfigError(f"{where}: 'type' must be one of {', '.join(kinds)}, got {shown(got)}")
        return req

    def _turn(
        self, where: str, req: dict[str, Any], wait_s: float, subagents: tuple[Conversation, ...]
    ) -> ConversationTurn:
        return ConversationTurn(
            line=self.line,
            input_length=_count(where, req, "in"),
            output_length=_count(where, req, "out"),
            hash_ids=_weka_hash_ids(where, req),
            wait_s=wait_s,
            subagents=subagents,
        )

    def _subagent(
        self, where: str, entry: dict[str, Any], number: int, spawn_end: float
    ) -> tuple[Conversation, float]:
        """The sub-agent conversation and its recorded end (seconds from the conversation's start)."""
        start = _number(where, entry, "t")
        inner = entry.get("requests", [])
        if not isinstance(inner, list):
            raise ConfigError(f"{where}: 'requests' must be a list")
        turns: list[ConversationTurn] = []
        end = start
        for j, raw in enumerate(inner, start=1):
            here = f"{where} requests[{j}]"
            req = self._request(here, raw, WEKA_TURN_TYPES)
            t = _number(here, req, "t")
            t = start + t if t + 1e-6 < start else t  # relative to the sub-agent's start (as both peers)
            turns.append(self._turn(here, req, max(0.0, t - end) if turns else 0.0, ()))
            end = t + _number(here, req, "api_time", 0.0)
        duration = entry.get("duration_ms")
        if duration is not None:
            end = max(end, start + _number(where, entry, "duration_ms") / 1000.0)
        if not turns:
            raise ConfigError(f"{where}: a sub-agent without requests sends nothing")
        conversation = Conversation(
            id=f"{self.id}/{number}",
            timestamp_ms=0.0,
            turns=tuple(turns),
            history=HISTORY_WHOLE,
            block_tokens=self.block_tokens,
            parent=self.id,
            wait_s=max(0.0, start - spawn_end),
        )
        return conversation, end

    def conversation(self) -> Conversation:
        turns: list[ConversationTurn] = []
        pending: list[Conversation] = []
        last_end = 0.0  # the recorded end of the last predecessor of the next turn
        turn_end = 0.0  # the recorded end of the last turn (sub-agents spawn on it)
        for i, raw in enumerate(self.requests, start=1):
            where = f"{self.where} requests[{i}]"
            req = self._request(where, raw, (*WEKA_TURN_TYPES, WEKA_SUBAGENT))
            if req["type"] == WEKA_SUBAGENT:
                if not turns:
                    raise ConfigError(
                        f"{where}: a sub-agent before the first request has no turn to spawn it"
                    )
                sub, end = self._subagent(
                    where, req, sum(len(t.subagents) for t in turns) + len(pending) + 1, turn_end
                )
                pending.append(sub)
                last_end = max(last_end, end)
                continue
            t = _number(where, req, "t")
            if turns and pending:
                turns[-1] = _with_subagents(turns[-1], tuple(pending))
                pending = []
            turns.append(self._turn(where, req, max(0.0, t - last_end) if turns else 0.0, ()))
            turn_end = last_end = t + _number(where, req, "api_time", 0.0)
        if pending:
            turns[-1] = _with_subagents(turns[-1], tuple(pending))
        if not turns:
            raise ConfigError(f"{self.where}: 'requests' holds no request of type n or s")
        return Conversation(
            id=self.id,
            timestamp_ms=0.0,
            turns=tuple(turns),
            history=HISTORY_WHOLE,
            block_tokens=self.block_tokens,
        )


def _with_subagents(turn: ConversationTurn, subagents: tuple[Conversation, ...]) -> ConversationTurn:
    return ConversationTurn(
        turn.line,
        turn.input_length,
        turn.output_length,
        turn.hash_ids,
        turn.input_text,
        turn.wait_s,
        subagents,
    )


def weka_conversations(text: str, source: str) -> list[Conversation]:
    """The conversations of a Weka trace file: one JSON object, or one per line (module docstring)."""
    try:
        objects = [(1, json.loads(text))]
    except ValueError:
        objects = []
        for number, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    objects.append((number, json.loads(raw)))
                except ValueError as e:
                    raise ConfigError(f"{source}:{number}: not a JSON object: {e}") from None
    conversations = []
    seen: set[str] = set()
    for number, obj in objects:
        where = f"{source}:{number}"
        if not is_weka(obj):
            raise ConfigError(
                f"{where}: not a Weka trace object (an 'id', a 'block_size' and a 'requests' list)"
            )
        conversation = _WekaReader(where, number, obj).conversation()
        if conversation.id in seen:
            raise ConfigError(f"{where}: 'id' {conversation.id!r} is used by an earlier trace")
        seen.add(conversation.id)
        conversations.append(conversation)
    return conversations
