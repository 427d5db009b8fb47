"""Per-request records: the schema, the durable JSONL writer and the reader.

One `RequestRecord` per request the load generator sent, written as one JSON line and flushed
(and fsync'ed by default) as soon as the request ends, so a crashed or killed run keeps every
finished request. Every figure of the sweep table and of the latency metrics is computed from
these records, never from Locust's rounded histograms.

Times are epoch seconds on the master's clock (`llmload.core.clock.wall()` at t0 plus
`time.perf_counter()` deltas, so they are both monotonic within a request and comparable across
processes and workers' machines).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, Field, dataclass, field, fields, make_dataclass
from operator import itemgetter
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from llmload.core.files.chunk_index import DAMAGED, MAGIC, ChunkIndex, index_path, last_micros
from llmload.core.files.chunk_index import entry as index_entry
from llmload.core.files.jsonl import decode, iter_lines, iter_lines_at

OUTCOME_OK = "ok"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one request did, as the client saw it. Immutable: built once, complete, by the client
    (`llmload.loadgen.request.client`) or the reader; `new_record` builds one at a plain class's cost.
    The fields are written in this order (JSON lines keyed by name: the reader takes any order)."""

    # identity: which request, of which rung (required, as are the request asked and its times)
    request_id: str
    rung: int  # index in the ladder (0-based); -1 for warm-up requests
    users: int  # the rung's concurrency (number of Locust users)
    phase: str  # "measure" or "warmup"
    # the request asked
    endpoint: str  # "completions", "chat" or "responses"
    stream: bool
    max_tokens: int
    # timing
    t_start: float  # t0: just before the request was sent
    t_end: float  # last message carrying `choices` (or the failure time)
    t_first: float | None = None  # first SSE message with non-empty `choices` (vLLM's TTFT)
    t_first_content: float | None = None  # first message with answer text (not reasoning): TTFO
    t_first_reasoning: float | None = None  # first message with reasoning text (a reasoning model)
    t_first_tool_call: float | None = (
        None  # first message with a piece of a tool call (its name or arguments)
    )
    chunk_times: list[float] = field(default_factory=list)  # s after t_start of each content chunk
    t_scheduled: float | None = None  # rate mode: the arrival the schedule gave it (t_start - this = wait)
    stamps: str = "user"  # "kernel": message times are kernel receive stamps; "user": read times
    read_delay_ms: float | None = None  # kernel stamps: longest arrival-to-read delay of the generator
    # kernel stamps: chunks that shared a read with a later message (the generator read late), and
    # for each the most its time may be late, ms; the same for t_first (llmload.loadgen.stream.sse.feed_read)
    uncertain_chunks: list[int] | None = None
    uncertain_ms: list[float] | None = None
    ttft_uncertain_ms: float | None = None
    # tokens: asked and sent
    prompt_tokens_asked: int | None = None  # synthetic prompts: this request's asked (drawn) length
    prompt_tokens: int | None = None  # usage.prompt_tokens
    output_tokens: int = 0  # usage.completion_tokens, else counted (see tokens_estimated)
    tokens_estimated: bool = False  # True when the server sent no usage and tokens were counted
    chunks: int = 0  # SSE messages carrying `choices` with content
    chunk_tokens: list[int] | None = None  # tokens per content chunk, when the server reports them
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache, if it says
    # reasoning (llmload.loadgen.stream.reasoning): None when the server neither counted nor streamed any
    reasoning_tokens: int | None = None  # the server's count (completion_tokens_details), else counted
    reasoning_counted: bool = False  # True when the server gave no count: counted from the chunks
    # tool calls (llmload.loadgen.stream.tool_calls): None when the reply made none
    tool_calls: int | None = None  # the calls the reply made (parallel calls: more than one)
    tool_calls_invalid: int | None = None  # of them, calls whose arguments are not a JSON object
    # outcome
    finish_reason: str | None = None
    outcome: str = OUTCOME_OK  # "ok" or a failure kind, e.g. "http_500", "timeout", "dropped"
    error: str | None = None
    status: int | None = None  # HTTP status code, when one was received
    odd_stream: str | None = None  # odd things in a stream that did not fail it, space-separated names
    # connection (llmload.loadgen.transport.connections): None in records of older runs
    conn_reused: bool | None = None  # sent on a connection an earlier request of the user opened
    connect_ms: float | None = None  # new connection: name lookup + TCP connect (inside TTFT)
    handshake_ms: float | None = None  # new connection: TCP handshake, kernel-timed
    tls_ms: float | None = None  # new TLS connection: the handshake (inside TTFT)
    reconnect: str | None = None  # why a new one replaced the user's: closed/expired/resent/error
    conn_port: int | None = None  # the client's local port: names the connection (the server sees it as peer)
    # greedy-determinism check (llmload.analysis.identity.determinism); None when it is off
    prompt_hash: str | None = None  # BLAKE2b-64 of the prompt sent, hex
    text_hash: str | None = None  # BLAKE2b-64 of the generated answer text, hex
    reasoning_hash: str | None = None  # BLAKE2b-64 of the reasoning text, hex; None: no reasoning text
    tool_hash: str | None = None  # BLAKE2b-64 of the tool calls' names and arguments, hex; None: no call
    chunk_hashes: str | None = None  # 16 bits of CRC-32 of each content chunk's text, 4 hex digits each
    text: str | None = None  # the generated text, with `record_text: true`
    # tools and structured output (llmload.loadgen.request.reply_check)
    structured: bool = False  # it carried tools or a response_format: its reply stops on its own
    reply_valid: bool | None = None  # response_format: the answer parsed and fit its schema; None: unchecked
    # trace replay and multi-turn sessions
    trace_line: int | None = None  # mode trace: the line of the trace file this request replays
    # sessions (llmload.loadgen.workload.sessions) and conversation traces: the conversation's id;
    # a top-level id has no "/", a sub-agent's is `<parent id>/<k>` (k 1-based)
    session: str | None = None
    turn: int | None = None  # the turn (1-based) within `session`; it resends turns 1..turn-1
    parent_session: str | None = None  # a sub-agent's turn: its parent's session; None: top level
    # the wait before this turn, over [t_start - tool_wait_s, t_start]: agent sessions, the drawn
    # tool latency; a conversation trace, its recorded wait after the predecessors ended (tool,
    # think). None when the turn followed no tool (the first turn, a user's turn, or a fan-out:
    # its sub-agents are model work, recorded as their own requests)
    tool_wait_s: float | None = None
    # the rung and run that sent it
    rate: float | None = None  # rate mode: the rung's target request rate (requests/s)
    worker: str = ""  # the Locust worker (or "local") that sent it
    # the worker's clock minus the master's when it was sent (llmload.core.clock): its times are on
    # the master's clock; its raw ones are each time + clock_offset_ms / 1000. None: offset 0
    clock_offset_ms: float | None = None
    run_id: str | None = None  # the run that wrote it (one per run, set by the master); None: older runs

    @property
    def ok(self) -> bool:
        return self.outcome == OUTCOME_OK

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def ttft_s(self) -> float | None:
        """None without a first token, and for a non-streamed request (one body: its arrival is
        the end of the request, not a time to first token)."""
        return None if self.t_first is None or not self.stream else self.t_first - self.t_start

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_json(self) -> str:
        return encode_json(self).decode()

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, times_checked: bool = False) -> RequestRecord:
        """A record from its JSON object; TypeError when it is not an object, lacks a required field
        or holds a field of the wrong type (unknown fields are ignored). `times_checked`: the
        `chunk_times` list is known to hold finite numbers only (`parse_record` read its text)."""
        if not isinstance(data, dict):
            raise TypeError(f"a record is a JSON object, got {type(data).__name__}")
        plan = _plan_of(data)
        if plan is not None:
            values = tuple(data.values())
            if plan.fits(values, times_checked):
                if plan.arguments is not None:  # positional: keywords orjson did not intern cost more
                    record = _Draft(*plan.arguments(values + _DEFAULTS))  # new_record, inlined
                    record.__class__ = RequestRecord
                    return record
                return new_record(**{k: v for k, v in data.items() if k in _ANNOTATIONS})
        known = {}
        for name, value in data.items():
            if name not in _ANNOTATIONS:
                continue  # not a field
            if not _field_ok(name, value):
                raise TypeError(f"record field {name!r} is not {_ANNOTATIONS[name]}: {value!r:.40}")
            known[name] = value
        return new_record(**known)


def _draft_class() -> type:
    """RequestRecord without its frozen guard: the same fields, so the same slots in the same order
    (an instance may become a RequestRecord by `__class__` assignment, which checks the layout)."""
    specs: list[tuple[str, Any, Any]] = []
    for f in fields(RequestRecord):
        default: Any = field()
        if f.default is not MISSING:
            default = field(default=f.default)
        elif f.default_factory is not MISSING:
            default = field(default_factory=f.default_factory)
        specs.append((f.name, f.type, default))
    return make_dataclass("_RecordDraft", specs, slots=True, eq=False, repr=False, match_args=False)


_Draft: Callable[..., RequestRecord] = _draft_class()  # typed as what its instances become

if TYPE_CHECKING:
    new_record = RequestRecord
else:

    def new_record(*args: Any, **kwargs: Any) -> RequestRecord:
        """`RequestRecord(...)`, at the cost of a mutable record: a frozen dataclass's `__init__`
        sets each field through `object.__setattr__`, which costs several times a plain store, and
        the reader builds a record per line (docs/postprocessing.md). The draft is never seen
        mutable: it becomes the frozen class before anyone holds it."""
        record = _Draft(*args, **kwargs)
        record.__class__ = RequestRecord
        return record


# --- bad input: a line of another shape is skipped as unreadable, never a crash later -------------
# Each field's annotation as the JSON types it accepts; a float must be finite, a list's items are
# checked by `_LIST_ITEMS`. A field whose annotation names no type here is not checked.
_JSON_TYPES: dict[str, frozenset[type]] = {
    "int": frozenset({int}),  # type(True) is bool: a boolean is no int here
    "float": frozenset({int, float}),
    "bool": frozenset({bool}),
    "str": frozenset({str}),
    "list[float]": frozenset({list}),
    "list[int]": frozenset({list}),
    "None": frozenset({type(None)}),
}
_LIST_ITEMS = {"list[float]": frozenset({int, float}), "list[int]": frozenset({int})}


def _accepted(annotation: str) -> frozenset[type] | None:
    kinds = [k.strip() for k in annotation.split("|")]
    if not all(k in _JSON_TYPES for k in kinds):
        return None
    return frozenset().union(*(_JSON_TYPES[k] for k in kinds))


_ANNOTATIONS = {f.name: str(f.type) for f in fields(RequestRecord)}
_ACCEPTED = {name: _accepted(annotation) for name, annotation in _ANNOTATIONS.items()}
_ITEMS = {name: items for name, a in _ANNOTATIONS.items() for k, items in _LIST_ITEMS.items() if k in a}


def _field_ok(name: str, value: Any) -> bool:
    """Whether `value` fits the field `name` (see _JSON_TYPES)."""
    accepted = _ACCEPTED[name]
    if accepted is None:
        return True
    kind = type(value)
    if kind not in accepted:
        return False
    if kind is float:
        return math.isfinite(value)
    if kind is list:  # items of the accepted types, none inf or nan (a finite sum: none)
        return set(map(type, value)) <= _ITEMS[name] and (
            math.isfinite(sum(value)) or all(map(math.isfinite, value))
        )
    return True


@dataclass(frozen=True, slots=True)
class _Plan:
    """The checks left for records with one shape (the same keys, in order, holding values of the
    same types, all accepted by their fields): finite floats and list items. A record that does not
    fit takes the field-by-field check, which names the bad field."""

    floats: Callable[[tuple[Any, ...]], Any] | None  # picks the float values
    lists: tuple[tuple[int, frozenset[type]], ...]  # position of each list, its item types
    times: int | None  # position of the chunk_times list
    # picks the record's arguments, in field order, from the values followed by `_DEFAULTS`; None
    # when a field without a plain default is missing (a required one, or chunk_times: a new list)
    arguments: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None

    def fits(self, values: tuple[Any, ...], times_checked: bool = False) -> bool:
        """Whether a record of this shape, with these values (in key order), is a record."""
        if self.floats is not None:
            picked = self.floats(values)
            if not math.isfinite(sum(picked) if isinstance(picked, tuple) else picked):
                return False
        for i, items in self.lists:
            if times_checked and i == self.times:
                continue
            v = values[i]
            if not (set(map(type, v)) <= items and math.isfinite(sum(v) if v else 0)):
                return False
        return True


def _plain_default(f: Field[Any]) -> Any:
    return f.default if f.default is not MISSING else _NO_DEFAULT


_NO_DEFAULT = object()
_FIELDS = fields(RequestRecord)
_DEFAULTS = tuple(map(_plain_default, _FIELDS))  # a field's default; _NO_DEFAULT: required or a factory's


def _arguments(keys: list[str]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
    """The picker of `_Plan.arguments` for records with these keys, in this order."""
    at = {k: i for i, k in enumerate(keys)}
    picks = [at[f.name] if f.name in at else len(keys) + i for i, f in enumerate(_FIELDS)]
    if any(p >= len(keys) and _DEFAULTS[p - len(keys)] is _NO_DEFAULT for p in picks):
        return None
    return itemgetter(*picks)


_PLANS: dict[tuple[Any, ...], _Plan | None] = {}
_UNKNOWN = _Plan(None, (), None, None)  # not in _PLANS
_MAX_PLANS = 1024  # record shapes remembered (a run has a few; a fuzzed file has many)


def _plan_of(data: dict[str, Any]) -> _Plan | None:
    """The plan of records shaped like `data`; None when a value's type is not its field's."""
    shape = (*data, *map(type, data.values()))
    known = _PLANS.get(shape, _UNKNOWN)  # one lookup: a tuple's hash is not cached
    if known is not _UNKNOWN:
        return known
    floats, lists, times, plan = [], [], None, None
    for i, (name, value) in enumerate(data.items()):
        accepted = _ACCEPTED.get(name, frozenset())
        if name not in _ANNOTATIONS or accepted is None:
            continue
        if type(value) not in accepted:
            break
        if type(value) is float:
            floats.append(i)
        elif type(value) is list:
            lists.append((i, _ITEMS[name]))
            times = i if name == "chunk_times" else times
    else:
        plan = _Plan(
            itemgetter(*floats) if floats else None,
            tuple(lists),
            times,
            _arguments(list(data)),
        )
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[shape] = plan
    return plan


def new_run_id() -> str:
    """A run's id, made once at its start (`RequestRecord.run_id`, the run file's `run_id`): its
    UTC start time, readable when a file holding two runs is named, and 32 random bits."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


def encode_json(data: Any, *, newline: bool = False) -> bytes:
    """A record (or any JSON line a run writes) as compact JSON: orjson, or json for a value orjson
    cannot encode (a numpy number). orjson writes a NaN as null, and a `RequestRecord` as its
    fields in order, the bytes of its `to_dict()`."""
    try:
        return orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE if newline else None)
    except TypeError:
        if isinstance(data, RequestRecord):
            data = data.to_dict()
        return json.dumps(data, separators=(",", ":")).encode() + (b"\n" if newline else b"")


class RecordWriter:
    """Appends records as JSON lines (`encode_json`: orjson, since the master writes one per
    request and json's encoder is the slower by far: docs/generator-cost.md), each flushed (and
    fsync'ed if asked); with `chunk_index`, each record's chunk times into the file's index too
    (`llmload.core.files.chunk_index`), after its line."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = True,
        truncate: bool = False,
        chunk_index: bool = False,
        exclusive: bool = False,
    ) -> None:
        """`exclusive`: the file is this writer's alone while it is open (an advisory lock, taken
        before anything in the file is truncated): another writer asking for it too gets
        `FileInUse` (two runs writing one records file would interleave their lines)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] | None = self.path.open("ab")  # "ab" truncates nothing before the lock
        if exclusive:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._fh.close()
                raise FileInUse(
                    f"{self.path}: being written by another run; give this run another file"
                ) from None
        if truncate:
            self._fh.truncate(0)
        self._offset = self._fh.seek(0, os.SEEK_END)
        self._fsync = fsync
        self._index: IO[bytes] | None = None
        if chunk_index:
            index = index_path(self.path)
            fresh = truncate or self._offset == 0 or not index.exists()  # no stale entries of a removed file
            self._index = index.open("wb" if fresh else "ab")
            if self._index.tell() == 0:
                self._index.write(MAGIC)

    def write(self, record: RequestRecord | dict[str, Any]) -> None:
        if self._fh is None:
            raise ValueError(f"record file {self.path} is closed")
        line = encode_json(record, newline=True)  # a record as itself: no dict on the way
        with naming(self.path):
            self._fh.write(line)
            self._fh.flush()
            if self._fsync:
                os.fsync(self._fh.fileno())
        if self._index is not None:
            times = record.chunk_times if isinstance(record, RequestRecord) else record.get("chunk_times")
            with naming(index_path(self.path)):
                self._index.write(index_entry(self._offset, len(line), times))
                self._index.flush()  # after the line: the index is never older than the records
        self._offset += len(line)

    def close(self) -> None:
        """Close the files; an OSError names the file whose last bytes could not be written (the
        other is closed all the same)."""
        files = [(self._fh, self.path), (self._index, index_path(self.path))]
        self._fh = self._index = None
        failed: OSError | None = None
        for fh, path in files:
            if fh is None:
                continue
            try:
                with naming(path):
                    fh.close()
            except OSError as e:
                failed = failed or e
        if failed is not None:
            raise failed


def being_written(path: Path) -> bool:
    """Whether a run is writing the records file at `path` now (its writer holds the file's lock:
    `RecordWriter(exclusive=True)`)."""
    try:
        with Path(path).open("rb") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except OSError:
        return False
    return False


class FileInUse(ValueError):
    """A file another process is writing (its lock is held): one line naming it."""


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError raised inside names `path` (a write's error says only the errno)."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


class RecordFileError(ValueError):
    """A records file is missing or holds no readable record."""


def parse_record(line: bytes) -> tuple[dict[str, Any], RequestRecord] | None:
    """One line of a records file as (its JSON object, its record); None when it is not a record."""
    try:
        data, strict = decode(line)
        return data, RequestRecord.from_dict(data, times_checked=strict and times_are_numbers(line))
    except (ValueError, TypeError, RecursionError, OverflowError):  # not JSON, not a record, too deep
        return None


# --- the chunk times checked on the line's text (building them as objects is most of a read) ------
_TIMES_KEY = b'"chunk_times"'
_NOT_IN_NUMBERS = (b"u", b"a", b'"', b"[", b"{")  # see times_are_numbers


def times_are_numbers(line: bytes) -> bool:
    """Whether the `chunk_times` list of this JSON line, read by orjson (which refuses infinite and
    NaN numbers), holds numbers only; False when the text does not say so plainly (then the items
    are checked one by one). Sound because: without a backslash no string holds a quote, so
    `"chunk_times":` is a key, and the line's only one (none before it, none among numbers, none
    after the list) is the record's own; up to the first `]` after its `[` there is no string
    (`"`), list or object (`[`, `{`), `true` or `null` (`u`) and no `false` (`a`), so that `]`
    closes the list and every item is a number."""
    if b"\\" in line:
        return False
    at = line.find(_TIMES_KEY)
    if at < 0:
        return False
    start = at + len(_TIMES_KEY)
    if line.startswith(b":[", start):
        start += 2
    elif line.startswith(b": [", start):
        start += 3
    else:
        return False
    end = line.find(b"]", start)
    if end < 0:
        return False
    find = line.find
    for byte in _NOT_IN_NUMBERS:
        if find(byte, start, end) >= 0:
            return False
    return find(_TIMES_KEY, end) < 0


class IndexMismatch(Exception):
    """A line's `chunk_times` list disagrees with the index entry written with it (an edited or
    damaged index): the line is decoded in full."""


def parse_indexed_record(
    line: bytes, count: int, micros: bytes
) -> tuple[dict[str, Any], RequestRecord] | None:
    """The record of a line whose chunk times its index entry holds (`llmload.core.files.chunk_index`:
    `count` times, as int32 `micros`), decoded without them: its `chunk_times` is left empty.
    The entry was written with this line (same offset and length, an index not older than the
    file), so the line is `RecordWriter`'s JSON of a record whose times are finite numbers: its
    first `"chunk_times":[` is a key (in a JSON string a quote follows a backslash) and its list
    ends at the first `]`. The last time must be the entry's last, an empty list an entry
    without times, and the key the record's own (its list is the one left empty). None
    otherwise, when the record has `chunk_tokens` (their use needs the times) or when it is not
    a record: then `parse_record`; IndexMismatch when the line's list does not hold the entry's
    number of times or its last time is not the entry's."""
    at = line.find(_INDEXED_KEY)
    end = line.find(b"]", at)
    if at < 0 or end < 0:
        return None
    start = at + len(_INDEXED_KEY)
    if count:
        try:
            last = round(float(line[line.rfind(b",", start, end) + 1 if count > 1 else start : end]) * 1e6)
        except (ValueError, OverflowError):  # the list holds fewer, or more, times than the entry
            raise IndexMismatch from None
        if last != last_micros(micros):
            raise IndexMismatch
    elif end != start:
        raise IndexMismatch
    try:
        data = orjson.loads(line[:start] + line[end:])
        if type(data) is not dict or data.get("chunk_times") != [] or data.get("chunk_tokens") is not None:
            return None
        return data, RequestRecord.from_dict(data, times_checked=True)
    except (ValueError, TypeError, RecursionError, OverflowError):
        return None


_INDEXED_KEY = b'"chunk_times":['


def iter_record_lines(
    path: Path, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, tuple[dict[str, Any], RequestRecord] | None]]:
    """Yield (line number, (JSON object, record) or None) for each non-blank line, one at a time;
    None for a line that does not parse (for example the half-written last line of a killed run).
    RecordFileError when the file is missing or cannot be read. `start`, `end`: a byte range of
    whole lines, numbered from 1 at `start` (`llmload.core.files.jsonl.iter_lines`)."""
    with _reading(path):
        for lineno, line in iter_lines(path, start, end):
            yield lineno, parse_record(line)


def iter_indexed_record_lines(
    path: Path, start: int = 0, end: int | None = None, damaged: list[int] | None = None
) -> Iterator[tuple[int, tuple[dict[str, Any], RequestRecord] | None, bytes | None]]:
    """`iter_record_lines` with each record's chunk times from the file's index when it has one
    for the line (`llmload.core.files.chunk_index`): (line number, parsed, int32 microseconds); then
    the record's `chunk_times` is empty and the microseconds are its times. None for the lines the
    index does not hold: their records hold their times. `damaged` gets the number of each line
    whose entry fails its checksum or disagrees with the line (that line is decoded in full)."""
    index = ChunkIndex.open(Path(path), start)
    if index is None:
        for lineno, parsed in iter_record_lines(path, start, end):
            yield lineno, parsed, None
        return
    with _reading(path):
        try:
            for lineno, offset, line in iter_lines_at(path, start, end):
                entry = index.micros(offset, len(line))
                try:
                    if entry is DAMAGED:
                        raise IndexMismatch
                    if entry is not None and (parsed := parse_indexed_record(line, *entry)) is not None:
                        yield lineno, parsed, entry[1]
                        continue
                except IndexMismatch:
                    if damaged is not None:
                        damaged.append(lineno)
                yield lineno, parse_record(line), None
        finally:
            index.close()


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """RecordFileError when the records file is missing or cannot be read."""
    if not Path(path).exists():
        raise RecordFileError(f"{path}: no such records file")
    try:
        yield
    except OSError as e:  # a folder, no permission
        raise RecordFileError(f"{path}: cannot read the records file: {e.strerror or e}") from None


def iter_records(path: Path) -> Iterator[tuple[int, RequestRecord | None]]:
    """Yield (line number, record or None); None for a line that is not a record."""
    for lineno, parsed in iter_record_lines(path):
        yield lineno, None if parsed is None else parsed[1]


def read_records(path: Path) -> tuple[list[RequestRecord], list[int]]:
    """All complete records of a file, and the line numbers that were skipped as unreadable."""
    records: list[RequestRecord] = []
    skipped: list[int] = []
    for lineno, parsed in iter_record_lines(path):
        if parsed is None:
            skipped.append(lineno)
        else:
            records.append(parsed[1])
    return records, skipped


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    """Write a whole records file at once (fixtures, merges)."""
    writer = RecordWriter(path, fsync=False, chunk_index=True)
    try:
        for rec in records:
            writer.write(rec)
    finally:
        writer.close()
