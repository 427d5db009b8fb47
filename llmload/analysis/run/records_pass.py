"""One pass over a records file into a `SweepTally`: in one process, or in two for a large file.

A large file (`TWO_PROCESS_BYTES` and more, with two CPUs to use) is cut at the first line that
begins after its middle: a child process (`child` of this module, started by the caller's
`StartChild`: the commands pass `llmload.servers.python_child.PythonChild`; analysis starts no
process itself) tallies the first part and sends it back pickled on its stdout, while this
process tallies the second (the child spends ~0.3 s on its imports, this
process about as long finding the second part's place in the chunk index); then the second
tally is merged into the first (`SweepTally.merge`: per-request values concatenated in file
order, counts and histograms added). Every figure comes out as one process reading the whole
file gives it; the skipped (unreadable) lines keep their numbers in the file.

Each request id is tallied once: a line repeating an earlier record's request id (a line written
twice, a file joined to itself) is listed in `repeated`, not counted; the child sends its part's
ids back, and when the second part repeats one of them the second part is read again without
them. The pass also notes the runs the records name (`run_id`: the post-processor refuses a file
of two runs) and the lines whose chunk-index entry was damaged. When the child
fails, this process reads the first part too, and logs a warning with the child's last error
line. One process reads the file when it is small (starting a child costs ~0.3 s of imports),
when every record is kept (`keep_records`: `llmload compare`), when the caller gives no
`StartChild`, and inside a Locust process (gevent: no child processes under its loop).

Used by `llmload.analysis.run.postprocess.load_run` (the table, reports, budget and the web UI's
results tab); the records are decoded and checked by `llmload.core.files.records.iter_record_lines`,
with their chunk times from the file's chunk index when it has one
(`iter_indexed_record_lines`, `llmload.core.files.chunk_index`) unless every record is kept.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from llmload.analysis.run.rung_tally import SweepTally
from llmload.core.files.jsonl import line_start
from llmload.core.files.records import RequestRecord, iter_indexed_record_lines, iter_record_lines

_log = logging.getLogger(__name__)
TWO_PROCESS_BYTES = 64 << 20  # ~25,000 records of 256 chunks: ~0.5 s in one process


class ChildProcess(Protocol):
    """A child process a `StartChild` started."""

    def wait(self) -> tuple[int, bytes, str]:
        """Its exit code, its stdout and its last error line, once it ended."""
        ...


# starts "package.module:function", called with these arguments, in a child process
StartChild = Callable[[str, Sequence[str]], ChildProcess]


@dataclass(slots=True)
class RecordsPass:
    """What one pass over (part of) a records file found."""

    tally: SweepTally
    skipped: list[int]  # line numbers of the unreadable lines
    records: list[RequestRecord] | None  # every record, when kept
    repeated: list[int] = field(default_factory=list)  # lines repeating an earlier line's request_id
    damaged: list[int] = field(default_factory=list)  # lines whose chunk-index entry was damaged
    runs: dict[str | None, int] = field(default_factory=dict)  # run id -> its first line (None: no id)
    ids: set[str] = field(default_factory=set)  # request ids of the part's records (merged: none)


class _Once:
    """Each request id tallied once, and the runs the records name: the checks of `tally_part`,
    one set lookup a record (a file written twice, or two runs' files joined, must not count twice
    or mix two runs in one table)."""

    __slots__ = ("found", "run")

    def __init__(self, found: RecordsPass) -> None:
        self.found = found
        self.run: object = _NO_RUN  # the run id of the last record

    def first(self, lineno: int, rec: RequestRecord) -> bool:
        """Whether this is the first record with its request id (else its line is `repeated`)."""
        found = self.found
        request_id = rec.request_id
        if request_id in found.ids:
            found.repeated.append(lineno)
            return False
        found.ids.add(request_id)
        if rec.run_id != self.run:
            self.run = rec.run_id
            found.runs.setdefault(rec.run_id, lineno)
        return True


_NO_RUN = object()


def tally_file(
    path: Path,
    slo: Mapping[str, float] | None,
    *,
    itl: bool,
    keep_records: bool = False,
    processes: int | None = None,
    start_child: StartChild | None = None,
) -> RecordsPass:
    """The records of `path` tallied (`itl`: with the ITL histogram); `processes`: 1 or 2 (2 needs
    `start_child`), None to choose (module docstring). RecordFileError when the file is missing or
    unreadable."""
    size = path.stat().st_size if path.is_file() else 0
    if processes is None:
        can = start_child is not None and _cpus() >= 2 and "gevent" not in sys.modules
        processes = 2 if can and size >= TWO_PROCESS_BYTES else 1
    if processes < 2 or keep_records:
        return tally_part(path, slo, itl, keep_records=keep_records)
    if start_child is None:
        raise ValueError("tally_file: two processes need `start_child`")
    middle = line_start(path, size // 2)
    slo_json = json.dumps(dict(slo or {}))
    child = start_child(f"{__name__}:child", [str(path), str(middle), slo_json, str(int(itl))])
    second = tally_part(path, slo, itl, middle)
    returncode, sent, last = child.wait()
    try:
        first, packed = pickle.loads(sent) if returncode == 0 else (None, None)
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError):
        first, packed = None, None
    if not isinstance(first, RecordsPass):  # the child could not read it: this process does
        _log.warning(
            "the child reading the first part failed (exit %s: %s); this process reads it",
            returncode,
            last[:200],
        )
        first = tally_part(path, slo, itl, end=middle)
        packed = None
    return merge_parts(path, slo, itl, first, second, middle, None if packed is None else _unpack(packed))


def merge_parts(
    path: Path,
    slo: Mapping[str, float] | None,
    itl: bool,
    first: RecordsPass,
    second: RecordsPass,
    middle: int,
    first_ids: Collection[str] | None = None,
) -> RecordsPass:
    """The pass of the whole file from the passes (`tally_part`) of its lines before and from byte
    `middle`, as one pass gives it (`first_ids`: the first part's request ids, when its pass does
    not hold them: the child's). When the second part repeats a request id of the first (rare: a
    damaged file), it is tallied again without the first part's records. The merged pass keeps
    no request ids."""
    ids = first.ids if first_ids is None else first_ids
    if not second.ids.isdisjoint(ids):
        second = tally_part(path, slo, itl, middle, seen=set(ids))
    first.tally.merge(second.tally)
    new_runs = [run for run in second.runs if run not in first.runs]
    if second.skipped or second.repeated or second.damaged or new_runs:
        before = _count_lines(path, middle)
        first.skipped += [before + n for n in second.skipped]
        first.repeated += [before + n for n in second.repeated]
        first.damaged += [before + n for n in second.damaged]
        first.runs.update({run: before + second.runs[run] for run in new_runs})
    first.ids = set()
    return first


def _pack(ids: set[str]) -> tuple[int, str | list[str]]:
    """Request ids to send through a pipe: one string, newline-separated (a third of the cost of
    pickling the set), or a list when an id holds a newline."""
    text = "\n".join(ids)
    return len(ids), text if text.count("\n") == max(len(ids) - 1, 0) else list(ids)


def _unpack(packed: tuple[int, str | list[str]]) -> list[str]:
    count, ids = packed
    if isinstance(ids, list):
        return ids
    return ids.split("\n") if count else []


def tally_part(
    path: Path,
    slo: Mapping[str, float] | None,
    itl: bool,
    start: int = 0,
    end: int | None = None,
    *,
    keep_records: bool = False,
    seen: set[str] | None = None,
) -> RecordsPass:
    """The records of the lines that begin in the byte range [start, end) tallied, line numbers
    counted from `start`; a record whose request id an earlier line (or `seen`, which takes this
    part's ids too) holds is not tallied but listed in `repeated`."""
    tally = SweepTally(slo, itl=itl)
    kept: list[RequestRecord] | None = [] if keep_records else None
    skipped: list[int] = []
    found = RecordsPass(tally, skipped, kept, ids=set() if seen is None else seen)
    first = _Once(found).first
    if kept is not None:  # the records whole: their chunk times from their lines
        for lineno, parsed in iter_record_lines(path, start, end):
            if parsed is None:
                skipped.append(lineno)
            elif first(lineno, parsed[1]):
                tally.add(*parsed)
                kept.append(parsed[1])
        return found
    for lineno, parsed, micros in iter_indexed_record_lines(path, start, end, found.damaged):
        if parsed is None:
            skipped.append(lineno)
        elif first(lineno, parsed[1]):
            tally.add(parsed[0], parsed[1], micros)
    return found


def _count_lines(path: Path, end: int) -> int:
    """How many lines begin before byte `end` (`end`: the beginning of a line)."""
    count = 0
    with path.open("rb") as fh:
        while end > 0 and (chunk := fh.read(min(1 << 24, end))):
            count += chunk.count(b"\n")
            end -= len(chunk)
    return count


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def child(argv: list[str]) -> None:
    """The child of `tally_file`, in its own process: argv = path, end byte, slo (JSON), itl (0 or
    1); the `RecordsPass` of the file's lines before that byte and its request ids (`_pack`),
    pickled on stdout."""
    found = tally_part(Path(argv[0]), json.loads(argv[2]), argv[3] == "1", end=int(argv[1]))
    ids, found.ids = found.ids, set()
    sys.stdout.buffer.write(pickle.dumps((found, _pack(ids)), protocol=pickle.HIGHEST_PROTOCOL))
