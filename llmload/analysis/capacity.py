"""Capacity under SLOs: the search for the largest concurrency, or request rate, whose probes meet
every SLO.

Pure logic (no Locust): the ladder (`mode: capacity`) asks `CapacitySearch.next_probe()` for the
next stage and feeds each finished stage's records to `observe()`; post-processing replays the
same search over a records file (`replay`), so the live run and the report agree by construction.

The search (`capacity.variable`): probe `capacity.start` users (or requests/s), double while
probes pass, and once one fails bisect between the largest passing and the smallest failing
value until they are adjacent (concurrency: integers) or their ratio is at most
1 + `rate_resolution` (rate). The capacity is the largest passing value (0 when even the start
fails; a lower bound when `max_users` / `max_rate` still passes). Bounded by those, `max_probes`,
per-probe `max_requests` and, in the ladder, `max_duration_s`.

A concurrency probe is a closed-loop stage of `users` users; a rate probe is an open-loop stage of
`requests` arrivals at the rate (rate mode's schedule and `max_concurrency` client slots). In a
rate probe TTFT and E2EL are measured from each request's scheduled arrival, so the wait of a due
request for a free client slot counts against the SLOs (vLLM's bench measures from the send and
hides it); TPOT and ITL do not contain it. A rate probe in which some arrival found every client
slot busy is `client_limited`: its failure is no verdict on the server, and the search stops there
(raise `max_concurrency`).

A probe's verdict, per SLO (`slo.ttft_ms`, `slo.tpot_ms`, `slo.itl_ms`, `slo.e2el_ms`, each at
`percentile`): the distribution-free confidence interval of the percentile from the probe's
completed requests (order statistics: x_(l) <= true percentile <= x_(u) with probability >=
`confidence`, l and u from the exact binomial distribution, no normal approximation). ITL pools
the inter-token latencies of all completed requests (llmload.analysis.run.metrics.itl_ms); they are
not independent draws (gaps of one request are correlated), so its interval is narrower than the
truth would give: read an ITL verdict's confidence as indicative. The SLO passes when the upper
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

from llmload.analysis.run.metrics import e2el_ms, from_arrival, itl_ms, tpot_ms, ttft_ms
from llmload.analysis.run.sweep_rows import Rung
from llmload.core.config import CapacityConfig, SloConfig
from llmload.core.files.records import RequestRecord
from llmload.core.stats import mean, percentile

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"
CONCURRENCY, RATE = "concurrency", "rate"
FAILURE_KEY = "failure_ratio"


def _from_arrival(metric: Callable[[RequestRecord], float | None]) -> Callable[[RequestRecord], float | None]:
    """A latency from the scheduled arrival in a rate probe (`metrics.from_arrival`), from the send
    in a concurrency probe (no scheduled arrival: no wait)."""
    scheduled = from_arrival(metric)
    return lambda rec: metric(rec) if rec.t_scheduled is None else scheduled(rec)


# each SLO's values of one completed request (ITL: several)
_METRICS: dict[str, Callable[[RequestRecord], list[float]]] = {
    "ttft_ms": lambda r: [v] if (v := _from_arrival(ttft_ms)(r)) is not None else [],
    "tpot_ms": lambda r: [v] if (v := tpot_ms(r)) is not None else [],
    "itl_ms": itl_ms,
    "e2el_ms": lambda r: [v] if (v := _from_arrival(e2el_ms)(r)) is not None else [],
}


def client_limited(records: Sequence[RequestRecord]) -> bool:
    """Whether some arrival of a rate probe found all its client slots busy: at its scheduled time
    as many of the probe's requests were in flight as the stage had users (slots)."""
    due = [r for r in records if r.t_scheduled is not None]
    spans = sorted((r.t_start, r.t_end) for r in due)
    for rec in due:
        assert rec.t_scheduled is not None
        busy = sum(1 for start, end in spans if start <= rec.t_scheduled < end)
        if busy >= rec.users:
            return True
    return False


def fmt_load(load: float) -> str:
    """A concurrency or rate as the search's messages show it (4 significant digits)."""
    return f"{load:.4g}"


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

    key: str  # "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms" or "failure_ratio"
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
        values = [v for r in completed for v in metric(r)]
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
    """All the requests sent at one concurrency or rate (a first stage and its extensions)."""

    load: float  # users (concurrency) or requests/s (rate)
    rungs: list[int] = field(default_factory=list)  # ladder rung indices holding its records
    records: list[RequestRecord] = field(default_factory=list)
    criteria: list[Criterion] = field(default_factory=list)
    verdict: str = UNDECIDED
    by_point: bool = False  # decided by point estimates at max_requests (the interval straddled)
    client_limited: bool = False  # rate: an arrival waited for a client slot (`client_limited`)

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def extended(self) -> bool:
        return len(self.rungs) > 1

    @property
    def agg_tok_s(self) -> float:
        """Output tokens of completed requests over the summed wall time of the probe's stages
        (each stage: first start to last end; a probe's throughput is over its whole span, not the
        sweep's steady window)."""
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
        plain = (
            "load",
            "rungs",
            "requests",
            "verdict",
            "by_point",
            "client_limited",
            "agg_tok_s",
            "per_req_tok_s",
        )
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
    """What the ladder runs next: `requests` more requests at `load` users or requests/s."""

    load: float
    requests: int
    extends: bool  # True: more requests for the current probe (an undecided interval)

    @property
    def requests_per_user(self) -> int:
        """A concurrency probe's requests per user (rounded up to whole requests per user)."""
        return max(1, math.ceil(self.requests / self.load))


@dataclass(slots=True)
class CapacityResult:
    """The search's answer (see the module docstring); `complete` is False when it was cut short."""

    capacity: float  # largest passing concurrency (users) or rate (requests/s); 0 when none passed
    variable: str  # CONCURRENCY or RATE
    complete: bool
    reason: str  # why the search stopped
    binding: Criterion | None  # the SLO that failed first above the capacity
    probes: list[Probe]
    percentile: float
    confidence: float

    @property
    def at_capacity(self) -> Probe | None:
        return next((p for p in self.probes if p.load == self.capacity), None)

    @property
    def unit(self) -> str:
        return "users" if self.variable == CONCURRENCY else "requests/s"

    def as_dict(self) -> dict[str, Any]:
        at = self.at_capacity
        binding = self.binding
        return {
            "capacity": self.capacity,
            "variable": self.variable,
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
    """Doubling, then bisection, over concurrency or rate; one `Probe` per value tried."""

    def __init__(self, config: CapacityConfig, slo: SloConfig) -> None:
        self.config = config
        self.slo = slo
        self.probes: list[Probe] = []
        self.reason = ""

    @property
    def rate(self) -> bool:
        return self.config.variable == RATE

    def _passing(self) -> float:
        return max((p.load for p in self.probes if p.verdict == PASS), default=0)

    def _failing(self) -> float | None:
        return min((p.load for p in self.probes if p.verdict == FAIL), default=None)

    def _bracketed(self, lo: float, hi: float) -> bool:
        """Whether the search has reached its resolution between a passing lo and a failing hi."""
        if self.rate:
            return lo > 0 and hi <= lo * (1.0 + self.config.rate_resolution)
        return lo > 0 and hi - lo <= 1

    def next_probe(self) -> NextProbe | None:
        """The next stage to run, or None when the search is over (`reason` says why)."""
        cfg = self.config
        current = self.probes[-1] if self.probes else None
        if current is not None and current.verdict == UNDECIDED:
            more = min(current.requests, cfg.max_requests - current.requests)
            return NextProbe(current.load, max(more, 1), extends=True)
        if current is not None and current.client_limited and current.verdict == FAIL:
            self.reason = (
                f"{fmt_load(current.load)} requests/s queued for client slots (max_concurrency): "
                "no verdict on the server; raise max_concurrency"
            )
            return None
        if len(self.probes) >= cfg.max_probes:
            self.reason = f"probe limit ({cfg.max_probes}) reached"
            return None
        lo, hi = self._passing(), self._failing()
        unit = "requests/s" if self.rate else "users"
        top = cfg.max_rate if self.rate else cfg.max_users
        if hi is None:
            if lo >= top:
                key = "max_rate" if self.rate else "max_users"
                self.reason = f"{key} ({top:g}) still meets the SLOs: capacity is at least that"
                return None
            load = cfg.start if current is None else min(2 * lo, top)
        else:
            if self._bracketed(lo, hi):
                self.reason = f"bracketed: {fmt_load(lo)} {unit} pass, {fmt_load(hi)} fail"
                return None
            if lo == 0 and (self.rate or hi == 1):  # a rate search does not search below its start
                self.reason = f"{fmt_load(hi)} {unit} fail the SLOs"
                return None
            load = (lo + hi) / 2 if self.rate else (lo + hi) // 2
        if self.rate:
            return NextProbe(load, cfg.requests, extends=False)
        return NextProbe(int(load), max(cfg.requests, int(load)), extends=False)

    def observe(self, load: float, rung: int, records: Iterable[RequestRecord]) -> Probe:
        """A finished stage's records (at `load` users or requests/s): they join the current probe
        when it was extended, else they start a new one; the probe is judged again."""
        current = self.probes[-1] if self.probes else None
        if current is None or current.verdict != UNDECIDED or current.load != load:
            current = Probe(load)
            self.probes.append(current)
        current.rungs.append(rung)
        current.records.extend(records)
        current.criteria = judge(current.records, self.config, self.slo)
        current.client_limited = self.rate and client_limited(current.records)
        verdicts = {c.verdict for c in current.criteria}
        current.verdict = FAIL if FAIL in verdicts else UNDECIDED if UNDECIDED in verdicts else PASS
        if current.verdict == UNDECIDED and current.requests >= self.config.max_requests:
            current.by_point = True
            over = any(c.excess > 1 for c in current.criteria)
            current.verdict = FAIL if over else PASS
        return current

    def result(self, reason: str | None = None) -> CapacityResult:
        """The answer so far; `reason` overrides why it stopped (the run was cut short). A search
        stopped by a client-limited failure is incomplete and names no binding SLO: that failure
        is the client's."""
        capacity, failing = self._passing(), self._failing()
        first_fail = next((p for p in self.probes if p.load == failing), None)
        limited = first_fail is not None and first_fail.client_limited
        return CapacityResult(
            capacity=capacity,
            variable=self.config.variable,
            complete=reason is None and bool(self.reason) and not limited,
            reason=reason or self.reason,
            binding=first_fail.binding() if first_fail and not limited else None,
            probes=self.probes,
            percentile=self.config.percentile,
            confidence=self.config.confidence,
        )


def replay(config: CapacityConfig, slo: SloConfig, rungs: Sequence[Rung]) -> CapacityResult:
    """The search over a finished run's rungs, in ladder order, as the ladder ran it (a rate
    probe's rate is on its records)."""
    search = CapacitySearch(config, slo)
    for rung in rungs:
        rate = rung.records[0].rate if search.rate else None
        search.observe(rung.users if rate is None else rate, rung.index, rung.records)
    if search.next_probe() is None:
        return search.result()
    return search.result(reason="the run ended before the search did (time limit, or stopped)")
