"""The one tolerant reader of the JSON-lines files a run leaves: records, health samples, server
metrics scrapes and the simulator's truth log.

A line is one JSON object. A line that is not (a half-written last line of a killed run, a line
some other tool appended) is reported as unreadable with its number, never raised: every reader
decides what to do with it (skip and warn, or stop). Lines are decoded with orjson, several times
faster than json on a record's chunk times, and with json where orjson refuses what json accepts
(NaN, huge integers; invalid UTF-8 is replaced), so both read the same files the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


def loads(line: bytes) -> Any:
    """One JSON line (see the module docstring); ValueError when it is not JSON."""
    return decode(line)[0]


def decode(line: bytes) -> tuple[Any, bool]:
    """`loads`, and whether orjson read the line (then no number in it is infinite or NaN: orjson
    refuses those, json reads `NaN`, `Infinity` and `1e999`)."""
    try:
        return orjson.loads(line), True
    except orjson.JSONDecodeError:
        return json.loads(line.decode("utf-8", errors="replace")), False


def iter_lines(path: str | Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of every non-blank line; OSError when the file cannot be read.
    `start`, `end`: only the lines that begin in this byte range (`start` at the beginning of a
    line, see `line_start`), numbered from 1 at `start`."""
    for number, _, line in iter_lines_at(path, start, end):
        yield number, line


def iter_lines_at(
    path: str | Path, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """`iter_lines`, with each line's byte offset in the file: (line number, offset, raw line)."""
    with Path(path).open("rb", buffering=1 << 20) as fh:
        fh.seek(start)
        offset = start
        stop = math.inf if end is None else end
        for number, line in enumerate(fh, start=1):
            if offset >= stop:
                return
            if not line.isspace():  # no copy of the line, unlike strip()
                yield number, offset, line
            offset += len(line)


def line_start(path: str | Path, offset: int) -> int:
    """The byte offset of the first line that begins at or after `offset` (the file's size when
    none does)."""
    if offset <= 0:
        return 0
    with Path(path).open("rb") as fh:
        fh.seek(offset - 1)
        while chunk := fh.read(1 << 16):
            newline = chunk.find(b"\n")
            if newline >= 0:
                return offset + newline
            offset += len(chunk)
        return offset - 1


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, object) for every non-blank line; object None when the line is not a JSON
    object. An absent file yields nothing."""
    path = Path(path)
    if not path.exists():
        return
    for number, line in iter_lines(path):
        try:
            obj = loads(line)
        except (ValueError, RecursionError, OverflowError):
            obj = None
        yield number, obj if isinstance(obj, dict) else None
