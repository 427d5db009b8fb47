"""The simulator's step model fitted to a measured run: the parameters of `llmload twin`.

The simulator (llmload.sim.engine) runs decode steps of
`base_ms + per_seq_ms * running + prefill_ms_per_token * admitted prompt tokens` ms; at the end of
a step every running sequence gets `1 + Binomial(max_draft, p)` tokens (one chunk), capped at what
it still has to generate; at most `max_num_seqs` run, the rest wait (FIFO). This module estimates
those parameters, under the simulator's own names, from a run's records alone:

- steps: every running sequence gets its chunk at the end of the same step, so the chunks of all
  of a rung's requests, put on one time line, fall into clusters, one per step. A cluster's size
  is the step's batch, its earliest chunk the step's end. A step directly follows the one before
  (the engine starts the next step when one ends, as long as a sequence runs), so when some
  request has chunks in both, the time between the two clusters is the step's duration.
- `base_ms`, `per_seq_ms`: least squares of duration against batch over the decode steps (steps
  that admitted no request), both held >= 0 (a term the free fit puts below 0 is 0, noted).
- `prefill_ms_per_token`: what the steps that admitted requests took beyond that line, against
  the prompt tokens they admitted (least squares through the origin). Every prompt token counts,
  cached or not: the twin's replay runs the simulator without a prefix cache, so a server's cache
  hits show as a lower cost per prompt token (fitted per uncached token, the replay would charge
  that cost for every token of a prompt the server served mostly from its cache). When no step
  admitted a request into a running batch (every user of a rung sends together, requests of
  equal length end together), the steps that started an idle server stand in: the median over
  them of their time from the last of their sends to their end, beyond the line, per prompt
  token (the median: such a start also waits for anything else that holds the server or the
  machine). That time also holds the server's handling of the request, which a real server has
  and the simulator's replay adds again, so this estimate reads high by that much (noted in the
  fit).
- `accept_len`: the accept length whose expected number of steps (chunks) for each request's
  output length, the last step capped as the simulator caps it, adds up to the chunks received
  (`expected_steps`). Tokens per chunk alone would read low: the capped last chunk is short.
- `max_num_seqs`: the largest batch seen, when requests waited for a place (two or more full
  steps passed between a request's send and its first chunk, at least QUEUED_SHARE of them at
  that batch: a long wait holds a few steps read split by a late chunk) and the ladder went
  above it; else None: no limit was reached, the simulator's default (256) stands.

And two checks of what the model cannot express, each a reason the twin does not fit:
- drift: the decode steps' duration against time at a given batch (least squares of duration on
  batch and time together: a ladder's batch grows with time, so the steps of one batch size at
  different times, as requests finish, tell drift from batch cost; when they are too few the
  t-statistic says so); a step that grows (or shrinks) over the run by more than
  `DRIFT_PCT_PER_MIN` with a t-statistic above `DRIFT_T` is not the simulator's model.
- linearity: each batch size seen in `MIN_STEPS_PER_BATCH` decode steps or more: the mean
  duration against the line; off by more than `LINEARITY_PCT` and by more than `LINEARITY_SE`
  standard errors (the steps' scatter around the line over the root of their count) is a step
  cost not linear in batch.
- steps that do not line up (a request's consecutive chunks not in consecutive clusters) in more
  than `MAX_MISALIGNED` of the cases: chunks are not steps of one shared batch (preemption, a
  server that sends tokens on its own schedule), and none of the above holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.analysis.run.steps import stepped
from llmload.analysis.step_fit import least_squares, step_line
from llmload.core.files.records import RequestRecord
from llmload.core.stats import percentile

MAX_DRAFT = 7  # the simulator's default draft tokens per step: the accept length's distribution
SIM_DEFAULT_MAX_NUM_SEQS = 256
CLUSTER_SHARE = 0.25  # chunks closer than this share of the shortest steps belong to one step
SHORT_GAP_PCT = 10.0  # the shortest steps: this percentile of a rung's gaps between a stream's chunks
DRIFT_PCT_PER_MIN = 3.0
DRIFT_T = 5.0
LINEARITY_PCT = 5.0
MIN_STEPS_PER_BATCH = 3
# a request waited for a place when nearly every step of its wait ran the largest batch: over a
# wait of hundreds of steps a few are read split (a stream's chunk read late makes one step two
# smaller clusters: 3-6 % of 520 steps at batch 3, 512-token outputs on the loaded machine)
QUEUED_SHARE = 0.8
LINEARITY_SE = 4.0
MAX_MISALIGNED = 0.05
PARAMETERS = ("base_ms", "per_seq_ms", "prefill_ms_per_token", "accept_len", "max_num_seqs")


class TwinFitError(ValueError):
    """The run holds too little to fit the model (one line: why)."""


@dataclass(frozen=True, slots=True)
class TwinParams:
    """The simulator's step model, under its own flag names (llmload.sim.engine.StepModel)."""

    base_ms: float
    per_seq_ms: float
    prefill_ms_per_token: float
    accept_len: float
    max_num_seqs: int | None  # None: no batch limit was reached in the run
    max_draft: int = MAX_DRAFT
    # the simulator's accept_len whose draws realize `accept_len` on this workload's prompts (its
    # acceptance is drawn per prompt: a run of few prompts draws a mean off its setting); None: as is
    sim_accept_len: float | None = None

    def sim_settings(self) -> dict[str, float | int]:
        """The simulator's settings (its flags without the dashes: `llmload sweep --sim KEY=VALUE`)."""
        accept = self.accept_len if self.sim_accept_len is None else self.sim_accept_len
        return {
            "base_ms": round(self.base_ms, 4),
            "per_seq_ms": round(self.per_seq_ms, 4),
            "prefill_ms_per_token": round(self.prefill_ms_per_token, 6),
            "accept_len": round(min(max(accept, 1.0), 1.0 + self.max_draft), 4),
            "max_draft": self.max_draft,
            "max_num_seqs": self.max_num_seqs or SIM_DEFAULT_MAX_NUM_SEQS,
        }

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (*PARAMETERS, "max_draft", "sim_accept_len")}


@dataclass(frozen=True, slots=True)
class Step:
    """One step seen from the client: when it ended, its batch, what it admitted."""

    rung: int
    end: float  # epoch s: the earliest chunk of the step
    batch: int
    admitted: int  # requests whose first chunk came at its end
    prompt_tokens: int  # prompt tokens of those, cached or not (module docstring)
    duration_ms: float | None  # None when the step before it is not known to be its start
    idle_ms: float | None = None  # a step that started an idle server: from the last send to its end


@dataclass(slots=True)
class TwinFit:
    """The fitted parameters, how well the step model holds, and every reason it does not."""

    params: TwinParams
    decode_steps: int
    admit_steps: int
    idle_steps: int  # steps that started an idle server, read for prefill when admit_steps is 0
    batches: dict[int, tuple[int, float]]  # decode steps by batch: (count, mean duration ms)
    residual_ms: float  # rms of the decode steps around the line
    drift_pct_per_min: float | None
    drift_t: float | None
    linearity_pct: float | None  # worst batch's mean off the line, % (signed)
    linearity_batch: int | None
    misaligned: float  # share of consecutive chunk pairs not in consecutive steps
    queued_requests: int  # requests that waited for a place in the batch
    accept_from_counters: float | None = None  # the server's 1 + accepted / drafts, when scraped
    limit_from_metrics: int | None = None  # the most running while some waited, when scraped
    problems: list[str] = field(default_factory=list)  # why the model does not hold (empty: it does)
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.params.as_dict(),
            "decode_steps": self.decode_steps,
            "admit_steps": self.admit_steps,
            "idle_steps": self.idle_steps,
            "step_ms_by_batch": {str(b): {"steps": n, "mean_ms": m} for b, (n, m) in self.batches.items()},
            "residual_ms": self.residual_ms,
            "drift_pct_per_min": self.drift_pct_per_min,
            "drift_t": self.drift_t,
            "linearity_pct": self.linearity_pct,
            "linearity_batch": self.linearity_batch,
            "misaligned": self.misaligned,
            "queued_requests": self.queued_requests,
            "accept_len_from_counters": self.accept_from_counters,
            "max_num_seqs_from_metrics": self.limit_from_metrics,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


# --- steps from chunks ------------------------------------------------------------------------


@dataclass(slots=True)
class _Rung:
    steps: list[Step]
    pairs: int  # consecutive chunk pairs of a request
    misaligned: int  # of which not in consecutive steps
    queued: int  # requests that waited for a place at the largest batch
    largest: int  # the rung's largest batch
    users: int


def rung_steps(rung: int, records: Sequence[RequestRecord]) -> _Rung:
    """The steps of one rung from its completed requests' chunk times (module docstring)."""
    users = max((r.users for r in records), default=0)
    times = [rec.chunk_times for rec in records]
    gaps = [b - a for chunks in times for a, b in zip(chunks, chunks[1:], strict=False) if b > a]
    shortest = percentile(gaps, SHORT_GAP_PCT) if gaps else 0.0
    window = CLUSTER_SHARE * shortest
    events = sorted(
        (rec.t_start + t, i, j) for i, rec in enumerate(records) for j, t in enumerate(rec.chunk_times)
    )
    where: list[list[int]] = [[0] * len(rec.chunk_times) for rec in records]  # step of each chunk
    clusters: list[list[tuple[int, int]]] = []
    ends: list[float] = []
    last = -math.inf
    for t, i, j in events:
        if not clusters or t - last > window or any(i == k for k, _ in clusters[-1]):
            clusters.append([])
            ends.append(t)
        clusters[-1].append((i, j))
        where[i][j] = len(clusters) - 1
        last = t
    pairs = misaligned = 0
    follows = [False] * len(clusters)  # some request has chunks in this step and the one before
    for steps_of in where:
        for a, b in zip(steps_of, steps_of[1:], strict=False):
            pairs += 1
            if b == a + 1:
                follows[b] = True
            else:
                misaligned += 1
    steps = []
    for k, members in enumerate(clusters):
        new = [records[i] for i, j in members if j == 0]
        prompt = sum(r.prompt_tokens or 0 for r in new)
        duration = (ends[k] - ends[k - 1]) * 1000.0 if k and follows[k] else None
        idle = None
        if len(new) == len(members):
            last_send = max(r.t_start for r in new)
            if k == 0 or ends[k - 1] < last_send:  # nothing ran when the last of them was sent
                idle = (ends[k] - last_send) * 1000.0
        steps.append(Step(rung, ends[k], len(members), len(new), prompt, duration, idle))
    largest = max((s.batch for s in steps), default=0)
    queued = 0
    for i, rec in enumerate(records):
        first = where[i][0]
        between = [s for s in steps[:first] if s.end > rec.t_start]
        full = sum(s.batch == largest for s in between[1:])
        if len(between) >= 3 and full >= QUEUED_SHARE * (len(between) - 1):
            queued += 1
    return _Rung(steps, pairs, misaligned, queued, largest, users)


# --- accept length ----------------------------------------------------------------------------


def _pmf(accept_len: float, max_draft: int) -> list[float]:
    """P(k tokens in a step) for k = 1 .. 1 + max_draft (index k - 1)."""
    p = 0.0 if max_draft == 0 else min(max((accept_len - 1.0) / max_draft, 0.0), 1.0)
    return [math.comb(max_draft, n) * p**n * (1 - p) ** (max_draft - n) for n in range(max_draft + 1)]


def expected_steps(longest: int, accept_len: float, max_draft: int = MAX_DRAFT) -> list[float]:
    """Expected steps to generate t tokens, t = 0 .. longest, when each step gives
    1 + Binomial(max_draft, p) tokens capped at what is left (the simulator's rule)."""
    pmf = _pmf(accept_len, max_draft)
    f = [0.0] * (longest + 1)
    for t in range(1, longest + 1):
        f[t] = 1.0 + sum(q * f[max(t - k, 0)] for k, q in enumerate(pmf, start=1))
    return f


def fit_accept_len(requests: Sequence[tuple[int, int]], max_draft: int = MAX_DRAFT) -> float:
    """The accept length whose expected steps for each request's output tokens add up to the
    chunks received; `requests`: (output tokens, chunks) of each completed request."""
    requests = [(t, n) for t, n in requests if t > 0 and n > 0]
    if not requests:
        raise TwinFitError("no completed request with tokens and chunks: no accept length")
    longest = max(t for t, _ in requests)
    chunks = sum(n for _, n in requests)

    def steps(accept: float) -> float:
        f = expected_steps(longest, accept, max_draft)
        return sum(f[t] for t, _ in requests)

    lo, hi = 1.0, 1.0 + max_draft
    if chunks >= steps(lo):
        return lo
    if chunks <= steps(hi):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if steps(mid) > chunks else (lo, mid)
    return (lo + hi) / 2


# --- the fit ----------------------------------------------------------------------------------


def _limit_from_metrics(samples: Iterable[dict[str, float]]) -> int | None:
    """The most requests running in a scrape where some waited (None: none waited)."""
    seen = [s["running"] for s in samples if s.get("waiting", 0) > 0 and "running" in s]
    return round(max(seen)) if seen else None


def fit_twin(
    records: Iterable[RequestRecord],
    *,
    accept_from_counters: float | None = None,
    scrapes: Iterable[dict[str, float]] = (),
) -> TwinFit:
    """Fit the simulator's step model to a run's records (module docstring). `accept_from_counters`:
    the server's own accept length over the run, when scraped (shown beside the fit); `scrapes`:
    the scraped `running` and `waiting` of each scrape (the batch limit's cross-check)."""
    by_rung: dict[int, list[RequestRecord]] = {}
    chunked: list[tuple[int, int]] = []
    for rec in records:
        if stepped(rec):
            by_rung.setdefault(rec.rung, []).append(rec)
            chunked.append((rec.output_tokens, len(rec.chunk_times)))
    if not by_rung:
        raise TwinFitError("no completed streamed request with chunk times: nothing to fit")
    rungs = [rung_steps(i, recs) for i, recs in sorted(by_rung.items())]
    steps = [s for r in rungs for s in r.steps]
    decode = [s for s in steps if s.duration_ms is not None and s.admitted == 0]
    admit = [s for s in steps if s.duration_ms is not None and s.admitted > 0]
    sizes = sorted({s.batch for s in decode})
    if len(sizes) < 2:
        raise TwinFitError(
            f"decode steps of {len(sizes)} batch size(s) ({', '.join(map(str, sizes)) or 'none'}): "
            "base_ms and per_seq_ms need at least two (a ladder of two or more concurrencies)"
        )
    batch = [float(s.batch) for s in decode]
    dur = [float(s.duration_ms or 0.0) for s in decode]
    ones = [1.0] * len(decode)
    (base, per_seq), rms, bound = step_line(batch, dur)
    # drift: duration on batch and time together
    t0 = min(s.end for s in decode)
    minutes = [(s.end - t0) / 60.0 for s in decode]
    drift_pct = drift_t = None
    if max(minutes) > 0:
        coef, se, _ = least_squares([ones, batch, minutes], dur)
        drift_pct = float(coef[2]) / float(np.mean(dur)) * 100.0
        drift_t = float(coef[2] / se[2]) if se[2] > 0 else math.inf
    # each batch size against the line
    batches: dict[int, tuple[int, float]] = {}
    for b in sizes:
        of_b = [d for s, d in zip(decode, dur, strict=True) if s.batch == b]
        batches[b] = (len(of_b), float(np.mean(of_b)))
    worst_pct = worst_batch = None
    for b, (n, m) in batches.items():
        line = base + per_seq * b
        if n >= MIN_STEPS_PER_BATCH and line > 0:
            off = (m - line) / line * 100.0
            if abs(m - line) <= LINEARITY_SE * rms / math.sqrt(n):
                continue  # within the scatter
            if worst_pct is None or abs(off) > abs(worst_pct):
                worst_pct, worst_batch = off, b
    # prefill: the admitting steps beyond the line, against their prompt tokens (or, when none
    # admitted into a running batch, the steps that started an idle server: module docstring)
    prefill = 0.0
    if admit:
        tokens = [float(s.prompt_tokens) for s in admit]
        excess = [float(s.duration_ms or 0.0) - (base + per_seq * s.batch) for s in admit]
        squares = sum(t * t for t in tokens)
        if squares > 0:
            prefill = max(sum(e * t for e, t in zip(excess, tokens, strict=True)) / squares, 0.0)
    idle = [s for s in steps if s.idle_ms is not None and s.prompt_tokens > 0]
    if not admit and idle:
        # the median: an idle start also waits for whatever else holds the server or the machine
        per_token = [(float(s.idle_ms or 0.0) - (base + per_seq * s.batch)) / s.prompt_tokens for s in idle]
        prefill = max(float(np.median(per_token)), 0.0)
    # the batch limit
    largest = max(r.largest for r in rungs)
    queued = sum(r.queued for r in rungs)
    top_users = max(r.users for r in rungs)
    limit = largest if queued and largest < top_users else None
    pairs = sum(r.pairs for r in rungs)
    misaligned = sum(r.misaligned for r in rungs) / pairs if pairs else 0.0
    params = TwinParams(
        base_ms=float(base),
        per_seq_ms=float(per_seq),
        prefill_ms_per_token=prefill,
        accept_len=fit_accept_len(chunked),
        max_num_seqs=limit,
    )
    fit = TwinFit(
        params=params,
        decode_steps=len(decode),
        admit_steps=len(admit),
        idle_steps=0 if admit else len(idle),
        batches=batches,
        residual_ms=float(rms),
        drift_pct_per_min=drift_pct,
        drift_t=drift_t,
        linearity_pct=worst_pct,
        linearity_batch=worst_batch,
        misaligned=misaligned,
        queued_requests=queued,
        accept_from_counters=accept_from_counters,
        limit_from_metrics=_limit_from_metrics(scrapes),
    )
    if bound:
        fit.notes.append(f"{bound} is below 0: held at 0, the line fitted with the other term alone")
    _judge(fit)
    return fit


def _judge(fit: TwinFit) -> None:
    """The problems (the model does not hold) and notes of a fit."""
    p = fit.params
    if fit.misaligned > MAX_MISALIGNED:
        fit.problems.append(
            f"{fit.misaligned * 100:.0f} % of consecutive chunks are not in consecutive steps: the "
            "server does not advance every running request once a step (preemption, its own schedule)"
        )
    if (
        fit.drift_pct_per_min is not None
        and abs(fit.drift_pct_per_min) > DRIFT_PCT_PER_MIN
        and fit.drift_t is not None
        and abs(fit.drift_t) > DRIFT_T
    ):
        fit.problems.append(
            f"step time drifts {fit.drift_pct_per_min:+.1f} %/min at the same batch (limit "
            f"{DRIFT_PCT_PER_MIN:g}): the model has no drift"
        )
    if fit.linearity_pct is not None and abs(fit.linearity_pct) > LINEARITY_PCT:
        b = fit.linearity_batch
        n, m = fit.batches[b or 0]
        fit.problems.append(
            f"steps at batch {b} take {m:.1f} ms, the line {p.base_ms:.1f} + {p.per_seq_ms:.2f} x batch "
            f"says {p.base_ms + p.per_seq_ms * (b or 0):.1f} ({fit.linearity_pct:+.1f} %, limit "
            f"{LINEARITY_PCT:g} %): step cost not linear in batch"
        )
    if fit.admit_steps == 0 and fit.idle_steps:
        fit.notes.append(
            f"no step admitted a request into a running batch: prefill_ms_per_token from {fit.idle_steps} "
            "steps that started an idle server (it holds the server's request handling too)"
        )
    elif fit.admit_steps == 0:
        fit.notes.append("no step admitted a request into a running batch: prefill_ms_per_token is 0")
    if p.max_num_seqs is None:
        fit.notes.append("no batch limit reached: max_num_seqs is the simulator's default")
    if fit.limit_from_metrics is not None and fit.limit_from_metrics != p.max_num_seqs:
        fit.notes.append(
            f"the server's metrics show {fit.limit_from_metrics} running while requests waited; "
            f"the chunks say {p.max_num_seqs or 'no limit'}"
        )
