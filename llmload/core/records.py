"""Per-request records: the schema, the durable JSONL writer and the reader.

One `RequestRecord` per request the load generator sent, written as one JSON line and flushed
(and fsync'ed by default) as soon as the request ends, so a crashed or killed run keeps every
finished request. Every figure of the sweep table and of the latency metrics is computed from
these records, never from Locust's rounded histograms.

Times are epoch seconds (`time.time()` at t0 plus `time.perf_counter()` deltas, so they are both
monotonic within a request and comparable across processes on one machine).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

OUTCOME_OK = "ok"


@dataclass(slots=True)
class RequestRecord:
    """What one request did, as the client saw it."""

    request_id: str
    rung: int  # index in the ladder (0-based); -1 for warm-up requests
    users: int  # the rung's concurrency (number of Locust users)
    phase: str  # "measure" or "warmup"
    endpoint: str  # "completions" or "chat"
    stream: bool
    max_tokens: int
    t_start: float  # t0: just before the request was sent
    t_end: float  # last message carrying `choices` (or the failure time)
    t_first: float | None = None  # first SSE message with non-empty `choices` (vLLM's TTFT)
    t_first_content: float | None = None  # first message with non-empty text/content
    prompt_tokens: int | None = None
    output_tokens: int = 0  # usage.completion_tokens, else counted (see tokens_estimated)
    tokens_estimated: bool = False  # True when the server sent no usage and tokens were counted
    chunks: int = 0  # SSE messages carrying `choices` with content
    finish_reason: str | None = None
    outcome: str = OUTCOME_OK  # "ok" or a failure kind, e.g. "http_500", "timeout", "dropped"
    error: str | None = None
    status: int | None = None  # HTTP status code, when one was received
    chunk_times: list[float] = field(default_factory=list)  # s after t_start of each content chunk
    chunk_tokens: list[int] | None = None  # tokens per content chunk, when the server reports them
    worker: str = ""  # the Locust worker (or "local") that sent it
    t_scheduled: float | None = None  # rate mode: the arrival the schedule gave it (t_start - this = wait)
    rate: float | None = None  # rate mode: the rung's target request rate (requests/s)
    stamps: str = "user"  # "kernel": message times are kernel receive stamps; "user": read times
    read_delay_ms: float | None = None  # kernel stamps: longest arrival-to-read delay of the generator
    # trace replay and multi-turn sessions (issue 16)
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache, if it says
    trace_line: int | None = None  # mode trace: the line of the trace file this request replays
    session: str | None = None  # sessions: the session id
    turn: int | None = None  # sessions: the turn (1-based); turn k resends turns 1..k-1 and their replies

    @property
    def ok(self) -> bool:
        return self.outcome == OUTCOME_OK

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class RecordWriter:
    """Appends records as JSON lines; each line is flushed (and fsync'ed) when written."""

    def __init__(self, path: Path, *, fsync: bool = True, truncate: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = self.path.open("w" if truncate else "a", encoding="utf-8")
        self._fsync = fsync

    def write(self, record: RequestRecord | dict[str, Any]) -> None:
        if self._fh is None:
            raise ValueError(f"record file {self.path} is closed")
        line = record.to_json() if isinstance(record, RequestRecord) else json.dumps(record)
        self._fh.write(line + "\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class RecordFileError(ValueError):
    """A records file is missing or holds no readable record."""


def iter_records(path: Path) -> Iterator[tuple[int, RequestRecord | None, str]]:
    """Yield (line number, record or None, raw line); None for a line that does not parse
    (for example the half-written last line of a killed run)."""
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, RequestRecord.from_dict(json.loads(line)), line
            except (ValueError, TypeError):
                yield lineno, None, line


def read_records(path: Path) -> tuple[list[RequestRecord], list[int]]:
    """All complete records of a file, and the line numbers that were skipped as unreadable."""
    path = Path(path)
    if not path.exists():
        raise RecordFileError(f"{path}: no such records file")
    records: list[RequestRecord] = []
    skipped: list[int] = []
    for lineno, rec, _ in iter_records(path):
        if rec is None:
            skipped.append(lineno)
        else:
            records.append(rec)
    return records, skipped


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    """Write a whole records file at once (fixtures, merges)."""
    writer = RecordWriter(path, fsync=False)
    try:
        for rec in records:
            writer.write(rec)
    finally:
        writer.close()
