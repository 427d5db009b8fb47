"""Which format a trace file is in, and its conversations: the one entry of trace mode's readers.

A JSON object with a `requests` list (the whole file or its first line) is a Weka trace; a first
line with a `session_id` and a `turns` list is AIPerf's DAG trace
(`llmload.core.workload.dag_trace`); a Mooncake trace with a `session_id` on any line is AIPerf's
multi-turn trace (`llmload.core.workload.conversations`); else the trace's lines are independent
requests (`llmload.core.workload.trace_file`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmload.core.config import ConfigError
from llmload.core.workload.conversations import (
    Conversation,
    is_weka,
    mooncake_conversations,
    weka_conversations,
)
from llmload.core.workload.dag_trace import dag_conversations, is_dag
from llmload.core.workload.trace_file import TraceLine, parse_trace, trace_text


def _first_object(text: str) -> Any:
    """The whole text as JSON, else its first line's, else None."""
    for candidate in (text, text.lstrip().split("\n", 1)[0]):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def parse_conversations(text: str, source: str) -> list[Conversation] | None:
    """The conversations of a trace's text (module docstring), or None for a trace of independent
    requests."""
    first = _first_object(text)
    if is_weka(first):
        return weka_conversations(text, source)
    if is_dag(first):
        return dag_conversations(text, source)
    lines = parse_trace(text, source)
    if all(t.session_id is None for t in lines):
        return None
    return mooncake_conversations(lines)


def read_conversations(path: str | Path) -> list[Conversation] | None:
    """A trace file's conversations (`parse_conversations`); `ConfigError` naming the file."""
    return parse_conversations(trace_text(path), str(path))


def read_request_lines(path: str | Path) -> list[TraceLine]:
    """The lines of a Mooncake or CSV trace (AIPerf's multi-turn one included); `ConfigError` for a
    Weka or DAG trace, which holds conversations, not request lines."""
    text = trace_text(path)
    first = _first_object(text)
    for holds, name in ((is_weka, "a Weka trace"), (is_dag, "AIPerf's DAG trace")):
        if holds(first):
            raise ConfigError(
                f"{path}: {name} holds conversations, not the request lines of a Mooncake or CSV trace"
            )
    return parse_trace(text, str(path))
