"""The one tolerant reader of the JSON-lines files a run leaves: records, health samples, server
metrics scrapes and the simulator's truth log.

A line is one JSON object. A line that is not (a half-written last line of a killed run, a line
some other tool appended) is reported as unreadable with its number, never raised: every reader
decides what to do with it (skip and warn, or stop).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, object) for every non-blank line; object None when the line is not a JSON
    object. An absent file yields nothing."""
    path = Path(path)
    if not path.exists():
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                obj = None
            yield number, obj if isinstance(obj, dict) else None
