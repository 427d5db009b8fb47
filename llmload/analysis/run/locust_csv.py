"""Locust's `_stats.csv` / `_failures.csv`: validated reading and the cross-check with our records.

The records are the source of every figure; Locust's CSVs only serve as an independent count.
For each rung entry (type "POST", name `rung_name(rung, users)`), Locust's Request Count must equal
the number of the rung's measured records, Failure Count the number of failed ones, and
Request Count * Average Content Size (response_length = output tokens, failed requests included)
the sum of output_tokens of all of them. `_failures.csv` occurrences are compared by failure kind
(the record's outcome, looked for in Locust's Error text). Any disagreement is a warning: it means
lost records or lost events (Locust's final CSV can also be written before the last requests of a
headless run are counted). Entries of other types (the "TTFT"/"TPOT" pseudo-entries of older
runs), the warm-up entry and the "Aggregated" row are ignored. Locust's Requests/s is never used:
it divides by the whole run's duration, not the rung's.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from llmload.analysis.run.rung_tally import RungTally
from llmload.core.files.run_files import RunFiles
from llmload.core.names import REQUEST_TYPE, parse_rung_name, rung_name

STATS_COLUMNS = ("Type", "Name", "Request Count", "Failure Count", "Average Content Size")
FAILURES_COLUMNS = ("Method", "Name", "Error", "Occurrences")
UNMATCHED_KIND = "(unmatched)"

T = TypeVar("T")


class LocustCsvError(ValueError):
    """A Locust CSV file is empty or lacks a required column."""


@dataclass(frozen=True, slots=True)
class StatsEntry:
    """One rung entry of `_stats.csv`."""

    rung: int
    users: int
    request_count: int
    failure_count: int
    avg_content_size: float

    @property
    def content_total(self) -> int:
        """Request Count * Average Content Size, rounded: the sum of response_length."""
        return round(self.request_count * self.avg_content_size)


@dataclass(frozen=True, slots=True)
class FailureEntry:
    """One row of `_failures.csv` for a rung entry."""

    rung: int
    error: str
    occurrences: int


@dataclass(slots=True)
class CsvRows(Generic[T]):
    """The usable rows of a CSV file and the line numbers skipped as incomplete."""

    path: Path
    rows: list[T]
    skipped_lines: list[int]


def _read_csv(path: Path, required: Sequence[str], parse: Callable[[dict[str, str]], T | None]) -> CsvRows[T]:
    """Validate the header, then `parse` each row (None drops it). Rows with fewer fields than the
    header or with unparsable numbers (a truncated file) are skipped and their lines listed."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise LocustCsvError(f"{path}: empty file (no header row)")
        missing = [c for c in required if c not in header]
        if missing:
            raise LocustCsvError(f"{path}: missing column {', '.join(map(repr, missing))}")
        table: CsvRows[T] = CsvRows(path, [], [])
        for fields in reader:
            if not fields:
                continue
            try:
                if len(fields) < len(header):
                    raise ValueError("short row")
                parsed = parse(dict(zip(header, fields, strict=True)))
            except ValueError:
                table.skipped_lines.append(reader.line_num)
                continue
            if parsed is not None:
                table.rows.append(parsed)
    return table


def _stats_entry(row: dict[str, str]) -> StatsEntry | None:
    parsed = parse_rung_name(row["Name"])
    if row["Type"] != REQUEST_TYPE or parsed is None:
        return None
    avg = float(row["Average Content Size"])
    if not math.isfinite(avg):  # nan / inf: a damaged file, not a size
        raise ValueError(f"Average Content Size {avg}")
    return StatsEntry(
        rung=parsed[0],
        users=parsed[1],
        request_count=int(row["Request Count"]),
        failure_count=int(row["Failure Count"]),
        avg_content_size=avg,
    )


def _failure_entry(row: dict[str, str]) -> FailureEntry | None:
    parsed = parse_rung_name(row["Name"])
    if row["Method"] != REQUEST_TYPE or parsed is None:
        return None
    return FailureEntry(rung=parsed[0], error=row["Error"], occurrences=int(row["Occurrences"]))


def read_stats_csv(path: Path) -> CsvRows[StatsEntry]:
    """The rung entries of a Locust `_stats.csv`. Raises LocustCsvError naming the file (and the
    column) on an empty file or a missing column; incomplete rows are skipped and listed."""
    return _read_csv(path, STATS_COLUMNS, _stats_entry)


def read_failures_csv(path: Path) -> CsvRows[FailureEntry]:
    """The rung rows of a Locust `_failures.csv` (Method, Name, Error, Occurrences)."""
    return _read_csv(path, FAILURES_COLUMNS, _failure_entry)


def failure_kind(error: str, kinds: Iterable[str]) -> str:
    """The outcome kind named in Locust's Error text (the longest that occurs), else UNMATCHED_KIND."""
    found = [k for k in kinds if k in error]
    return max(found, key=len) if found else UNMATCHED_KIND


def _skipped_note(table: CsvRows[Any]) -> list[str]:
    if not table.skipped_lines:
        return []
    lines = ", ".join(map(str, table.skipped_lines))
    return [f"{table.path}: skipped incomplete rows (truncated file?) at lines {lines}"]


def check_stats(rungs: Sequence[RungTally], stats: CsvRows[StatsEntry]) -> list[str]:
    """Warnings where Locust's per-rung counts or token totals disagree with the records."""
    warnings = _skipped_note(stats)
    entries = {e.rung: e for e in stats.rows}
    for rung in rungs:
        label = rung_name(rung.index, rung.users)
        entry = entries.pop(rung.index, None)
        if entry is None:
            warnings.append(f"{label}: {rung.requests} records but no entry in {stats.path}")
            continue
        tokens = rung.tokens + rung.partial_tokens
        checks = [
            ("requests", rung.requests, entry.request_count),
            ("failures", rung.failures.total(), entry.failure_count),
            ("output tokens (Request Count * Average Content Size)", tokens, entry.content_total),
            ("users", rung.users, entry.users),
        ]
        warnings += [
            f"{label}: {what}: records {ours}, Locust {theirs} -> lost records or lost events"
            for what, ours, theirs in checks
            if ours != theirs
        ]
    warnings += [
        f"{rung_name(e.rung, e.users)}: {e.request_count} requests in {stats.path} but no records"
        for e in entries.values()
    ]
    return warnings


def _kinds(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items()))


def check_failures(rungs: Sequence[RungTally], failures: CsvRows[FailureEntry]) -> list[str]:
    """Warnings where Locust's failures by kind disagree with the records' outcomes."""
    warnings = _skipped_note(failures)
    by_rung: dict[int, Counter[str]] = {}
    kinds = {kind for rung in rungs for kind in rung.failures}
    for f in failures.rows:
        by_rung.setdefault(f.rung, Counter())[failure_kind(f.error, kinds)] += f.occurrences
    for rung in rungs:
        ours = rung.failures
        theirs = by_rung.pop(rung.index, Counter())
        if ours != theirs:
            warnings.append(
                f"{rung_name(rung.index, rung.users)}: failures by kind: records {_kinds(ours)}, "
                f"Locust {_kinds(theirs)} ({failures.path})"
            )
    warnings += [
        f"rung index {i}: failures {_kinds(c)} in {failures.path} but no records" for i, c in by_rung.items()
    ]
    return warnings


def cross_check(prefix: str | Path, rungs: Sequence[RungTally]) -> list[str]:
    """Warnings from `<prefix>_stats.csv` and `<prefix>_failures.csv` (each when it exists).
    A file that cannot be used (empty, missing a column) becomes a warning too."""
    warnings: list[str] = []
    files = RunFiles(Path(prefix))
    stats, failures = files.stats_csv, files.failures_csv
    try:
        if stats.exists():
            warnings += check_stats(rungs, read_stats_csv(stats))
    except LocustCsvError as exc:
        warnings.append(f"cross-check skipped: {exc}")
    try:
        if failures.exists():
            warnings += check_failures(rungs, read_failures_csv(failures))
    except LocustCsvError as exc:
        warnings.append(f"cross-check skipped: {exc}")
    return warnings
