"""Noise-aware comparison of two runs, rung by rung: improved, regressed or within noise.

Rungs are matched by ladder index and concurrency. Per rung, four figures are compared as the
relative change cand / base - 1:
- agg_tok_s: the sweep table's aggregate output tok/s (tokens / wall time);
- per_req_tok_s: mean over completed requests of output_tokens / E2EL;
- ttft_p50_ms and tpot_p50_ms: medians over completed requests (p99 of a few dozen requests is
  one or two requests: too noisy to judge).

Uncertainty: where both rungs have their own interval (`llmload.analysis.interval`: batch means
over time slices of the rung's window; held rungs, agg tok/s and TTFT p50), the change's interval
is theirs: the two log half-widths added in quadrature (scaled from 95 % to `confidence` by the
normal quantiles' ratio). Otherwise (a rung whose requests start together, too short for time
slices; the other figures) a seeded bootstrap over requests (each run's completed requests
resampled with replacement, `resamples` times). The aggregate rate tokens / wall is one number per rung whose
wall time is set by the slowest request, and a bootstrap of a maximum is not valid; it is
written instead as (sum tokens / sum E2EL) * achieved concurrency (Little's law: achieved
concurrency = sum E2EL / wall) and the first factor, a ratio of sums, is bootstrapped while the
second is taken as measured. When the ladder repeats a concurrency, the spread of that figure
between the repeats (pooled over both runs) measures run-level noise that no resampling of one
rung's requests can see (scheduling, other load on the machine), and widens the interval.

A rung with fewer than MIN_REQUESTS completed requests gets no interval from the bootstrap (a
resample of 3 requests takes only 10 distinct values), only from repeats if there are any.

Verdict per figure: "regressed" (or "improved") when the whole confidence interval of the change
is on the worse (better) side of zero and the change is at least `threshold` in size; otherwise
"within noise". A figure with no interval (fewer than MIN_REQUESTS requests a side, no repeats)
is "too few requests to judge (n=N)", its change shown: neither noise nor a verdict. A rung that
the sweep flagged in either run (load generator saturated, machine busy: llmload.analysis.run.health)
has its verdict withheld, the reason named: its figures measured the machine, not the server.

In a count-based rung of one request per user a rung holds only `conc` requests started together,
so the interval is wide at low concurrency and run-level noise is invisible without repeats:
the threshold is the guard against calling a 1-2 % scheduling shift a regression. A rung's
verdict is "regressed" if any figure regressed, else "improved" if any improved.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

from llmload.analysis.run.metrics import tpot_ms, ttft_ms
from llmload.analysis.run.postprocess import RunResult
from llmload.analysis.run.sweep_rows import Rung, SweepRow
from llmload.core.files.records import RequestRecord
from llmload.core.names import rung_name
from llmload.core.stats import mean, percentile, pstdev

IMPROVED, REGRESSED, NOISE = "improved", "regressed", "within noise"
TOO_FEW, WITHHELD = "too few requests to judge", "withheld"
MIN_REQUESTS = 5  # completed requests per rung for a bootstrap interval (fewer: too few resamples)
Statistic = Callable[[Sequence[RequestRecord]], float | None]


def _ratio_rate(recs: Sequence[RequestRecord]) -> float | None:
    e2e = sum(r.e2e_s for r in recs)
    return sum(r.output_tokens for r in recs) / e2e if e2e > 0 else None


def _mean_rate(recs: Sequence[RequestRecord]) -> float | None:
    rates = [r.output_tokens / r.e2e_s for r in recs if r.e2e_s > 0]
    return mean(rates) if rates else None


def _median_of(fn: Callable[[RequestRecord], float | None]) -> Statistic:
    def stat(recs: Sequence[RequestRecord]) -> float | None:
        values = [v for v in map(fn, recs) if v is not None]
        return percentile(values, 50.0) if values else None

    return stat


@dataclass(frozen=True, slots=True)
class Figure:
    """A compared figure: how to compute it, and which direction is better."""

    name: str
    higher_is_better: bool
    resampled: Statistic  # the statistic bootstrapped over requests
    scaled_by_row: bool = False  # the point value is the sweep row's agg_tok_s (see module doc)
    needs_repeats: bool = False  # no verdict unless the ladder repeats the rung (see TTFT below)


# TTFT of a continuous-batching server is quantised by the step: a request waits up to one step
# to be admitted, so between two runs of one configuration the median moves by a good part of a
# step (measured on the simulator: -28 % at conc 4, interval [-34, -21] %, and -15 % at conc 8);
# the requests of one run share that phase, so the bootstrap over them cannot see it. A TTFT
# verdict therefore needs repeated rungs (run-level noise); without them it is shown, not judged.


FIGURES = (
    Figure("agg_tok_s", True, _ratio_rate, scaled_by_row=True),
    Figure("per_req_tok_s", True, _mean_rate),
    Figure("ttft_p50_ms", False, _median_of(ttft_ms), needs_repeats=True),
    Figure("tpot_p50_ms", False, _median_of(tpot_ms)),
)


@dataclass(frozen=True, slots=True)
class Change:
    figure: str
    base: float | None
    cand: float | None
    change: float | None  # cand / base - 1
    low: float | None  # confidence interval of the change
    high: float | None
    verdict: str


@dataclass(frozen=True, slots=True)
class RungComparison:
    rung: int
    conc: int
    base_requests: int
    cand_requests: int
    changes: list[Change]
    withheld: str | None = None  # why the verdict is withheld (a flagged rung), None: judged

    @property
    def judged(self) -> str:
        """The verdict the figures give (before any withholding)."""
        verdicts = {c.verdict for c in self.changes}
        if REGRESSED in verdicts:
            return REGRESSED
        if IMPROVED in verdicts:
            return IMPROVED
        if any(c.verdict.startswith(TOO_FEW) for c in self.changes):
            return f"{TOO_FEW} (n={min(self.base_requests, self.cand_requests)})"
        return NOISE

    @property
    def verdict(self) -> str:
        return WITHHELD if self.withheld else self.judged


@dataclass(frozen=True, slots=True)
class Comparison:
    rungs: list[RungComparison]
    unmatched: list[str]  # rungs present in only one run
    confidence: float
    threshold: float
    resamples: int

    @property
    def regressed(self) -> bool:
        """A judged rung regressed (a withheld verdict never counts)."""
        return any(r.verdict == REGRESSED for r in self.rungs)


def _point(fig: Figure, rung: Rung, row: SweepRow) -> float | None:
    return row.agg_tok_s if fig.scaled_by_row else fig.resampled(rung.completed)


def _log_bootstrap(fig: Figure, recs: Sequence[RequestRecord], rng: random.Random, n: int) -> list[float]:
    """log(statistic of a resample / statistic of the sample), `n` resamples (None ones dropped)."""
    full = fig.resampled(recs)
    if not full or full <= 0:
        return []
    out = []
    for _ in range(n):
        value = fig.resampled(rng.choices(recs, k=len(recs)))
        if value and value > 0:
            out.append(math.log(value / full))
    return out


def _rung_rows(res: RunResult) -> list[tuple[Rung, SweepRow]]:
    """Each rung's records with its row (the bootstrap resamples records: a run loaded with
    `load_run(keep_records=True)` holds them)."""
    return list(zip(res.record_rungs(), res.rows, strict=True))


def _repeat_sd(fig: Figure, runs: Sequence[list[tuple[Rung, SweepRow]]], conc: int) -> float:
    """Pooled sd of log(figure) between repeats of `conc` within each run; 0 without repeats."""
    squares, dof = 0.0, 0
    for pairs in runs:
        logs = []
        for rung, row in pairs:
            if rung.users == conc and (v := _point(fig, rung, row)) and v > 0:
                logs.append(math.log(v))
        if len(logs) >= 2:
            squares += pstdev(logs) ** 2 * len(logs)
            dof += len(logs) - 1
    return math.sqrt(squares / dof) if dof else 0.0


def _rung_intervals(fig: Figure, base: SweepRow, cand: SweepRow, alpha: float) -> float | None:
    """The half-width (log scale) of the change from the two rungs' own intervals
    (`llmload.analysis.interval`, 95 %: each side's log half-width, added in quadrature, scaled to
    the asked confidence by the normal quantiles' ratio); None when a side has none."""
    key = f"{fig.name}_pct"
    sides = [(row.interval or {}).get(key) for row in (base, cand)]
    if sides[0] is None or sides[1] is None:
        return None
    scale = NormalDist().inv_cdf(1 - alpha) / NormalDist().inv_cdf(0.975)
    return scale * math.hypot(math.log1p(sides[0] / 100.0), math.log1p(sides[1] / 100.0))


def _verdict(fig: Figure, change: float, low: float, high: float, threshold: float) -> str:
    better_low, better_high = (low, high) if fig.higher_is_better else (-high, -low)
    if better_low > 0 and change * (1 if fig.higher_is_better else -1) >= threshold:
        return IMPROVED
    if better_high < 0 and change * (-1 if fig.higher_is_better else 1) >= threshold:
        return REGRESSED
    return NOISE


def compare_rung(
    fig: Figure,
    base: tuple[Rung, SweepRow],
    cand: tuple[Rung, SweepRow],
    *,
    repeat_sd: float,
    rng: random.Random,
    resamples: int,
    confidence: float,
    threshold: float,
) -> Change:
    """The change of one figure between two matched rungs, with its interval and verdict."""
    b, c = _point(fig, *base), _point(fig, *cand)
    if not b or not c or b <= 0 or c <= 0:
        return Change(fig.name, b, c, None, None, None, NOISE)
    center = math.log(c / b)
    alpha = (1.0 - confidence) / 2.0
    if min(len(base[0].completed), len(cand[0].completed)) < MIN_REQUESTS:
        if repeat_sd == 0:  # a handful of requests says nothing about its own spread
            n = min(len(base[0].completed), len(cand[0].completed))
            return Change(fig.name, b, c, math.expm1(center), None, None, f"{TOO_FEW} (n={n})")
        lo = hi = center
    elif (half := _rung_intervals(fig, base[1], cand[1], alpha)) is not None:
        lo, hi = center - half, center + half
    else:
        boot_b = _log_bootstrap(fig, base[0].completed, rng, resamples)
        boot_c = _log_bootstrap(fig, cand[0].completed, rng, resamples)
        diffs = sorted(center + dc - db for db, dc in zip(boot_b, boot_c, strict=False)) or [center]
        lo, hi = percentile(diffs, 100 * alpha), percentile(diffs, 100 * (1 - alpha))
    # repeats: one rung's value varies by repeat_sd (log scale); a difference of two by sqrt(2) x that
    spread = NormalDist().inv_cdf(1 - alpha) * math.sqrt(2.0) * repeat_sd
    lo = center - math.hypot(center - lo, spread)
    hi = center + math.hypot(hi - center, spread)
    change, low, high = math.expm1(center), math.expm1(lo), math.expm1(hi)
    judged = repeat_sd > 0 or not fig.needs_repeats
    verdict = _verdict(fig, change, low, high, threshold) if judged else NOISE
    return Change(fig.name, b, c, change, low, high, verdict)


def compare_runs(
    base: RunResult,
    cand: RunResult,
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    threshold: float = 0.05,
    seed: int = 0,
) -> Comparison:
    """Compare every rung present in both runs (matched by index and concurrency)."""
    rng = random.Random(seed)
    runs = (_rung_rows(base), _rung_rows(cand))
    base_by, cand_by = ({(r.index, r.users): (r, row) for r, row in pairs} for pairs in runs)
    rungs = []
    for key in sorted(base_by.keys() & cand_by.keys()):
        b, c = base_by[key], cand_by[key]
        changes = [
            compare_rung(
                fig,
                b,
                c,
                repeat_sd=_repeat_sd(fig, runs, key[1]),
                rng=rng,
                resamples=resamples,
                confidence=confidence,
                threshold=threshold,
            )
            for fig in FIGURES
        ]
        withheld = _flagged(b[1], "base") + _flagged(c[1], "candidate")
        rungs.append(
            RungComparison(
                key[0],
                key[1],
                len(b[0].completed),
                len(c[0].completed),
                changes,
                "; ".join(withheld) or None,
            )
        )
    unmatched = [
        f"{rung_name(i, u)} only in {'base' if (i, u) in base_by else 'candidate'}"
        for i, u in sorted(base_by.keys() ^ cand_by.keys())
    ]
    return Comparison(rungs, unmatched, confidence, threshold, resamples)


def _flagged(row: SweepRow, run: str) -> list[str]:
    """Why a run's rung cannot be judged: the sweep flagged it (llmload.analysis.run.health)."""
    out = []
    if row.saturated:
        out.append(f"load generator saturated in the {run}")
    if row.machine_busy:
        out.append(f"machine busy in the {run}")
    return out


def comparison_dict(cmp: Comparison) -> dict[str, object]:
    """The comparison as JSON data (`--format json`): per rung each figure's change and verdict."""
    return {
        "rungs": [
            {
                "rung": rung_name(r.rung, r.conc),
                "index": r.rung,
                "conc": r.conc,
                "base_requests": r.base_requests,
                "cand_requests": r.cand_requests,
                "verdict": r.verdict,
                "judged": r.judged,
                "withheld": r.withheld,
                "figures": {
                    c.figure: {k: v for k, v in asdict(c).items() if k != "figure"} for c in r.changes
                },
            }
            for r in cmp.rungs
        ],
        "unmatched": list(cmp.unmatched),
        "regressed": cmp.regressed,
        "confidence": cmp.confidence,
        "threshold": cmp.threshold,
        "resamples": cmp.resamples,
    }
