"""A soak run judged from its files: windows, drift, thresholds and the verdict.

Windows. The soak's measured rung starts at t0 (the common start time of its users, from
`<prefix>_run.json`; else the earliest measured request start). Window i covers request END times
in [t0 + i*W, t0 + (i+1)*W), W = `soak.window_s`. Only full windows count: up to t0 + duration
for a finished run, up to the latest request end for a running or crashed one. Requests ending
after the last full window (the drain after the deadline, or an unfinished window) are the tail,
left out of every figure. Per window:
- agg_tok/s = output tokens of the completed requests that ended in the window / W;
- TTFT and TPOT p50/p99 (ms) over the completed requests that ended in it (vLLM definitions, as
  `llmload.analysis.run.metrics`; linear-interpolation percentiles from raw values);
  each window is a `llmload.analysis.run.rung_tally.RungTally` of its requests, the post-processor's
  one implementation of these figures, fed by the same streaming reader;
- requests and failures that ended in it;
- the load generator's own CPU (sum over its processes of each one's mean, % of one core), RSS
  (sum of each process's maximum, MB) and event-loop lag (maximum, ms) from `<prefix>_health.jsonl`
  samples taken in the window, when that file exists (else empty).

Levels (over all full windows): agg tok/s = tokens of requests completed in the windows / (n * W);
p99 TTFT and TPOT over their completed requests; failure ratio = failed / all requests in them.

Drift. Least-squares line through the windows' agg tok/s and through their TTFT p50 (the median is
not moved by a lone timeout) against the window mid-times, leaving out the first `settle_windows`
(ramp-up). Slope and its `confidence` interval (Student t on the slope's standard error) are
expressed in per cent of the series mean per hour. A drift limit is breached only when the WHOLE
interval is beyond it (tok/s interval entirely below -limit, TTFT interval entirely above +limit):
noise widens the interval and cannot raise an alarm. An interval that straddles the limit is
"inconclusive": not a breach, reported so the next run can be longer or use wider windows.

Verdict and exit code (`llmload.core.exit_codes`): "breached" (1) when any threshold is breached;
"incomplete" (4, interrupted) when none is but the run stopped before its duration; "not_run" (2)
when there is no full window to judge; else "pass" (0).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmload.analysis.run.health import read_health
from llmload.analysis.run.rung_tally import RungTally
from llmload.analysis.soak.drift import Trend, fit_trend
from llmload.core import exit_codes
from llmload.core.config import ConfigError, SoakConfig, SweepConfig, load_config
from llmload.core.files.records import RecordFileError, iter_indexed_record_lines
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo, RunStage, read_run_info
from llmload.core.stats import percentile

# the soak verdict in the common exit codes (llmload.core.exit_codes): a breach is a failure
EXIT_PASS, EXIT_BREACHED, EXIT_NOT_RUN = exit_codes.OK, exit_codes.REQUEST_FAILURES, exit_codes.BAD_INPUT
PASS, BREACHED, INCONCLUSIVE, SKIPPED = "pass", "breached", "inconclusive", "skipped"
HOUR_S = 3600.0
MIN_DRIFT_WINDOWS = 3


@dataclass(slots=True)
class SoakWindow:
    """One window's figures (see the module docstring); latencies in ms, None without values."""

    index: int
    start: float  # epoch seconds
    end: float
    tally: RungTally = field(default_factory=lambda: RungTally(-1, 0, itl=False))  # its requests
    gen_cpu_pct: float | None = None
    gen_rss_mb: float | None = None
    gen_lag_ms: float | None = None

    @property
    def requests(self) -> int:
        return self.tally.requests

    @property
    def failures(self) -> int:
        return self.tally.failures.total()

    @property
    def tokens(self) -> int:
        return self.tally.tokens

    @property
    def ttft_ms(self) -> Sequence[float]:
        return self.tally.ttfts_ms

    @property
    def tpot_ms(self) -> Sequence[float]:
        return self.tally.tpots_ms

    @property
    def agg_tok_s(self) -> float:
        return self.tokens / (self.end - self.start)

    def pct(self, metric: str, q: float) -> float | None:
        values = self.ttft_ms if metric == "ttft" else self.tpot_ms
        return percentile(values, q) if values else None

    def row(self, t0: float) -> dict[str, Any]:
        """The window as one CSV/JSON row."""
        return {
            "window": self.index,
            "start_s": self.start - t0,
            "end_s": self.end - t0,
            "requests": self.requests,
            "failures": self.failures,
            "tokens": self.tokens,
            "agg_tok_s": self.agg_tok_s,
            "ttft_p50_ms": self.pct("ttft", 50),
            "ttft_p99_ms": self.pct("ttft", 99),
            "tpot_p50_ms": self.pct("tpot", 50),
            "tpot_p99_ms": self.pct("tpot", 99),
            "gen_cpu_pct": self.gen_cpu_pct,
            "gen_rss_mb": self.gen_rss_mb,
            "gen_lag_ms": self.gen_lag_ms,
        }


@dataclass(frozen=True, slots=True)
class Drift:
    """A metric's trend over the windows, in % of its mean per hour."""

    metric: str  # "tok_s" or "ttft"
    windows: int  # windows in the fit
    pct_per_h: float | None
    low: float | None
    high: float | None
    trend: Trend | None  # in the metric's unit per second since t0


@dataclass(frozen=True, slots=True)
class Check:
    """One threshold: its limit, what was observed and the outcome (pass/breached/inconclusive/skipped)."""

    name: str  # the soak config key
    limit: float
    observed: float | None
    status: str
    detail: str


@dataclass(slots=True)
class SoakReport:
    prefix: str
    soak: SoakConfig
    t0: float
    duration: float | None
    finished: bool  # the run reached its duration (run file says finished)
    windows: list[SoakWindow]
    tail_requests: int
    drifts: dict[str, Drift]
    checks: list[Check]
    status: str
    exit_code: int
    reasons: list[str]
    warnings: list[str]

    @property
    def breached(self) -> list[str]:
        return [c.name for c in self.checks if c.status == BREACHED]

    def level(self, name: str) -> float | None:
        """Whole-run levels over the full windows: agg_tok_s, ttft_p99_ms, tpot_p99_ms, failure_ratio."""
        w = self.windows
        if not w:
            return None
        if name == "agg_tok_s":
            return sum(x.tokens for x in w) / (len(w) * self.soak.window_s)
        if name == "failure_ratio":
            requests = sum(x.requests for x in w)
            return sum(x.failures for x in w) / requests if requests else None
        values = [v for x in w for v in (x.ttft_ms if name == "ttft_p99_ms" else x.tpot_ms)]
        return percentile(values, 99) if values else None

    def summary(self) -> dict[str, Any]:
        """The machine-readable summary (`<prefix>_soak.json`)."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "breached": self.breached,
            "reasons": self.reasons,
            "prefix": self.prefix,
            "t0": self.t0,
            "duration_s": self.duration,
            "finished": self.finished,
            "window_s": self.soak.window_s,
            "windows": len(self.windows),
            "tail_requests": self.tail_requests,
            "levels": {
                k: self.level(k) for k in ("agg_tok_s", "ttft_p99_ms", "tpot_p99_ms", "failure_ratio")
            },
            "drift": {
                k: {"pct_per_h": d.pct_per_h, "ci_low": d.low, "ci_high": d.high, "windows": d.windows}
                for k, d in self.drifts.items()
            },
            "confidence": self.soak.confidence,
            "checks": [
                {
                    "name": c.name,
                    "limit": c.limit,
                    "observed": c.observed,
                    "status": c.status,
                    "detail": c.detail,
                }
                for c in self.checks
            ],
            "warnings": self.warnings,
        }


# --- reading the files ----------------------------------------------------------------------------
def _measured_stage(info: RunInfo | None) -> RunStage | None:
    stages = [s for s in (info.stages if info else ()) if s.rung >= 0]
    return stages[0] if stages else None


def run_soak_config(prefix: str, info: RunInfo | None, config_path: str | None) -> SweepConfig:
    """The run's configuration: `config_path` if given, else the one recorded in the run file."""
    if config_path:
        return load_config(config_path)
    if info is None or not info.has_config:
        run_file = RunFiles(Path(prefix)).run
        raise ConfigError(f"{run_file}: missing or unreadable; name the soak config with --config")
    # only the keys a soak report needs, so other sections of a newer or older run file do not matter
    return info.sweep_config(("mode", "rungs", "duration", "soak"))


def _fill_windows(
    records_path: Path, t0: float, window_s: float, end: float | None
) -> tuple[dict[int, SoakWindow], float | None, int]:
    """Per-window accumulators of every measured record ending after t0, the latest end, skipped lines."""
    windows: dict[int, SoakWindow] = {}
    last_end: float | None = None
    skipped = 0
    for _, parsed, micros in iter_indexed_record_lines(records_path):
        if parsed is None:
            skipped += 1
            continue
        data, rec = parsed
        if rec.phase != "measure" or rec.t_end < t0:
            continue
        last_end = rec.t_end if last_end is None else max(last_end, rec.t_end)
        i = int((rec.t_end - t0) // window_s)
        if end is not None and rec.t_end >= end:
            i = -1  # the tail
        w = windows.get(i)
        if w is None:
            w = windows[i] = SoakWindow(i, t0 + i * window_s, t0 + (i + 1) * window_s)
        w.tally.add(rec, data, micros)
    return windows, last_end, skipped


def _first_start(records_path: Path) -> float | None:
    starts = (
        parsed[1].t_start
        for _, parsed, _ in iter_indexed_record_lines(records_path)
        if parsed is not None and parsed[1].phase == "measure"
    )
    return min(starts, default=None)


def attach_health(windows: Iterable[SoakWindow], samples: list[dict[str, Any]]) -> None:
    """Per window: summed per-process mean CPU %, summed per-process max RSS (MB), max lag (ms)."""
    by_window: dict[int, list[dict[str, Any]]] = defaultdict(list)
    wins = list(windows)
    if not wins:
        return
    t0, width = wins[0].start, wins[0].end - wins[0].start
    for s in samples:
        by_window[int((s["t"] - t0) // width)].append(s)
    for w in wins:
        per_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in by_window.get(w.index, []):
            per_worker[str(s.get("worker", ""))].append(s)
        if not per_worker:
            continue
        cpu = [[s["cpu"] for s in ss if isinstance(s.get("cpu"), (int, float))] for ss in per_worker.values()]
        rss = [[s["rss"] for s in ss if isinstance(s.get("rss"), (int, float))] for ss in per_worker.values()]
        lag = [
            s["lag_ms"] for ss in per_worker.values() for s in ss if isinstance(s.get("lag_ms"), (int, float))
        ]
        w.gen_cpu_pct = sum(sum(c) / len(c) for c in cpu if c) if any(cpu) else None
        w.gen_rss_mb = sum(max(r) for r in rss if r) / 1e6 if any(rss) else None
        w.gen_lag_ms = max(lag) if lag else None


# --- drift and checks -----------------------------------------------------------------------------
def window_drift(windows: list[SoakWindow], metric: str, settle: int, confidence: float) -> Drift:
    """The trend of agg tok/s ("tok_s") or TTFT p50 ("ttft") over windows[settle:]."""
    points = [
        (
            w.start + (w.end - w.start) / 2.0 - windows[0].start,
            w.agg_tok_s if metric == "tok_s" else w.pct("ttft", 50),
        )
        for w in windows[settle:]
    ]
    known = [(x, y) for x, y in points if y is not None]
    if len(known) < MIN_DRIFT_WINDOWS:
        return Drift(metric, len(known), None, None, None, None)
    trend = fit_trend([x for x, _ in known], [y for _, y in known], confidence)
    rel = trend.relative(HOUR_S)
    if rel is None:
        return Drift(metric, len(points), None, None, None, trend)
    return Drift(metric, len(points), *rel, trend)


def _level_check(name: str, limit: float, observed: float | None, minimum: bool) -> Check:
    if observed is None:
        return Check(name, limit, None, SKIPPED, "no values in the windows")
    ok = observed >= limit if minimum else observed <= limit
    word = ">=" if minimum else "<="
    return Check(name, limit, observed, PASS if ok else BREACHED, f"{observed:.4g} (limit {word} {limit:g})")


def _drift_check(name: str, limit: float, drift: Drift, falling: bool, confidence: float) -> Check:
    """Breached when the whole interval is beyond the limit (falling: below -limit; else above +limit)."""
    if drift.pct_per_h is None or drift.low is None or drift.high is None:
        need = f"needs >= {MIN_DRIFT_WINDOWS} windows after the settle windows, has {drift.windows}"
        return Check(name, limit, None, SKIPPED, need)
    bound = -limit if falling else limit
    beyond_all = drift.high < bound if falling else drift.low > bound
    beyond_some = drift.low < bound if falling else drift.high > bound
    status = BREACHED if beyond_all else INCONCLUSIVE if beyond_some else PASS
    detail = (
        f"{drift.pct_per_h:+.3g} %/h, {100 * confidence:g} % CI [{drift.low:+.3g}, {drift.high:+.3g}]"
        f" (limit {'-' if falling else '+'}{limit:g} %/h over {drift.windows} windows)"
    )
    return Check(name, limit, drift.pct_per_h, status, detail)


def evaluate_checks(report: SoakReport) -> list[Check]:
    """One check per threshold the soak config sets."""
    s = report.soak
    checks = []
    levels = (
        ("min_agg_tok_s", "agg_tok_s", True),
        ("max_ttft_p99_ms", "ttft_p99_ms", False),
        ("max_tpot_p99_ms", "tpot_p99_ms", False),
        ("max_failure_ratio", "failure_ratio", False),
    )
    for key, level, minimum in levels:
        limit = getattr(s, key)
        if limit is not None:
            checks.append(_level_check(key, limit, report.level(level), minimum))
    for key, metric, falling in (
        ("max_tok_s_drift_pct_per_h", "tok_s", True),
        ("max_ttft_drift_pct_per_h", "ttft", False),
    ):
        limit = getattr(s, key)
        if limit is not None:
            checks.append(_drift_check(key, limit, report.drifts[metric], falling, s.confidence))
    return checks


def _verdict(report: SoakReport) -> None:
    if not report.windows:
        report.status, report.exit_code = "not_run", EXIT_NOT_RUN
        report.reasons.append(f"no full {report.soak.window_s:g} s window of measured requests to judge")
    elif report.breached:
        report.status, report.exit_code = BREACHED, EXIT_BREACHED
        report.reasons.append("breached: " + ", ".join(report.breached))
    elif not report.finished:
        report.status, report.exit_code = "incomplete", exit_codes.INTERRUPTED
        report.reasons.append("the run stopped before its duration (crashed, stopped or still running)")
    else:
        report.status, report.exit_code = PASS, EXIT_PASS


# --- the whole report -----------------------------------------------------------------------------
def soak_report(prefix: str | Path, *, config_path: str | None = None) -> SoakReport:
    """Judge the soak run whose files start with `prefix` (finished, running or crashed).

    Raises ConfigError when its configuration is missing or has no `soak` section and
    RecordFileError when there is no records file."""
    prefix = str(prefix)
    info = read_run_info(prefix)
    config = run_soak_config(prefix, info, config_path)
    if config.soak is None:
        raise ConfigError(f"{config.source}: no 'soak' section; this is not a soak configuration")
    soak = config.soak
    files = RunFiles(Path(prefix))
    records_path = Path((info.records if info else None) or files.records)
    if not records_path.exists():
        raise RecordFileError(f"{records_path}: no such records file")
    stage = _measured_stage(info)
    warnings: list[str] = []
    t0 = stage.started if stage else None
    if t0 is None:
        t0 = _first_start(records_path)
        warnings.append("no soak start time in the run file; windows start at the first measured request")
    finished = bool(info and info.finished)
    duration = config.duration
    deadline = t0 + duration if t0 is not None and duration is not None else None
    if t0 is None:
        windows, tail = [], 0
    else:
        by_index, last_end, skipped = _fill_windows(
            records_path, t0, soak.window_s, deadline if finished else None
        )
        if skipped:
            warnings.append(f"{records_path}: skipped {skipped} unreadable lines")
        if finished and deadline is not None:
            end = deadline
        elif last_end is None:
            end = t0
        else:  # running or crashed: up to the latest request end
            end = min(last_end, deadline) if deadline is not None else last_end
        n = int((end - t0) // soak.window_s + 1e-9)
        windows = [
            by_index.get(i) or SoakWindow(i, t0 + i * soak.window_s, t0 + (i + 1) * soak.window_s)
            for i in range(n)
        ]
        tail = sum(w.requests for i, w in by_index.items() if not 0 <= i < n)
        attach_health(windows, read_health(files.health))
        if duration is not None and finished and duration % soak.window_s > 1e-6:
            warnings.append(
                f"duration {duration:g} s is not a multiple of window_s {soak.window_s:g} s;"
                " the remainder is not judged"
            )
    if windows and not files.health.exists():
        warnings.append(f"{files.health} not found: generator CPU/memory columns are empty")
    drifts = {m: window_drift(windows, m, soak.settle_windows, soak.confidence) for m in ("tok_s", "ttft")}
    report = SoakReport(
        prefix, soak, t0 or 0.0, duration, finished, windows, tail, drifts, [], "", 0, [], warnings
    )
    report.checks = evaluate_checks(report)
    report.warnings += [
        f"{c.name}: inconclusive: {c.detail}" for c in report.checks if c.status == INCONCLUSIVE
    ]
    _verdict(report)
    return report
