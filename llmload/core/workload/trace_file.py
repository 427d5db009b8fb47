"""Request traces (the Mooncake / fixed-schedule format): reading, validating, windowing, scheduling.

A trace is JSONL (one object per line) or CSV (a header row, then one request per row), with:
- `timestamp`: when the request was sent, in milliseconds (any origin; only differences count);
- `input_length`: prompt tokens; `output_length`: tokens to generate (`max_tokens`, ignore_eos);
- `hash_ids` (optional): one id per 512-token block of the prompt, ceil(input_length / 512) of
  them (the last block may be partial). Equal ids at equal positions after an equal prefix mean
  the same prompt text, so shared prefixes are visible. In CSV: a JSON list or ids separated by
  spaces, `;` or `|`.
- `input_text` (optional): the prompt itself, sent verbatim instead of synthetic text;
- `session_id` (optional, AIPerf's multi-turn Mooncake trace): the conversation the line is a turn
  of; `delay` (optional, with `session_id`): milliseconds after the turn's predecessor ends. A line
  with a `session_id` may omit `timestamp` (0). `llmload.core.workload.conversations` groups them.

Lines are sorted by timestamp (stably). The window keeps the lines whose time since the first
line of the file, t, satisfies start_s <= t < start_s + duration_s; each is scheduled at
(t - start_s) / speed seconds after the replay's start. Every mistake is a `ConfigError` naming
the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from llmload.core.config import ConfigError
from llmload.core.schema import shown

BLOCK_TOKENS = 512  # tokens per hash_ids block (the Mooncake trace's block size)
_ID_SEPARATORS = re.compile(r"[\s;|,]+")


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One request of a trace."""

    line: int  # line number in the file (1-based; for CSV, the row's line)
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None = None  # None: the prompt shares nothing with other lines
    input_text: str | None = None
    session_id: str | None = None  # AIPerf's multi-turn trace: the conversation it is a turn of
    delay_ms: float | None = None  # ... sent this long after its predecessor ends


def _int_field(where: str, obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, str) and value.strip().isdigit() and len(value) <= 18:  # else: refused below
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: '{key}' must be an integer >= 1, got {shown(value)}")
    return value


def _milliseconds(where: str, obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    try:
        ts = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else None
    except (ValueError, OverflowError):  # not a number, or an integer beyond any float
        ts = None
    if ts is None or not math.isfinite(ts) or ts < 0:
        raise ConfigError(f"{where}: '{key}' must be a number of milliseconds >= 0, got {shown(value)}")
    return ts


def _hash_ids(where: str, value: Any, input_length: int) -> tuple[int, ...] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.startswith("["):
                value = json.loads(text)
            else:
                value = [int(v) for v in _ID_SEPARATORS.split(text) if v]
        except ValueError:
            raise ConfigError(f"{where}: 'hash_ids' must be a list of integers, got {text[:40]!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: 'hash_ids' must be a list of integers, got {str(value)[:40]}")
    needed = math.ceil(input_length / BLOCK_TOKENS)
    if len(value) != needed:
        raise ConfigError(
            f"{where}: 'hash_ids' has {len(value)} blocks; input_length {input_length} needs "
            f"ceil({input_length}/{BLOCK_TOKENS}) = {needed}"
        )
    return tuple(value)


def _trace_line(where: str, number: int, obj: Any) -> TraceLine:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected an object with timestamp, input_length, output_length")
    input_length = _int_field(where, obj, "input_length")
    text = obj.get("input_text") or None  # an empty CSV cell is no text
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise ConfigError(f"{where}: 'input_text' must be a non-empty string")
    session = obj.get("session_id") or None  # an empty CSV cell is no session
    if session is not None and not isinstance(session, str):
        raise ConfigError(f"{where}: 'session_id' must be a string, got {shown(session)}")
    delay = obj.get("delay")
    if delay not in (None, "") and session is None:
        raise ConfigError(
            f"{where}: 'delay' is the wait of a turn after its predecessor: it needs a 'session_id'"
        )
    untimed = session is not None and obj.get("timestamp") in (None, "")
    return TraceLine(
        line=number,
        timestamp_ms=0.0 if untimed else _milliseconds(where, obj, "timestamp"),
        input_length=input_length,
        output_length=_int_field(where, obj, "output_length"),
        hash_ids=_hash_ids(where, obj.get("hash_ids"), input_length),
        input_text=text or None,
        session_id=session,
        delay_ms=None if delay in (None, "") else _milliseconds(where, obj, "delay"),
    )


def parse_trace(text: str, source: str) -> list[TraceLine]:
    """The lines of a trace's text (JSONL if it starts with `{`, else CSV), sorted by timestamp."""
    lines: list[TraceLine] = []
    if not text.strip():
        raise ConfigError(f"{source}: 'trace_file' holds no request")
    if text.lstrip().startswith("{"):
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as e:
                raise ConfigError(f"{source}:{number}: not a JSON object: {e}") from None
            lines.append(_trace_line(f"{source}:{number}", number, obj))
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = set(reader.fieldnames or ())
        missing = {"input_length", "output_length"} - header | (
            {"timestamp"} - header if "session_id" not in header else set()
        )
        if missing:
            raise ConfigError(f"{source}: the CSV header lacks {', '.join(sorted(missing))}")
        for row in reader:
            lines.append(_trace_line(f"{source}:{reader.line_num}", reader.line_num, row))
    if not lines:
        raise ConfigError(f"{source}: 'trace_file' holds no request")
    return sorted(lines, key=lambda t: t.timestamp_ms)


def trace_text(path: str | Path) -> str:
    """A trace file's text; `ConfigError` (naming the file) if it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or e
        raise ConfigError(f"{path}: 'trace_file' cannot be read: {reason}") from None


def read_trace(path: str | Path) -> list[TraceLine]:
    """A trace file's lines; `ConfigError` (naming the file) if unreadable or invalid."""
    return parse_trace(trace_text(path), str(path))


class Timed(Protocol):
    """What a replay window holds: a line, or a conversation (its first turn's timestamp)."""

    @property
    def timestamp_ms(self) -> float: ...


T = TypeVar("T", bound=Timed)


def replay_window(
    lines: Sequence[T], *, start_s: float = 0.0, duration_s: float | None = None, speed: float = 1.0
) -> list[tuple[float, T]]:
    """(seconds after the replay's start, line) of the lines (sorted by timestamp) in the window
    (module docstring)."""
    if not lines:
        return []
    t0 = lines[0].timestamp_ms
    end = math.inf if duration_s is None else start_s + duration_s
    out = []
    for t in lines:
        since = (t.timestamp_ms - t0) / 1000.0
        if start_s <= since < end:
            out.append(((since - start_s) / speed, t))
    return out
