"""Capacity under SLOs: the search for the largest concurrency whose probes meet every SLO.

Pure logic (no Locust): the ladder (`mode: capacity`) asks `CapacitySearch.next_probe()` for the
next stage and feeds each finished stage's records to `observe()`; post-processing replays the
same search over a records file (`replay`), so the live run and the report agree by construction.

The search: probe `capacity.start` users, double while probes pass, and once one fails bisect
between the largest passing and the smallest failing concurrency (integers) until they are
adjacent. The capacity is the largest passing concurrency (0 when even the smallest fails; a
lower bound when `max_users` still passes). Bounded by `max_users`, `max_probes`, per-probe
`max_requests` and, in the ladder, `max_duration_s`.

A probe's verdict, per SLO (`slo.ttft_ms`, `slo.tpot_ms`, `slo.e2el_ms`, each at `percentile`):
the distribution-free confidence interval of the percentile from the probe's completed requests
(order statistics: x_(l) <= true percentile <= x_(u) with probability >= `confidence`, l and u
from the exact binomial distribution, no normal approximation). The SLO passes when the upper
bound is <= the limit and fails when the lower bound is above it. The failure ratio is judged
the same way with its exact (Clopper-Pearson) interval against `max_failure_ratio` (a zero
ratio: any failure fails). A probe passes when every criterion passes, fails when one fails;
otherwise it is extended with more requests (as many again, up to `max_requests`), and a probe
still undecided at `max_requests` is decided by the point estimates, which the result says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.analysis.metrics import e2el_ms, tpot_ms, ttft_ms
from llmload.analysis.sweep_rows import Rung
from llmload.core.config import CapacityConfig, SloConfig
from llmload.core.records import RequestRecord
from llmload.core.stats import mean, percentile

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"
_METRICS: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft_ms": ttft_ms,
    "tpot_ms": tpot_ms,
    "e2el_ms": e2el_ms,
}
FAILURE_KEY = "failure_ratio"


def binomial_cdfs(n: int, p: float) -> list[float]:
    """[P(X <= k) for k in 0..n], X ~ Binomial(n, p), from exact terms summed in log space."""
    if p <= 0.0 or p >= 1.0:
        return [1.0 if p <= 0.0 or k == n else 0.0 for k in range(n + 1)]
    lp, lq, lgn = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    terms = [
        math.exp(lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        for i in range(n + 1)
    ]
    out, total = [], 0.0
    for term in terms:
        total += term
        out.append(min(total, 1.0))
    out[-1] = 1.0
    return out


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return 0.0 if k < 0 else 1.0 if k >= n else binomial_cdfs(n, p)[k]


def quantile_interval(values: Sequence[float], q: float, confidence: float) -> tuple[float, float]:
    """The distribution-free two-sided interval [x_(l), x_(u)] for the q-quantile (0 < q < 1):
    l is the largest rank with P(Binomial(n, q) <= l - 1) <= alpha/2, u the smallest with
    P(Binomial(n, q) <= u - 1) >= 1 - alpha/2; a rank outside 1..n gives -inf / +inf (too few
    values to bound that side)."""
    ordered = sorted(values)
    half = (1.0 - confidence) / 2.0
    cdf = binomial_cdfs(len(ordered), q)  # cdf[rank - 1] = P(X <= rank - 1)
    low_ranks = [rank for rank in range(1, len(ordered) + 1) if cdf[rank - 1] <= half]
    high_ranks = [rank for rank in range(1, len(ordered) + 1) if cdf[rank - 1] >= 1.0 - half]
    lower = ordered[low_ranks[-1] - 1] if low_ranks else -math.inf
    upper = ordered[high_ranks[0] - 1] if high_ranks else math.inf
    return lower, upper


def _bisect_p(target: Callable[[float], bool]) -> float:
    """The boundary in [0, 1] where `target` turns from True to False (monotone), to 1e-12."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if target(mid) else (lo, mid)
    return (lo + hi) / 2.0


def proportion_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a proportion of k successes in n trials."""
    half = (1.0 - confidence) / 2.0
    lower = 0.0 if k == 0 else _bisect_p(lambda p: 1.0 - binomial_cdf(k - 1, n, p) < half)
    upper = 1.0 if k == n else _bisect_p(lambda p: binomial_cdf(k, n, p) > half)
    return lower, upper


@dataclass(frozen=True, slots=True)
class Criterion:
    """One SLO (or the failure ratio) judged on one probe."""

    key: str  # "ttft_ms", "tpot_ms", "e2el_ms" or "failure_ratio"
    limit: float
    point: float | None  # the percentile (or failure ratio) of the probe's requests
    lower: float  # confidence interval; -inf / inf when there are too few requests
    upper: float
    verdict: str  # pass, fail or undecided

    @property
    def excess(self) -> float:
        """point / limit: how far past (> 1) or under (< 1) the limit the probe is."""
        if self.point is None:
            return math.inf
        return self.point / self.limit if self.limit > 0 else (math.inf if self.point > 0 else 0.0)


def _verdict(lower: float, upper: float, limit: float) -> str:
    return PASS if upper <= limit else FAIL if lower > limit else UNDECIDED


def judge(records: Sequence[RequestRecord], config: CapacityConfig, slo: SloConfig) -> list[Criterion]:
    """Every criterion of a probe's records (see the module docstring)."""
    out = []
    completed = [r for r in records if r.ok]
    q = config.percentile / 100.0
    for key, metric in _METRICS.items():
        limit = getattr(slo, key)
        if limit is None:
            continue
        values = [v for v in map(metric, completed) if v is not None]
        if not values:
            out.append(Criterion(key, limit, None, -math.inf, math.inf, UNDECIDED))
            continue
        lower, upper = quantile_interval(values, q, config.confidence)
        point = percentile(values, config.percentile)
        out.append(Criterion(key, limit, point, lower, upper, _verdict(lower, upper, limit)))
    n, failed = len(records), len(records) - len(completed)
    limit = config.max_failure_ratio
    if n:
        if limit == 0.0:  # zero tolerance needs no statistics
            lower = upper = failed / n
        else:
            lower, upper = proportion_interval(failed, n, config.confidence)
        out.append(Criterion(FAILURE_KEY, limit, failed / n, lower, upper, _verdict(lower, upper, limit)))
    return out


@dataclass(slots=True)
class Probe:
    """All the requests sent at one concurrency (a first stage and its extensions)."""

    users: int
    rungs: list[int] = field(default_factory=list)  # ladder rung indices holding its records
    records: list[RequestRecord] = field(default_factory=list)
    criteria: list[Criterion] = field(default_factory=list)
    verdict: str = UNDECIDED
    by_point: bool = False  # decided by point estimates at max_requests (the interval straddled)

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def extended(self) -> bool:
        return len(self.rungs) > 1

    @property
    def agg_tok_s(self) -> float:
        """Output tokens of completed requests over the summed wall time of the probe's stages
        (each stage: first start to last end, as the sweep table's wall_s)."""
        walls: dict[int, tuple[float, float]] = {}
        for r in self.records:
            lo, hi = walls.get(r.rung, (r.t_start, r.t_end))
            walls[r.rung] = (min(lo, r.t_start), max(hi, r.t_end))
        wall = sum(hi - lo for lo, hi in walls.values())
        return sum(r.output_tokens for r in self.records if r.ok) / wall if wall > 0 else 0.0

    @property
    def per_req_tok_s(self) -> float | None:
        """Mean over completed requests of output_tokens / E2EL (the sweep table's per_req_tok/s)."""
        rates = [r.output_tokens / r.e2e_s for r in self.records if r.ok and r.e2e_s > 0]
        return mean(rates) if rates else None

    def binding(self) -> Criterion | None:
        """The failing criterion furthest past its limit (None unless the probe failed)."""
        failing = [c for c in self.criteria if c.verdict == FAIL or (self.by_point and c.excess > 1)]
        return max(failing, key=lambda c: c.excess) if self.verdict == FAIL and failing else None

    def as_dict(self) -> dict[str, Any]:
        plain = ("users", "rungs", "requests", "verdict", "by_point", "agg_tok_s", "per_req_tok_s")
        return {name: getattr(self, name) for name in plain} | {
            "criteria": [
                {
                    "key": c.key,
                    "limit": c.limit,
                    "point": c.point,
                    "lower": None if math.isinf(c.lower) else c.lower,
                    "upper": None if math.isinf(c.upper) else c.upper,
                    "verdict": c.verdict,
                }
                for c in self.criteria
            ],
        }


@dataclass(frozen=True, slots=True)
class NextProbe:
    """What the ladder runs next: `requests` more requests at `users` concurrency."""

    users: int
    requests: int
    extends: bool  # True: more requests for the current probe (an undecided interval)

    @property
    def requests_per_user(self) -> int:
        return max(1, math.ceil(self.requests / self.users))


@dataclass(slots=True)
class CapacityResult:
    """The search's answer (see the module docstring); `complete` is False when it was cut short."""

    capacity: int  # largest passing concurrency; 0 when none passed
    complete: bool
    reason: str  # why the search stopped
    binding: Criterion | None  # the SLO that failed first above the capacity
    probes: list[Probe]
    percentile: float
    confidence: float

    @property
    def at_capacity(self) -> Probe | None:
        return next((p for p in self.probes if p.users == self.capacity), None)

    def as_dict(self) -> dict[str, Any]:
        at = self.at_capacity
        binding = self.binding
        return {
            "capacity": self.capacity,
            "complete": self.complete,
            "reason": self.reason,
            "binding": None if binding is None else binding.key,
            "percentile": self.percentile,
            "confidence": self.confidence,
            "agg_tok_s": None if at is None else at.agg_tok_s,
            "per_req_tok_s": None if at is None else at.per_req_tok_s,
            "probes": [p.as_dict() for p in self.probes],
        }


class CapacitySearch:
    """Doubling, then bisection, over concurrency; one `Probe` per concurrency tried."""

    def __init__(self, config: CapacityConfig, slo: SloConfig) -> None:
        self.config = config
        self.slo = slo
        self.probes: list[Probe] = []
        self.reason = ""

    def _passing(self) -> int:
        return max((p.users for p in self.probes if p.verdict == PASS), default=0)

    def _failing(self) -> int | None:
        return min((p.users for p in self.probes if p.verdict == FAIL), default=None)

    def next_probe(self) -> NextProbe | None:
        """The next stage to run, or None when the search is over (`reason` says why)."""
        cfg = self.config
        current = self.probes[-1] if self.probes else None
        if current is not None and current.verdict == UNDECIDED:
            more = min(current.requests, cfg.max_requests - current.requests)
            return NextProbe(current.users, max(more, 1), extends=True)
        if len(self.probes) >= cfg.max_probes:
            self.reason = f"probe limit ({cfg.max_probes}) reached"
            return None
        lo, hi = self._passing(), self._failing()
        if hi is None:
            if lo >= cfg.max_users:
                self.reason = f"max_users ({cfg.max_users}) still meets the SLOs: capacity is at least that"
                return None
            users = cfg.start if current is None else min(2 * lo, cfg.max_users)
        else:
            if hi - lo <= 1:
                self.reason = (
                    f"{hi} users fail the SLOs" if lo == 0 else f"bracketed: {lo} users pass, {hi} fail"
                )
                return None
            users = (lo + hi) // 2
        return NextProbe(users, max(cfg.requests, users), extends=False)

    def observe(self, users: int, rung: int, records: Iterable[RequestRecord]) -> Probe:
        """A finished stage's records: they join the current probe when it was extended, else
        they start a new one; the probe is judged again."""
        current = self.probes[-1] if self.probes else None
        if current is None or current.verdict != UNDECIDED or current.users != users:
            current = Probe(users)
            self.probes.append(current)
        current.rungs.append(rung)
        current.records.extend(records)
        current.criteria = judge(current.records, self.config, self.slo)
        verdicts = {c.verdict for c in current.criteria}
        current.verdict = FAIL if FAIL in verdicts else UNDECIDED if UNDECIDED in verdicts else PASS
        if current.verdict == UNDECIDED and current.requests >= self.config.max_requests:
            current.by_point = True
            over = any(c.excess > 1 for c in current.criteria)
            current.verdict = FAIL if over else PASS
        return current

    def result(self, reason: str | None = None) -> CapacityResult:
        """The answer so far; `reason` overrides why it stopped (the run was cut short)."""
        capacity, failing = self._passing(), self._failing()
        first_fail = next((p for p in self.probes if p.users == failing), None)
        return CapacityResult(
            capacity=capacity,
            complete=reason is None and bool(self.reason),
            reason=reason or self.reason,
            binding=first_fail.binding() if first_fail else None,
            probes=self.probes,
            percentile=self.config.percentile,
            confidence=self.config.confidence,
        )


def replay(config: CapacityConfig, slo: SloConfig, rungs: Sequence[Rung]) -> CapacityResult:
    """The search over a finished run's rungs, in ladder order, as the ladder ran it."""
    search = CapacitySearch(config, slo)
    for rung in rungs:
        search.observe(rung.users, rung.index, rung.records)
    if search.next_probe() is None:
        return search.result()
    return search.result(reason="the run ended before the search did (time limit, or stopped)")
