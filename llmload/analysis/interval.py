"""The one interval of a rung's figures: batch means over time slices of the rung's window.

A rung's requests overlap and share the server's batch, so its per-request values are
correlated: an interval that treats them as independent draws (a bootstrap over requests) is too
narrow when they move together and says nothing of the time the rung ran. Batch means treats
time instead: the rung's window (`llmload.analysis.run.window`, given here as its two edges) is
cut into `SLICES` equal slices, each slice gives one value of the figure, and the slices' values,
each an average over many steps of the server, are taken as independent draws of the figure.
That holds when a slice is longer than what correlates the rung's output: a request (its
tokens, and the users that start and end together). So a slice must last at least the rung's
median request (end to end), or the rung gets no interval: a rung of one request per user whose
requests start and end together is one event, however it is cut.

- agg tok/s: a slice's value is the output tokens that arrived in it over its length, counted by
  chunk time as the rung's figure counts them (the rung's token timeline,
  `llmload.analysis.run.window.TokenTimeline`); the mean of the slices' values is the rate over
  the window.
- TTFT p50: a slice's value is the median TTFT of the requests whose first token arrived in it;
  every slice must have one, or the figure has no interval.

The interval of a figure F from the slices' values v_1..v_K (K = SLICES):
half-width h = T_975 x sd(v) / sqrt(K) (sd with K - 1 in the denominator; T_975 = 2.262, Student's
t quantile of 0.975 at K - 1 = 9 degrees of freedom), stated as the relative `pct` = 100 x h / mean(v),
the rung's figure +- pct %. A rung whose slices are shorter than its median request, or than
`MIN_SLICE_S`, gets none.

Its width scales as 1 / sqrt(n) in the requests (or seconds) it is taken over: to reach a
relative half-width `want` from `have` over n requests takes n x (have / want)^2 (`needed`), the
rule `--precision` and the decision's "cannot tell" both state.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

SLICES = 10  # slices of the window: batch means over at least 10 batches
T_975 = 2.2622  # Student's t, 0.975 quantile, SLICES - 1 = 9 degrees of freedom
MIN_SLICE_S = 0.01  # a slice shorter than this holds no step of a server: no interval
FIGURES = ("agg_tok_s", "ttft_p50_ms")


@dataclass(frozen=True, slots=True)
class Interval:
    """One figure's interval: its value (the mean of the slices) and relative half-width in %."""

    value: float
    pct: float

    @property
    def low(self) -> float:
        return self.value * (1.0 - self.pct / 100.0)

    @property
    def high(self) -> float:
        return self.value * (1.0 + self.pct / 100.0)


def batch_means(values: np.ndarray) -> Interval | None:
    """The interval of the mean of `SLICES` slice values (module docstring); None when there are
    not `SLICES` of them or their mean is not positive."""
    if values.size != SLICES or not np.all(np.isfinite(values)):
        return None
    center = float(values.mean())
    if center <= 0:
        return None
    half = T_975 * float(values.std(ddof=1)) / math.sqrt(SLICES)
    return Interval(center, 100.0 * half / center)


def needed(n: float, have_pct: float, want_pct: float) -> float:
    """The requests (or seconds) an interval of `have_pct` over `n` needs to reach `want_pct`: its
    width scales as 1 / sqrt(n)."""
    return n * (have_pct / want_pct) ** 2


class Tokens(Protocol):
    """Output tokens by arrival time (`llmload.analysis.run.window.TokenTimeline`)."""

    def split(self, start: float, end: float) -> tuple[float, float, float]: ...


@dataclass(slots=True)
class RungSlices:
    """What a rung's interval needs of each completed request besides its tokens, fed one at a
    time: its first token's time (epoch s), its TTFT (ms, nan without one) and its end-to-end
    time (s)."""

    values: array[float] = field(default_factory=lambda: array("d"))  # first token, ttft, e2e

    def __len__(self) -> int:
        return len(self.values) // 3

    def add(self, first_at: float, ttft_ms: float | None, e2e_s: float) -> None:
        """A completed request: when its first token came (its end when it was not streamed), its
        TTFT and its E2E time."""
        self.values.extend((first_at, math.nan if ttft_ms is None else ttft_ms, e2e_s))

    def merge(self, other: RungSlices) -> None:
        self.values.extend(other.values)

    def intervals(self, start: float, end: float, tokens: Tokens) -> dict[str, Interval]:
        """Each figure's interval over the window [start, end] (FIGURES: those that have one),
        the rung's tokens by arrival time given."""
        width = (end - start) / SLICES
        if not len(self) or not width >= MIN_SLICE_S:
            return {}
        first, ttft, e2e = np.frombuffer(self.values, dtype=np.float64).reshape(-1, 3).T
        if width < float(np.median(e2e)):  # slices within one request: not independent
            return {}
        edges = start + width * np.arange(SLICES + 1)
        before, inside, _ = tokens.split(start, end)
        # tokens up to each inner edge (the timeline's milliseconds), the window's own at its end
        upto = [tokens.split(edge, edge)[0] - before for edge in edges[:-1]] + [inside]
        out = {}
        if (agg := batch_means(np.diff(np.asarray(upto)) / width)) is not None:
            out["agg_tok_s"] = agg
        medians = _slice_medians(first, ttft, edges)
        if medians is not None and (ttft_p50 := batch_means(medians)) is not None:
            out["ttft_p50_ms"] = ttft_p50
        return out


def _slice_of(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each time's slice (0 to SLICES - 1; the window's end is in the last), -1 outside the window."""
    which = np.searchsorted(edges, times, side="right") - 1
    which[times == edges[-1]] = SLICES - 1
    which[(which < 0) | (which >= SLICES)] = -1
    return which


def _slice_medians(first: np.ndarray, ttft: np.ndarray, edges: np.ndarray) -> np.ndarray | None:
    """The median TTFT of each slice's requests (by their first token's time); None when a slice
    has none."""
    known = ~np.isnan(ttft)
    which = _slice_of(first[known], edges)
    values = ttft[known]
    medians = []
    for k in range(SLICES):
        held = values[which == k]
        if not held.size:
            return None
        medians.append(float(np.median(held)))
    return np.asarray(medians)


def interval_dict(found: dict[str, Interval]) -> dict[str, Any] | None:
    """The JSON row's `interval`: per figure its +- %, and the rule's slices; None without one."""
    return {"slices": SLICES, **{f"{k}_pct": v.pct for k, v in found.items()}} if found else None
