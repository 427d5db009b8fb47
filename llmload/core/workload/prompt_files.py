"""Prompt files: their prompts (`prompt_file`) and the replies that follow them (the `replies`
form of an empirical length distribution, `llmload.core.workload.lengths`).

Formats (`prompt_format`; `auto` picks by the first character: `[` ShareGPT, `{` JSONL, else
lines):
- `lines`: one prompt per non-empty line; no replies.
- `jsonl`: objects with a non-empty string "prompt"; its reply is the object's non-empty string
  "completion" (OpenAI's prompt/completion files) or, without one, "response".
- `sharegpt`: a JSON list of {"conversations": [{"from": "human", "value": ...}, ...]}; the first
  human turn is the prompt, and its reply is the turn right after it when that turn is the
  model's (its "from" is not "human", "user" or "system") with a non-empty value (vLLM's ShareGPT
  dataset takes the second turn's text as the output in the same way).
An entry without a reply still gives its prompt; the replies are those of the entries that have
one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmload.core.checks import ConfigError
from llmload.core.schema import shown

PROMPT_FORMATS = ("auto", "lines", "jsonl", "sharegpt")
REPLY_FIELDS = ("completion", "response")  # a JSONL object's reply, the first one present
NOT_THE_MODEL = ("human", "user", "system")  # ShareGPT turns that are not a reply

Entry = tuple[str, str | None]  # (prompt, its reply or None)


def _text(value: Any) -> str | None:
    """A turn's or field's text, None when there is none (empty or blank)."""
    text = str(value or "") if not isinstance(value, dict | list) else ""
    return text if text.strip() else None


def _sharegpt(data: Any) -> list[Entry]:
    entries: list[Entry] = []
    for conv in data if isinstance(data, list) else []:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        turns = turns if isinstance(turns, list) else []
        for i, turn in enumerate(turns):
            if not (isinstance(turn, dict) and turn.get("from") == "human"):
                continue
            if not str(turn.get("value") or "").strip():
                continue
            after = turns[i + 1] if i + 1 < len(turns) else None
            reply = None
            if isinstance(after, dict) and after.get("from") not in NOT_THE_MODEL:
                reply = _text(after.get("value"))
            entries.append((str(turn["value"]), reply))
            break
    return entries


def _jsonl(lines: list[str]) -> list[Entry]:
    entries: list[Entry] = []
    for line in lines:
        obj = json.loads(line)
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and obj["prompt"].strip():
            replies = (obj.get(f) for f in REPLY_FIELDS)
            reply = next((r for r in replies if isinstance(r, str) and r.strip()), None)
            entries.append((obj["prompt"], reply))
    return entries


class _Unreadable(Exception):
    """The file cannot be read (the message says why)."""


class _Invalid(Exception):
    """The file is not valid in its format `fmt` (the message says where)."""

    def __init__(self, fmt: str, message: str) -> None:
        super().__init__(message)
        self.fmt = fmt


def _entries(path: Path, fmt: str) -> tuple[str, list[Entry]]:
    """The format (auto resolved) and the entries of a prompt file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _Unreadable(getattr(e, "strerror", None) or str(e)) from None
    if fmt == "auto":
        stripped = text.lstrip()
        fmt = "sharegpt" if stripped.startswith("[") else "jsonl" if stripped.startswith("{") else "lines"
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        if fmt == "sharegpt":
            return fmt, _sharegpt(json.loads(text))
        if fmt == "jsonl":
            return fmt, _jsonl(lines)
    except (ValueError, RecursionError) as e:
        raise _Invalid(fmt, str(e) if isinstance(e, ValueError) else "nested too deeply") from None
    return fmt, [(line, None) for line in lines]


def load_prompt_file(path: str | Path, fmt: str = "auto") -> list[str]:
    """The prompts of a file; ConfigError (naming the file and key) if unreadable or empty."""
    path = Path(path)
    try:
        fmt, entries = _entries(path, fmt)
    except _Unreadable as e:
        raise ConfigError(f"{path}: 'prompt_file' cannot be read: {e}") from None
    except _Invalid as e:
        raise ConfigError(f"{path}: 'prompt_file' is not valid {e.fmt}: {e}") from None
    if not entries:
        raise ConfigError(f"{path}: 'prompt_file' holds no prompt (format {fmt})")
    return [prompt for prompt, _ in entries]


def load_replies(source: str, key: str, path: str | Path, fmt: str = "auto") -> list[str]:
    """The replies of a prompt file (module docstring); ConfigError naming `key` and the file when
    it cannot be read, is not valid, or holds no reply."""
    path = Path(path)
    where = f"{source}: '{key}' {shown(str(path))}"
    try:
        fmt, entries = _entries(path, fmt)
    except _Unreadable as e:
        raise ConfigError(f"{source}: '{key}' cannot read {shown(str(path))}: {e}") from None
    except _Invalid as e:
        raise ConfigError(f"{where} is not valid {e.fmt}: {' '.join(str(e).split())}") from None
    replies = [reply for _, reply in entries if reply is not None]
    if not replies:
        kinds = {
            "lines": "a lines file holds prompts only",
            "jsonl": f"no object has a prompt and a {' or '.join(REPLY_FIELDS)}",
            "sharegpt": "no conversation has a model's turn after its first human turn",
        }
        raise ConfigError(f"{where} holds no reply (format {fmt}: {kinds.get(fmt, 'no replies')})")
    return replies
