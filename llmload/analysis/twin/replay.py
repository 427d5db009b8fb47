"""The what-if twin's figures: a measured run beside the simulator's replay of it with the fitted
model (llmload.analysis.twin.fit), the verdict, and predictions after a change (their tables are
llmload.output.twin_report's).

- figures per rung, under the sweep JSON's keys: `agg_tok_s`, `per_req_tok_s`, `ttft_p50_ms`
  (the sweep row), `ttft_p99_ms`, `tpot_p50_ms` (the rung's latency metrics) and, when the run
  has SLOs, `goodput_req_s` (requests meeting every SLO per second);
- rows: measured, twin and the twin's error in % ((twin - measured) / measured), rung by rung;
- verdict: the twin fits when the fit found nothing the model cannot express and every rung's
  errors are within `TOLERANCES_PCT`; else "does not fit", naming each figure that breaks it.
  Agg tok/s is judged at 3 %: the decode step model sets it directly. TTFT p50 at 10 %, or, in a
  rung of more than one user, one decode step at the rung's batch when that is more: a request
  waits for the step in progress to end, and which step each request of a rung's burst joins is
  a sub-millisecond race, so the same server's TTFT median of such a rung moves by up to a step
  from run to run (the simulator's own c10 of the default ladder: 66, 82, 128 and 129 ms in four
  runs of the same model, 2026-12-02); and never under `TTFT_FLOOR_MS`: on a 2-core machine running
  the replay and the prediction side by side, the client and the simulator read a chunk some ms
  late now and then (a c1 TTFT of 24 ms read 28 ms with the prediction's burst beside it). In a
  rung above the batch limit the admission order is the same race, and swapping two requests
  moves every later admission by their difference in steps: there the step count is one plus
  the rung's spread of steps per request (most minus fewest chunks). To each tolerance adds what
  one request can move each side's median (`median_reach_ms`: the most it changes when any one
  request is left out): a median of two requests is their mean, so one stalled read moves it by
  half its lateness (docs/integrate.md); over many requests the reach is a fraction of a ms, and
  a model that is off in every request moves the median with no reach to excuse it. The other
  figures are shown, not judged: per-request tok/s follows agg tok/s, TPOT p50 follows the
  steps, and TTFT p99 of a rung is its slowest request.
- a change (`Change`): a component of the step `C` ms (constant, or a + b x batch) made `K`
  times faster removes `C x (1 - 1/K)` from every step (base_ms and per_seq_ms); `step_scale`
  multiplies every step cost; `accept_len` replaces the acceptance length. The prediction's rows
  hold the measured rung of the same concurrency where there is one, else they are extrapolated,
  and the Amdahl bound of `llmload budget` (the same component, the measured step time) beside.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from llmload.analysis import compare
from llmload.analysis.budget import CostModel, amdahl_gain
from llmload.analysis.compare import MIN_REQUESTS
from llmload.analysis.run.metrics import ttft_ms
from llmload.analysis.run.postprocess import RunResult
from llmload.analysis.run.steps import WAIT_STEPS, RungSteps, stepped
from llmload.analysis.run.sweep_rows import Rung
from llmload.analysis.twin.fit import MIN_STEPS_PER_BATCH, TwinFit, TwinParams
from llmload.core.config import ConfigError
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE, rung_name
from llmload.core.stats import percentile

FIGURES = ("agg_tok_s", "per_req_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "goodput_req_s")
TOLERANCES_PCT = {"agg_tok_s": 3.0, "ttft_p50_ms": 10.0}
TTFT_FLOOR_MS = 5.0  # a loaded event loop (the client's, the server's) reads a chunk this late now and then
SHOWN = {
    "agg_tok_s": "agg_tok/s",
    "per_req_tok_s": "per_req_tok/s",
    "ttft_p50_ms": "ttft_p50",
    "ttft_p99_ms": "ttft_p99",
    "tpot_p50_ms": "tpot_p50",
    "goodput_req_s": "goodput/s",
}


@dataclass(frozen=True, slots=True)
class RungFigures:
    rung: int
    conc: int
    figures: dict[str, float | None]
    partial: bool = False
    step_spread: int = 0  # most minus fewest steps (chunks) of the rung's completed requests
    ttft_reach_ms: float = 0.0  # median_reach_ms of the rung's TTFTs


def run_figures(result: RunResult) -> list[RungFigures]:
    """A run's figures per rung (it must have been loaded with its metrics)."""
    if result.metrics is None:
        raise ValueError("load the run with with_metrics=True")
    steps: dict[int, list[int]] = {}
    ttfts: dict[int, list[float]] = {}
    for rec in result.iter_records():
        if stepped(rec):
            steps.setdefault(rec.rung, []).append(len(rec.chunk_times))
        first_ms = ttft_ms(rec)
        if rec.ok and rec.phase == MEASURE_PHASE and first_ms is not None:  # what the row's median is of
            ttfts.setdefault(rec.rung, []).append(first_ms)
    out = []
    for row, m in zip(result.rows, result.metrics, strict=True):
        ttft, tpot = m.latencies.get("ttft"), m.latencies.get("tpot")
        figures: dict[str, float | None] = {
            "agg_tok_s": row.agg_tok_s,
            "per_req_tok_s": row.per_req_tok_s,
            "ttft_p50_ms": row.ttft_p50_ms,
            "ttft_p99_ms": None if ttft is None else ttft.percentiles.get(99.0),
            "tpot_p50_ms": None if tpot is None else tpot.median,
        }
        if m.slo:
            figures["goodput_req_s"] = m.goodput_request_s
        counts = steps.get(row.rung) or [0]
        spread = max(counts) - min(counts)
        partial = row.partial or bool(row.failures)
        reach = median_reach_ms(ttfts.get(row.rung, []))
        out.append(RungFigures(row.rung, row.conc, figures, partial, spread, reach))
    return out


def median_reach_ms(values: Sequence[float]) -> float:
    """How far one value moves the median of these: the most the median changes when any one is
    left out (0 for fewer than two). Leaving out any value below the middle is leaving out the
    smallest, any above it the largest; leaving out the middle one moves it less than either."""
    if len(values) < 2:
        return 0.0
    ordered = sorted(values)
    middle = median(ordered)
    return max(abs(median(ordered[1:]) - middle), abs(median(ordered[:-1]) - middle))


def error_pct(measured: float | None, other: float | None) -> float | None:
    if measured is None or other is None or measured == 0:
        return None
    return (other - measured) / measured * 100.0


@dataclass(frozen=True, slots=True)
class TwinRow:
    """One rung: the measured figures (None: not measured, extrapolated) and the model's."""

    rung: int
    conc: int
    measured: dict[str, float | None] | None
    model: dict[str, float | None]
    partial: bool = False
    step_spread: int = 0  # of the measured rung (RungFigures)
    ttft_reach_ms: float = 0.0  # the measured rung's median_reach_ms plus the model's

    @property
    def extrapolated(self) -> bool:
        return self.measured is None

    def errors(self) -> dict[str, float | None]:
        if self.measured is None:
            return {}
        return {k: error_pct(self.measured.get(k), v) for k, v in self.model.items()}


def replay_rows(measured: Sequence[RungFigures], twin: Sequence[RungFigures]) -> list[TwinRow]:
    """The replay beside the run, rung by rung (the same ladder: the same rung indices)."""
    theirs = {r.rung: r for r in twin}
    rows = []
    for m in measured:
        t = theirs.get(m.rung)
        model = t.figures if t is not None else dict.fromkeys(m.figures)
        partial = m.partial or t is None or t.partial
        reach = m.ttft_reach_ms + (t.ttft_reach_ms if t is not None else 0.0)
        rows.append(TwinRow(m.rung, m.conc, m.figures, model, partial, m.step_spread, reach))
    return rows


def prediction_rows(measured: Sequence[RungFigures], predicted: Sequence[RungFigures]) -> list[TwinRow]:
    """The prediction's rungs beside the measured rung of the same concurrency, if any."""
    by_conc: dict[int, RungFigures] = {}
    for m in measured:
        by_conc.setdefault(m.conc, m)
    rows = []
    for p in predicted:
        same = by_conc.get(p.conc)
        rows.append(TwinRow(p.rung, p.conc, None if same is None else same.figures, p.figures, p.partial))
    return rows


@dataclass(slots=True)
class Verdict:
    fits: bool
    breaks: list[str] = field(default_factory=list)  # each figure (or fit check) that breaks it

    def line(self) -> str:
        if self.fits:
            return (
                f"verdict: the twin fits (every rung: agg_tok/s within {TOLERANCES_PCT['agg_tok_s']:g} %, "
                f"ttft_p50 within {TOLERANCES_PCT['ttft_p50_ms']:g} %, {TTFT_FLOOR_MS:g} ms or a step's race)"
            )
        return "verdict: does not fit: " + "; ".join(self.breaks)


def ttft_tolerance_ms(
    measured_ms: float, conc: int, params: TwinParams, step_spread: int = 0, reach_ms: float = 0.0
) -> tuple[float, str]:
    """(tolerance in ms, what it is) of a rung's TTFT p50 (module docstring)."""
    limit, what = _ttft_race_tolerance_ms(measured_ms, conc, params, step_spread)
    if reach_ms <= 0.0:
        return limit, what
    return limit + reach_ms, f"{what} + {reach_ms:.1f} ms one request's reach of the medians"


def _ttft_race_tolerance_ms(
    measured_ms: float, conc: int, params: TwinParams, step_spread: int
) -> tuple[float, str]:
    ten = f"{TOLERANCES_PCT['ttft_p50_ms']:g} %"
    pct = abs(measured_ms) * TOLERANCES_PCT["ttft_p50_ms"] / 100.0
    if pct < TTFT_FLOOR_MS:
        pct, ten = TTFT_FLOOR_MS, f"{TTFT_FLOOR_MS:g} ms (10 % is less)"
    if conc <= 1:
        return pct, ten
    batch = min(conc, params.max_num_seqs or conc)
    step = params.base_ms + params.per_seq_ms * batch
    steps, what = 1, f"one step at batch {batch}"
    if params.max_num_seqs is not None and conc > params.max_num_seqs and step_spread > 0:
        steps, what = 1 + step_spread, f"{1 + step_spread} steps at batch {batch} (queued: one + the spread)"
    if step * steps <= pct:
        return pct, ten
    return step * steps, f"{what}, {step * steps:.1f} ms"


def checked_batches(fit: TwinFit) -> list[int]:
    """The batch sizes the line was checked on: those seen in enough decode steps."""
    return sorted(b for b, (n, _) in fit.batches.items() if n >= MIN_STEPS_PER_BATCH)


def extrapolation_breaks(fit: TwinFit, prediction: Sequence[TwinRow]) -> list[str]:
    """A rung predicted at a batch above those measured rests on the line's shape: with fewer
    than three batch sizes checked, nothing has tested that the step cost is linear (a CPU
    server's batched matmul grows less than linearly), so such a prediction is not made."""
    checked = checked_batches(fit)
    if len(checked) >= 3:
        return []
    limit, top = fit.params.max_num_seqs, max(checked, default=0)
    beyond = sorted({r.conc for r in prediction if r.extrapolated and min(r.conc, limit or r.conc) > top})
    if not beyond:
        return []
    return [
        f"c{','.join(map(str, beyond))} beyond the batch sizes the line was checked on "
        f"({', '.join(map(str, checked)) or 'none'}): extrapolating needs three or more to test that "
        "the step cost is linear in batch"
    ]


def judge(fit: TwinFit, rows: Sequence[TwinRow], prediction: Sequence[TwinRow] = ()) -> Verdict:
    """Fits when the fit found no problem, every replayed rung is within the tolerances, and no
    predicted rung rests on an untested extrapolation (`extrapolation_breaks`)."""
    breaks = list(fit.problems) + extrapolation_breaks(fit, prediction)
    for row in rows:
        name = rung_name(row.rung, row.conc)
        if row.partial:
            breaks.append(f"{name}: not every request completed (measured or twin)")
            continue
        errors = row.errors()
        for key in TOLERANCES_PCT:
            err = errors.get(key)
            if err is None:
                breaks.append(f"{name}: no {SHOWN[key]} to compare")
                continue
            if key == "ttft_p50_ms":
                measured = (row.measured or {})[key] or 0.0
                off_ms = (row.model[key] or 0.0) - measured
                limit_ms, what = ttft_tolerance_ms(
                    measured, row.conc, fit.params, row.step_spread, row.ttft_reach_ms
                )
                if abs(off_ms) > limit_ms:
                    breaks.append(
                        f"{name} {SHOWN[key]} off by {off_ms:+.1f} ms ({err:+.1f} %; tolerance {what})"
                    )
            elif abs(err) > TOLERANCES_PCT[key]:
                breaks.append(
                    f"{name} {SHOWN[key]} off by {err:+.1f} % (tolerance {TOLERANCES_PCT[key]:g} %)"
                )
    return Verdict(not breaks, breaks)


# --- changes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """What the prediction changes in the fitted model (every field optional)."""

    cost: CostModel | None = None  # a component of the step ...
    speedup: float | None = None  # ... made this many times faster
    step_scale: float | None = None
    accept_len: float | None = None

    @property
    def empty(self) -> bool:
        return self.cost is None and self.step_scale is None and self.accept_len is None

    def describe(self) -> str:
        parts = []
        if self.cost is not None:
            made = (
                "free"
                if self.speedup is not None and math.isinf(self.speedup)
                else f"{self.speedup:g}x faster"
            )
            parts.append(f"{self.cost.name} ({self.cost.describe()}) {made}")
        if self.step_scale is not None:
            parts.append(f"every step x {self.step_scale:g}")
        if self.accept_len is not None:
            parts.append(f"accept_len {self.accept_len:g}")
        return ", ".join(parts) or "no change"


def _linear(cost: CostModel) -> tuple[float, float]:
    if cost.constant_ms is not None:
        return cost.constant_ms, 0.0
    if cost.linear is not None:
        return cost.linear
    raise ConfigError(
        f"{cost.name}: a cost table by batch size is not a step the simulator runs; give cost_ms as a "
        "number or {linear: {a, b}}"
    )


def apply_change(params: TwinParams, change: Change) -> TwinParams:
    """The fitted model after the change (module docstring); ConfigError when a step cost would
    go below zero or the accept length is outside the simulator's range."""
    base, per_seq, prefill = params.base_ms, params.per_seq_ms, params.prefill_ms_per_token
    if change.cost is not None:
        if change.speedup is None:
            raise ConfigError("--speedup K: how many times faster the component becomes")
        a, b = _linear(change.cost)
        saved = 1.0 - 1.0 / change.speedup
        base, per_seq = base - a * saved, per_seq - b * saved
        if base < 0 or per_seq < 0:
            raise ConfigError(
                f"{change.cost.name}: {change.cost.describe()} is more than the fitted step "
                f"({params.base_ms:.2f} + {params.per_seq_ms:.2f} x batch ms)"
            )
    if change.step_scale is not None:
        base, per_seq, prefill = (v * change.step_scale for v in (base, per_seq, prefill))
    accept, sim_accept = params.accept_len, params.sim_accept_len
    if change.accept_len is not None:
        accept = change.accept_len
        if not 1.0 <= accept <= 1 + params.max_draft:
            raise ConfigError(
                f"--accept-len: {accept:g} is outside the simulator's [1, {1 + params.max_draft}]"
            )
        if sim_accept is not None and params.accept_len > 1.0:  # the same calibration of the draws
            sim_accept = 1.0 + (accept - 1.0) * (sim_accept - 1.0) / (params.accept_len - 1.0)
    return replace(
        params,
        base_ms=base,
        per_seq_ms=per_seq,
        prefill_ms_per_token=prefill,
        accept_len=accept,
        sim_accept_len=sim_accept,
    )


def change_bound(change: Change, step_ms: float, batch: float) -> float | None:
    """The most the change can gain on a step of `step_ms` at `batch`: the Amdahl gain of a
    component made faster (none when the component costs the whole step or more); 1 / S - 1 for
    every step scaled by S; none for other changes. The one bound of the twin and its decision."""
    if change.cost is not None and change.speedup is not None:
        cost = change.cost.cost_ms(batch)
        return amdahl_gain(step_ms, cost, change.speedup) if cost < step_ms else None
    if change.step_scale is not None and change.accept_len is None:
        return 1.0 / change.step_scale - 1.0
    return None


def step_at(steps: Mapping[int, RungSteps], conc: int) -> RungSteps | None:
    """The measured step at a concurrency: that of its first measured rung (`steps` by rung index)."""
    return next((s for _, s in sorted(steps.items()) if s.conc == conc), None)


def amdahl_bound(
    row: TwinRow, params: TwinParams, change: Change, step: RungSteps | None = None
) -> float | None:
    """`change_bound` of a component made faster on the rung's measured steps and batch
    (llmload.analysis.run.steps: their mean, each step once); without a measured step,
    `llmload budget`'s table formula on the fitted accept length."""
    if change.cost is None or change.speedup is None or row.measured is None:
        return None
    if step is not None and step.step_mean_ms and step.batch:
        step_ms, batch = step.step_mean_ms, step.batch
    else:
        agg = row.measured.get("agg_tok_s")
        if not agg:
            return None
        step_ms, batch = row.conc * params.accept_len / agg * 1000.0, float(row.conc)
    try:
        return change_bound(change, step_ms, batch)
    except (ConfigError, ZeroDivisionError):
        return None


INTERVAL_SPREADS = 2.5  # an interval's half-width in rms errors of the replay (about 95 % over few rungs)
INTERVAL_KEYS = ("agg_tok_s", "per_req_tok_s", "ttft_p50_ms", "tpot_p50_ms")
# the least run-to-run spread assumed: two runs of one server on a shared machine differ by
# about this much (1-2.4 % measured, docs/measurements.md), however close the replay came
MIN_SPREAD = 0.01


def replay_spread(rows: Sequence[TwinRow], key: str) -> float:
    """The rms of the replay's log errors on one figure over the rungs it reproduced: how far a
    rerun of the same model reads from the measured run (run-level noise and the model's error)."""
    logs = []
    for r in rows:
        measured, model = (r.measured or {}).get(key), r.model.get(key)
        if not r.partial and measured and model and measured > 0 and model > 0:
            logs.append(math.log(model / measured))
    return math.sqrt(sum(x * x for x in logs) / len(logs)) if logs else 0.0


BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_LEVEL = 0.95


def _own_step_ms(rec: RequestRecord) -> float:
    times = rec.chunk_times
    return (times[-1] - times[0]) / (len(times) - 1) * 1000.0 if len(times) > 1 else 0.0


def wait_strata(done: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """The rung's completed requests in two groups, those that waited for a place in the batch
    (TTFT more than WAIT_STEPS of their own steps beyond the rung's shortest: the TTFT test of
    `llmload.analysis.run.steps.waited_requests`) and the others; empty groups dropped."""
    firsts = [ttft_ms(r) for r in done]
    shortest = min((f for f in firsts if f is not None), default=0.0)
    waited = [
        f is not None and f > shortest + WAIT_STEPS * _own_step_ms(r)
        for r, f in zip(done, firsts, strict=True)
    ]
    groups = [[r for r, w in zip(done, waited, strict=True) if w == flag] for flag in (True, False)]
    return [g for g in groups if g]


def _log_resamples(
    stat: Callable[[Sequence[RequestRecord]], float | None],
    strata: Sequence[Sequence[RequestRecord]],
    rng: random.Random,
    n: int,
) -> list[float]:
    """log(statistic of a resample / statistic of the sample), each stratum resampled apart."""
    full = stat([r for group in strata for r in group])
    if not full or full <= 0:
        return []
    out = []
    for _ in range(n):
        value = stat([r for group in strata for r in rng.choices(group, k=len(group))])
        if value and value > 0:
            out.append(math.log(value / full))
    return out


def bootstrap_spreads(
    rungs: Iterable[Rung],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    intervals: Mapping[int, Mapping[str, Any] | None] | None = None,
) -> dict[int, dict[str, tuple[float, float]]]:
    """By rung index of the twin's predicted run (its `record_rungs()`), per figure of
    INTERVAL_KEYS: the 2.5th and 97.5th percentiles of log(A / B), A and B the figure (as
    `llmload compare` computes it from requests) of two independent resamples of the rung's
    completed requests: how far a real run of the changed server (another draw of as many
    requests) may read from the twin's run. Past the batch limit the requests that waited for a
    place and the others are resampled apart (`wait_strata`): how many wait is set by the
    closed loop and the limit, not drawn, and resampling it would read a spread no rerun shows.
    Seeded; rungs with fewer than MIN_REQUESTS completed requests get none (a handful of
    requests says nothing about its own spread). A figure whose rung has its own interval
    (`intervals`: the predicted run's sweep rows' `interval` by rung index; held rungs) takes it
    instead: +- the log half-width of two such runs (`llmload.analysis.interval`, the one interval
    `compare` uses too)."""
    rng = random.Random(seed)
    figures = {fig.name: fig for fig in compare.FIGURES}
    out: dict[int, dict[str, tuple[float, float]]] = {}
    for rung in rungs:
        done = rung.completed
        if len(done) < MIN_REQUESTS:
            continue
        strata = wait_strata(done)
        spreads = {}
        own = (intervals or {}).get(rung.index) or {}
        for key in INTERVAL_KEYS:
            if (pct := own.get(f"{key}_pct")) is not None:
                half = math.hypot(math.log1p(pct / 100.0), math.log1p(pct / 100.0))  # two runs
                spreads[key] = (-half, half)
                continue
            stat = figures[key].resampled
            ours = _log_resamples(stat, strata, rng, resamples)
            theirs = _log_resamples(stat, strata, rng, resamples)
            diffs = sorted(a - b for a, b in zip(ours, theirs, strict=False))
            if diffs:
                tail = 100 * (1 - BOOTSTRAP_LEVEL) / 2
                spreads[key] = (percentile(diffs, tail), percentile(diffs, 100 - tail))
        out[rung.index] = spreads
    return out


def prediction_intervals(
    replay: Sequence[TwinRow],
    prediction: Sequence[TwinRow],
    params: TwinParams,
    boot: Mapping[int, Mapping[str, tuple[float, float]]] | None = None,
) -> dict[int, dict[str, tuple[float, float, float]]]:
    """Every predicted figure with its interval, by rung index (docs/integrate.md, "The
    interval"): the wider, on each side, of
    - the replay's: the prediction times exp(+- INTERVAL_SPREADS x the replay's rms log error on
      that figure, at least MIN_SPREAD: the real run of the change is another run), and for TTFT
      p50 at least the verdict's race tolerance (a request waits for the step in progress: the
      median moves by up to a step from run to run);
    - the bootstrap's (`boot`, from `bootstrap_spreads` of the predicted run): the prediction
      times exp of its percentiles of the log ratio of two resamples."""
    spread = {k: max(replay_spread(replay, k), MIN_SPREAD) for k in INTERVAL_KEYS}
    out: dict[int, dict[str, tuple[float, float, float]]] = {}
    for row in prediction:
        figures = {}
        drawn = (boot or {}).get(row.rung, {})
        for key in INTERVAL_KEYS:
            value = row.model.get(key)
            if value is None or value <= 0:
                continue
            factor = math.exp(INTERVAL_SPREADS * spread[key])
            low, high = value / factor, value * factor
            if key == "ttft_p50_ms":
                race, _ = _ttft_race_tolerance_ms(value, row.conc, params, row.step_spread)
                low, high = min(low, value - race), max(high, value + race)
            if key in drawn:
                lo_log, hi_log = drawn[key]
                low, high = min(low, value * math.exp(lo_log)), max(high, value * math.exp(hi_log))
            figures[key] = (value, max(low, 0.0), high)
        out[row.rung] = figures
    return out


def row_dict(row: TwinRow, model_key: str) -> dict[str, Any]:
    return {
        "rung": row.rung,
        "conc": row.conc,
        "extrapolated": row.extrapolated,
        "partial": row.partial,
        "measured": row.measured,
        model_key: row.model,
        "error_pct" if model_key == "twin" else "gain_pct": row.errors()
        if row.measured is not None
        else None,
    }
