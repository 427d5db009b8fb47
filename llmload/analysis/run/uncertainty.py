"""How late the times of TTFT, ITL and TPOT may be where the generator read a stream late.

A record marks the chunks whose time is not their own (several messages taken by one read, all
stamped with the newest packet's arrival: `llmload.loadgen.stream.sse.StreamAccumulator.feed_read`),
each with the most it may be late (`uncertain_chunks`, `uncertain_ms`), and t_first the same way
(`ttft_uncertain_ms`). Per value that makes:
- TTFT: `ttft_uncertain_ms`;
- ITL: a gap with a marked chunk at either end is off by at most the larger of the two marks;
- TPOT ((t_last - t_first) / (output tokens - 1)): at most the larger of t_first's mark and the
  last chunk's, over (output tokens - 1).

Per rung, each metric gives how many of its values were uncertain, the p99 of the bound over
all its values (an exact value counts 0) and the largest bound. A rung whose p99 exceeds
`UNCERTAIN_P99_MS` for any of the three says so under the table and in the JSON.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.core.files.records import RequestRecord

UNCERTAIN_P99_MS = 1.0  # a p99 bound above this is reported under the table
METRICS = ("ttft", "itl", "tpot")


def request_bounds(rec: RequestRecord) -> tuple[float | None, list[float], float | None]:
    """(TTFT bound, the bounds of the uncertain ITL gaps, TPOT bound), ms, of a completed record."""
    marks = dict(zip(rec.uncertain_chunks or (), rec.uncertain_ms or (), strict=False))
    ttft = rec.ttft_uncertain_ms
    gaps = [
        max(marks.get(i - 1, 0.0), marks.get(i, 0.0))
        for i in sorted({j for m in marks for j in (m, m + 1)})
        if 0 < i < rec.chunks
    ]
    end = max(ttft or 0.0, marks.get(rec.chunks - 1, 0.0))
    tpot = end / (rec.output_tokens - 1) if end > 0 and rec.output_tokens > 1 else None
    return ttft, gaps, tpot


def _p99_with_zeros(bounds: Sequence[float], n: int) -> float:
    """The p99 (linear interpolation, as `llmload.core.stats.percentile`) of `n` values of which
    all but `bounds` are 0."""
    if n <= 0:
        return 0.0
    ordered = [0.0] * max(0, n - len(bounds)) + sorted(bounds)
    pos = 0.99 * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(slots=True)
class Uncertainty:
    """A rung's uncertain values: their bounds per metric, and how many values each metric has."""

    bounds: dict[str, array[float]] = field(default_factory=lambda: {m: array("d") for m in METRICS})
    values: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRICS, 0))

    def add(self, rec: RequestRecord, has_ttft: bool, has_tpot: bool) -> None:
        """One completed record, which gave a TTFT and a TPOT value or not."""
        self.values["ttft"] += has_ttft
        self.values["tpot"] += has_tpot
        self.values["itl"] += max(0, rec.chunks - 1)
        if rec.uncertain_chunks is None and rec.ttft_uncertain_ms is None:
            return
        ttft, gaps, tpot = request_bounds(rec)
        if ttft is not None and has_ttft:
            self.bounds["ttft"].append(ttft)
        self.bounds["itl"].extend(gaps)
        if tpot is not None and has_tpot:
            self.bounds["tpot"].append(tpot)

    def merge(self, other: Uncertainty) -> None:
        for m in METRICS:
            self.bounds[m].extend(other.bounds[m])
            self.values[m] += other.values[m]

    def summary(self) -> dict[str, Any] | None:
        """Per metric {values, uncertain, p99_ms, max_ms}, and `late`: some p99 above
        UNCERTAIN_P99_MS; None when no value was uncertain."""
        if not any(self.bounds[m] for m in METRICS):
            return None
        out: dict[str, Any] = {}
        for m in METRICS:
            b = self.bounds[m]
            out[m] = {
                "values": self.values[m],
                "uncertain": len(b),
                "p99_ms": round(_p99_with_zeros(b, self.values[m]), 3),
                "max_ms": round(max(b, default=0.0), 3),
            }
        out["late"] = any(out[m]["p99_ms"] > UNCERTAIN_P99_MS for m in METRICS)
        return out
