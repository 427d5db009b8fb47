"""AIPerf's DAG trace (`--custom-dataset-type dag_jsonl`): conversations of authored messages whose
turns spawn sub-agent conversations, read into `llmload.core.workload.conversations`.

One JSON object per line: `{"session_id", "turns": [...], "context_mode"}`. A turn's `messages`
(each an object with a `role`) are sent after the history as `context_mode` says (default
`deltas_without_responses`: `HISTORY_DELTAS`, the replies as received resent;
`deltas_with_responses`: `HISTORY_AUTHORED`; `message_array_with_responses`: `HISTORY_ISOLATED`),
with `max_tokens` (required here: every request's length is the trace's), `delay` milliseconds
after its predecessors end. Its `spawns` name other lines' conversations, started when it ends:
a name is joined at the next turn, `{"children": [...], "join_at": i}` at turn i (0-based, as
AIPerf counts). A conversation no line spawns is a root: every root starts at the replay's start,
after its first turn's `delay`; a spawned one runs as the sub-agent `<parent>/<k>` (the parent's
k-th, 1-based). AIPerf's forks, orchestrators and pre-session spawns are refused by name.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.core.config import ConfigError
from llmload.core.schema import shown
from llmload.core.workload.conversations import (
    HISTORY_AUTHORED,
    HISTORY_DELTAS,
    HISTORY_ISOLATED,
    Conversation,
    ConversationTurn,
)

CONTEXT_MODES = {
    "deltas_without_responses": HISTORY_DELTAS,
    "deltas_with_responses": HISTORY_AUTHORED,
    "message_array_with_responses": HISTORY_ISOLATED,
}
REFUSED = ("forks", "orchestrator", "pre_session_spawns", "rounds")  # AIPerf's, not replayed here


def is_dag(obj: Any) -> bool:
    """Whether a JSON value is a line of a DAG trace (a `session_id` and a `turns` list)."""
    return isinstance(obj, dict) and "session_id" in obj and isinstance(obj.get("turns"), list)


class _DagReader:
    """The lines of a DAG trace, by session id, and the conversations they make."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines: dict[str, tuple[int, dict[str, Any]]] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            where = f"{source}:{number}"
            try:
                obj = json.loads(raw)
            except ValueError as e:
                raise ConfigError(f"{where}: not a JSON object: {e}") from None
            if not is_dag(obj):
                raise ConfigError(f"{where}: not a DAG conversation (a 'session_id' and a 'turns' list)")
            sid = obj["session_id"]
            if not isinstance(sid, str) or not sid:
                raise ConfigError(f"{where}: 'session_id' must be a non-empty string, got {shown(sid)}")
            if sid in self.lines:
                raise ConfigError(f"{where}: 'session_id' {sid!r} is used by line {self.lines[sid][0]}")
            for key in REFUSED:
                if obj.get(key) or any(isinstance(t, dict) and t.get(key) for t in obj["turns"]):
                    raise ConfigError(f"{where}: '{key}' is AIPerf's and not replayed here (docs/traces.md)")
            self.lines[sid] = (number, obj)
        self.spawned: dict[str, str] = {}  # child -> where it is spawned

    def roots(self) -> list[Conversation]:
        for number, obj in self.lines.values():
            for child, _ in self._spawns(f"{self.source}:{number}", obj):
                if child not in self.lines:
                    raise ConfigError(
                        f"{self.source}:{number}: 'spawns' names {child!r}, which no line defines"
                    )
                if child in self.spawned:
                    raise ConfigError(
                        f"{self.source}:{number}: {child!r} is spawned again (first at {self.spawned[child]})"
                    )
                self.spawned[child] = f"{self.source}:{number}"
        roots = [sid for sid in self.lines if sid not in self.spawned]
        if not roots:
            raise ConfigError(f"{self.source}: every conversation is spawned by another: a spawn cycle")
        conversations = [self._conversation(sid, sid, None, None) for sid in roots]
        # every line has one parent at most: a line no root reaches is in a cycle of spawns
        if (played := sum(1 for c in conversations for _ in _all(c))) < len(self.lines):
            raise ConfigError(
                f"{self.source}: {len(self.lines) - played} conversations spawn each other in a cycle"
            )
        return conversations

    def _spawns(self, where: str, obj: dict[str, Any]) -> list[tuple[str, int | None]]:
        """(child, join turn index) of every spawn of a line, in order."""
        return [spawn for i, turn in enumerate(obj["turns"]) for spawn in _turn_spawns(where, obj, i, turn)]

    def _conversation(self, sid: str, new_id: str, parent: str | None, join: int | None) -> Conversation:
        """The conversation of line `sid`, played as `new_id` (a sub-agent of `parent`)."""
        number, obj = self.lines[sid]
        where = f"{self.source}:{number}"
        mode = obj.get("context_mode") or "deltas_without_responses"
        if mode not in CONTEXT_MODES:
            raise ConfigError(
                f"{where}: 'context_mode' must be one of {', '.join(CONTEXT_MODES)}, got {shown(mode)}"
            )
        turns: list[ConversationTurn] = []
        subagents = 0
        for i, raw in enumerate(obj["turns"]):
            here = f"{where} turns[{i}]"
            turn = self._turn(here, number, raw)
            spawned = []
            for child, join_at in _turn_spawns(where, obj, i, raw):
                subagents += 1
                spawned.append(
                    self._conversation(
                        child,
                        f"{new_id}/{subagents}",
                        new_id,
                        None if join_at is None else join_at + 1,
                    )
                )
            turns.append(
                ConversationTurn(
                    **{**turn, "wait_s": 0.0 if i == 0 else turn["wait_s"]}, subagents=tuple(spawned)
                )
            )
        if not turns:
            raise ConfigError(f"{where}: 'turns' holds no turn")
        first_wait = _delay(f"{where} turns[0]", obj["turns"][0])
        return Conversation(
            id=new_id,
            timestamp_ms=first_wait * 1000.0 if parent is None else 0.0,
            turns=tuple(turns),
            history=CONTEXT_MODES[mode],
            parent=parent,
            wait_s=first_wait if parent is not None else 0.0,
            join_turn=join,
        )

    @staticmethod
    def _turn(where: str, line: int, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: a turn must be an object with 'messages' and 'max_tokens'")
        messages = raw.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise ConfigError(f"{where}: 'messages' must be a non-empty list of objects with a 'role'")
        tokens = raw.get("max_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ConfigError(
                f"{where}: 'max_tokens' must be an integer >= 1 (required here), got {shown(tokens)}"
            )
        return {
            "line": line,
            "input_length": 0,  # authored text: the server counts its tokens
            "output_length": tokens,
            "messages": tuple(messages),
            "wait_s": _delay(where, raw),
        }


def _turn_spawns(where: str, obj: dict[str, Any], i: int, turn: Any) -> list[tuple[str, int | None]]:
    """(child, join turn index or None: the next) of the spawns of turn i of a line."""
    entries = turn.get("spawns", []) if isinstance(turn, dict) else []
    if not isinstance(entries, list):
        raise ConfigError(f"{where} turns[{i}]: 'spawns' must be a list")
    out: list[tuple[str, int | None]] = []
    for entry in entries:
        if isinstance(entry, str) and entry:
            out.append((entry, None))
        elif isinstance(entry, dict) and isinstance(entry.get("children"), list) and entry["children"]:
            join = entry.get("join_at")
            if join is not None and (
                isinstance(join, bool) or not isinstance(join, int) or not i < join < len(obj["turns"])
            ):
                raise ConfigError(
                    f"{where} turns[{i}]: 'join_at' must be a later turn's index, got {shown(join)}"
                )
            out += [(str(child), join) for child in entry["children"]]
        else:
            raise ConfigError(
                f"{where} turns[{i}]: a spawn is a session id or {{'children': [...]}}, got {shown(entry)}"
            )
    return out


def _delay(where: str, raw: dict[str, Any]) -> float:
    value = raw.get("delay", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{where}: 'delay' must be a number of milliseconds >= 0, got {shown(value)}")
    return float(value) / 1000.0


def _all(c: Conversation) -> list[Conversation]:
    return [c, *(s for t in c.turns for sub in t.subagents for s in _all(sub))]


def dag_conversations(text: str, source: str) -> list[Conversation]:
    """The root conversations of a DAG trace (module docstring), in file order."""
    return _DagReader(text, source).roots()
