"""A finished (or crashed) run's files -> the sweep rows, metrics and warnings, in one call.

One pass over the records file (`llmload.analysis.run.records_pass`: two processes for a large file):
each record is decoded, tallied into its rung's `llmload.analysis.run.rung_tally.RungTally` and
dropped, so memory grows with the rungs (and the
per-request floats and ITL histogram of each), not with the records and their chunk times. What
needs the raw records reads the file again, one record at a time (`RunResult.iter_records`): the
per-turn table and the figures per session (`llmload.analysis.sessions`) of session runs, the
server-metrics token cross-check, and the greedy-determinism check (which keeps the records of
its probes: only when the run has them).
`load_run(keep_records=True)` keeps every record (`llmload compare`'s bootstrap needs them).

Reads `<prefix>_records.jsonl` (required), `<prefix>_run.json` (the ladder's own account: which
rungs finished; optional), `<prefix>_health.jsonl` (the generator's own health: saturated rungs
are flagged; optional) and Locust's `<prefix>_stats.csv` / `_failures.csv` (cross-check;
optional). Shared by `llmload table`, `llmload sweep` and the reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llmload.analysis.identity.determinism import RungDivergence, divergence
from llmload.analysis.run.gpu_metrics import GpuMetrics, load_gpu_metrics
from llmload.analysis.run.health import flag_saturated, loop_lag_ms, read_health
from llmload.analysis.run.locust_csv import cross_check
from llmload.analysis.run.metrics import SLO_KEYS, RungMetrics
from llmload.analysis.run.production_traffic import replay_warnings
from llmload.analysis.run.records_pass import RecordsPass, StartChild, tally_file
from llmload.analysis.run.rung_tally import RungTally, SharedPrefix, sweep_rows
from llmload.analysis.run.server_metrics import ClientTokens, ServerMetrics, server_metrics_of
from llmload.analysis.run.sweep_rows import MissingRung, Rung, SweepRow, group_rungs
from llmload.analysis.sessions.figures import SessionEnds, SessionFigures, session_figures
from llmload.core.files.chunk_index import index_path
from llmload.core.files.records import RecordFileError, RequestRecord, iter_record_lines
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo, read_run_file
from llmload.core.names import DETERMINISM_PHASE, WARMUP_RUNG
from llmload.core.stats import DEFAULT_PERCENTILES


@dataclass(slots=True)
class RunResult:
    """Everything post-processing derived from one run."""

    prefix: str
    records: list[RequestRecord] | None  # every record, only with load_run(keep_records=True)
    rungs: list[RungTally]
    rows: list[SweepRow]
    metrics: list[RungMetrics] | None
    warnings: list[str]
    run_info: RunInfo | None  # the run file (<prefix>_run.json), when present and this run's
    missing: list[MissingRung] = field(default_factory=list)  # ladder rungs without any record
    divergence: list[RungDivergence] = field(default_factory=list)  # greedy-determinism check
    records_file: Path | None = None  # the records, when not at <prefix>_records.jsonl
    server: ServerMetrics | None = None  # the server's own figures, when the run scraped /metrics
    gpu: GpuMetrics | None = None  # a DCGM exporter's figures per rung, when the run asked (gpu_metrics)
    sessions: dict[int, SessionFigures] = field(default_factory=dict)  # session runs: figures by rung

    @property
    def records_path(self) -> Path:
        return RunFiles(Path(self.prefix), self.records_file).records

    def iter_records(self) -> Iterator[RequestRecord]:
        """The run's readable records, read again from its file one at a time."""
        if self.records is not None:
            yield from self.records
            return
        ids: set[str] = set()  # a repeated record once, as the pass counted it
        for _, parsed in iter_record_lines(self.records_path):
            if parsed is not None and parsed[1].request_id not in ids:
                ids.add(parsed[1].request_id)
                yield parsed[1]

    def record_rungs(self) -> list[Rung]:
        """The measured records grouped into rungs (holds every record: a bounded path for the
        consumers that resample or compare records; see the module docstring)."""
        return group_rungs(self.iter_records())


def _runs_named(runs: Mapping[str | None, int]) -> str:
    return ", ".join(f"{run or '(none)'} from line {line}" for run, line in list(runs.items())[:4])


def _check_run_file(
    info: RunInfo | None, runs: Mapping[str | None, int], path: Path
) -> tuple[RunInfo | None, str | None]:
    """The run file kept when it is the records' run's (the same run id, or none on either side:
    runs before run ids), else dropped with a warning naming both ids."""
    if info is None:
        return None, None
    theirs, ours = info.run_id, next(iter(runs), None)
    if theirs == ours:
        return info, None
    return None, (
        f"{path}: run_id {str(theirs or '(none)')[:60]} is not the records' ({ours or '(none)'}): "
        "another run's file, ignored"
    )


def unfinished_rungs(run_info: RunInfo | None) -> set[int]:
    """Rungs the ladder started but did not finish (the run was stopped or killed mid-rung)."""
    if not run_info:
        return set()
    return {s.rung for s in run_info.stages if s.finished is None and s.rung >= 0}


def missing_rungs(run_info: RunInfo | None, rungs: Sequence[RungTally]) -> list[MissingRung]:
    """The ladder's rungs (from the run file's config) that have no measured record."""
    config = run_info.recorded("rungs") if run_info is not None else None
    if run_info is None or config is None:
        return []
    started = {s.rung: s.users for s in run_info.stages}
    measured = {r.index for r in rungs}
    missing = []
    for i, value in enumerate(config.rungs):
        if i in measured:
            continue
        users = started.get(i, config.max_concurrency if config.mode == "rate" else value)
        missing.append(MissingRung(i, users if type(users) is int else 0, i in started))
    return missing


def load_run(
    prefix: str | Path | RunFiles,
    *,
    with_metrics: bool = False,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: Mapping[str, float] | None = None,
    requests_per_user: int | None = None,
    keep_records: bool = False,
    processes: int | None = None,
    start_child: StartChild | None = None,
) -> RunResult:
    """Post-process a run in one pass over its records; raises RecordFileError when there is nothing
    measured to show. `keep_records`: also keep every record in `RunResult.records`; `processes`:
    read the records in 1 or 2 processes, None to choose, 2 only with `start_child` (the commands
    pass `llmload.servers.python_child.PythonChild`; `llmload.analysis.run.records_pass`).
    `prefix`: the run's prefix, or its RunFiles (a records file named otherwise)."""
    files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
    prefix = str(files.prefix)
    records_path = str(files.records)
    info, run_warning = read_run_file(files.run)
    if slo is None:  # the run's own `slo:` from its config file (goodput's keys: itl_ms is not one)
        own = info.recorded("slo") if info else None
        given = {k: getattr(own.slo, k) for k in SLO_KEYS} if own else {}
        slo = {k: v for k, v in given.items() if v is not None}
    found = tally_file(
        Path(records_path),
        slo,
        itl=with_metrics,
        keep_records=keep_records,
        processes=processes,
        start_child=start_child,
    )
    if len(found.runs) > 1:  # two runs' records in one file: no table of them is meaningful
        raise RecordFileError(
            f"{records_path}: records of {len(found.runs)} runs (run_id {_runs_named(found.runs)}); "
            "a table is of one run: split the file by each line's run_id"
        )
    if run_warning is None:
        info, run_warning = _check_run_file(info, found.runs, files.run)
    tally, skipped = found.tally, found.skipped
    rungs = [tally.rungs[i] for i in sorted(tally.rungs)]
    if not rungs:
        raise RecordFileError(f"{records_path}: no measured records")
    rows = sweep_rows(rungs, partial_rungs=unfinished_rungs(info), requests_per_user=requests_per_user)
    flag_saturated(rows, rungs, read_health(files.health))
    server = _server_view(prefix, info, found, rows, rungs)
    metrics = [t.metrics(percentiles) for t in rungs] if with_metrics else None
    # trace replay: fell behind? (by a bar no lower than the loop's own lag, from the health above)
    warnings = cross_check(prefix, rungs) + replay_warnings(rungs, loop_lag_ms(rows))
    if skipped:
        lines = ", ".join(map(str, skipped))
        warnings.insert(0, f"{records_path}: skipped {len(skipped)} unreadable lines: {lines}")
    warnings[:0] = _integrity_warnings(found, records_path, run_warning)
    result = RunResult(
        prefix, found.records, rungs, rows, metrics, warnings, info, missing_rungs(info, rungs)
    )
    result.records_file = files.records_file
    result.server = server
    result.gpu = load_gpu_metrics(prefix, info, [(t.window, t.window_tokens()[1]) for t in rungs])
    if any(t.sessions for t in rungs):  # the figures per session (llmload.analysis.sessions)
        recorded = info.recorded("sessions") if info else None
        ends = SessionEnds.of(None if recorded is None else recorded.sessions)
        result.sessions = session_figures(result.iter_records(), ends)
    if found.tally.probe_requests:  # the greedy-determinism check's probes: compare their texts
        result.divergence = divergence(group_rungs(result.iter_records(), DETERMINISM_PHASE))
    return result


def _server_view(
    prefix: str,
    info: RunInfo | None,
    found: RecordsPass,
    rows: Sequence[SweepRow],
    rungs: Sequence[RungTally],
) -> ServerMetrics | None:
    """Each row's prefix-cache share (`RungTally.cache`, bounded by the run's shared prefix) and
    the server's own figures of its rung (`row.server`); the server's figures of the run."""
    shared = SharedPrefix.of(info.prompts if info else None)
    for row, tally in zip(rows, rungs, strict=True):
        row.cache = tally.cache(shared)
    client: dict[int, ClientTokens] = {
        t.index: t.timeline.between if t.steady else t.tokens + t.partial_tokens for t in rungs
    }
    client[WARMUP_RUNG] = found.tally.warmup_tokens
    failed = [t.index for t in rungs if t.failures]
    server = server_metrics_of(prefix, client, failed, found.tally.windows())
    if server is not None:
        by_rung = {m.rung: m for m in server.measured}
        for row in rows:
            if (m := by_rung.get(row.rung)) is not None:
                row.server = m.as_dict()
    return server


def _integrity_warnings(found: RecordsPass, records_path: str, run_warning: str | None) -> list[str]:
    """What the pass found wrong with the run's files: repeated records, a damaged chunk index,
    a run file that is not this run's."""
    out = [] if run_warning is None else [run_warning]
    if found.repeated:
        out.append(
            f"{records_path}: {len(found.repeated)} lines repeat an earlier record's request_id, "
            f"counted once: lines {_lines(found.repeated)}"
        )
    if found.damaged:
        out.append(
            f"{index_path(Path(records_path))}: {len(found.damaged)} entries fail their checksum or "
            f"disagree with their line: those records were read from their JSON lines: lines "
            f"{_lines(found.damaged)}"
        )
    return out


def _lines(numbers: Sequence[int], shown: int = 10) -> str:
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return ", ".join(map(str, numbers[:shown])) + more
