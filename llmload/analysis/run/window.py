"""A rung's window: the one interval every per-rung figure is taken over (docs/metrics.md), and
the output tokens counted by the time they arrived in it (`TokenTimeline`).

`rung_window` is the definition, and the one place to change it. A concurrency rung's window is
its steady part: the interval in which it held its concurrency, from the first instant at which
at least `held_floor(c)` = ceil(0.95 c) of its requests were in flight (c: the rung's users) to
the last instant at which they were, by a sweep line over the measured requests' starts and ends
(failed requests included; at one instant ends come before starts, so a user's next request
sent as its last one ends does not make the count look higher than it was). The dips below the
floor inside that interval (a user between two requests) stay in it: `achieved_conc` (the time
average of the requests in flight over the window) says how deep they were. A session workload
takes the rule on active sessions (a session is active from its first request's start to its
last one's end), so a user thinking between two turns still holds its place. Before the window
is the rung's ramp, after it its drain (`ramp_s`, `drain_s`): the rung's requests' span
(`first_start` to `last_end`) less the window. A rung that never held its floor has no steady
part: its window is that whole span (`rule` NOT_HELD, which the table notes).

Open-loop stages (rate mode, trace replay: their records carry a `rate` or a `trace_line`) and
the warm-up (rung -1) keep the whole span (`rule` WHOLE): their load is the schedule's, not a
count of users to hold.

The sweep row's tokens per second count the completed requests' output tokens by the time each
chunk arrived inside the window (`TokenTimeline`, to the millisecond), its request rates the
completed requests that ended inside it; its latencies are those of the requests that overlap it
(in flight when it opened, or started inside it: the opening wave that built the held
concurrency is in, a request sent in the drain is out). The generator's health is the samples
inside it; the server's gauges (running, waiting, KV usage) are the scrapes inside it; its
counters (generated tokens, drafts, prefix cache) and the GPUs' energy counters rise over it,
read at the scrapes that bracket it (`bracket`: the last at or before its start, the first at or
after its end; the scraper samples every `scrape_interval` and at every stage boundary), so a
steady window's server figures are those of an interval up to one scrape interval wider on each
side.

Why the requests' times, not the stage's `started` / `finished` of the run file: tokens per
second is what the server delivered while the rung's requests were in flight. The stage's end is
when the ladder saw the rung complete (the last user reporting, up to a second later), which the
server spent idle, and the run file is absent from a bare records file.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE, WARMUP_PHASE, WARMUP_RUNG

HELD_SHARE = 0.95  # the share of the rung's concurrency in flight that makes its steady part
STEADY, NOT_HELD, WHOLE = "steady", "not_held", "whole"  # RungWindow.rule


def held_floor(users: int) -> int:
    """The requests (or sessions) in flight at which a rung of `users` holds its concurrency."""
    return max(1, math.ceil(HELD_SHARE * users - 1e-9))


def held_interval(starts: Sequence[float], ends: Sequence[float], users: int) -> tuple[float, float] | None:
    """From the first instant `held_floor(users)` intervals [start, end) overlap to the last
    instant they do (module docstring); None when they never do."""
    if not len(starts):
        return None
    times = np.concatenate((np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)))
    steps = np.concatenate((np.ones(len(starts), dtype=np.int64), -np.ones(len(ends), dtype=np.int64)))
    order = np.lexsort((steps, times))  # by time, an end (-1) before a start (+1) at one instant
    times, counts = times[order], np.cumsum(steps[order])
    (held,) = np.nonzero(counts >= held_floor(users))
    if not held.size:
        return None
    return float(times[held[0]]), float(times[min(held[-1] + 1, times.size - 1)])


@dataclass(frozen=True, slots=True)
class RungWindow:
    """One rung's (or the warm-up's) window, epoch seconds; built by `rung_window` alone.
    `first_start` / `last_end`: its requests' span (the ramp and the drain lie between them and
    the window); `rule`: STEADY, NOT_HELD (no steady part: the span) or WHOLE (the span)."""

    rung: int
    conc: int
    start: float
    end: float
    first_start: float = math.nan
    last_end: float = math.nan
    rule: str = WHOLE

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def ramp_s(self) -> float:
        return self.start - self.first_start if self.rule == STEADY else 0.0

    @property
    def drain_s(self) -> float:
        return self.last_end - self.end if self.rule == STEADY else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The json row's `window`."""
        return {
            "start": self.start,
            "end": self.end,
            "seconds": self.seconds,
            "rule": self.rule,
            "ramp_s": self.ramp_s,
            "drain_s": self.drain_s,
        }


def rung_window(
    rung: int, conc: int, starts: Sequence[float], ends: Sequence[float], *, held: bool = True
) -> RungWindow:
    """The window of a rung whose requests (or sessions) ran over [starts[i], ends[i]]; `held`:
    a concurrency rung, whose window is its steady part (module docstring)."""
    first, last = (min(starts), max(ends)) if len(starts) else (math.inf, -math.inf)
    steady = held_interval(starts, ends, conc) if held and rung != WARMUP_RUNG else None
    if steady is None:
        return RungWindow(rung, conc, first, last, first, last, NOT_HELD if held and len(starts) else WHOLE)
    return RungWindow(rung, conc, steady[0], steady[1], first, last, STEADY)


def span_window(rung: int, conc: int, start: float, end: float) -> RungWindow:
    """A window of rule WHOLE from `start` to `end` (the warm-up's, a running rung's so far)."""
    return rung_window(rung, conc, [start], [end], held=False)


@dataclass(slots=True)
class WindowEvents:
    """What one rung's window is computed from, fed one record at a time: every measured
    request's start and end, each session's span, and whether the stage was open-loop."""

    rung: int
    users: int
    starts: array[float] = field(default_factory=lambda: array("d"))
    ends: array[float] = field(default_factory=lambda: array("d"))
    sessions: dict[str, tuple[float, float]] = field(default_factory=dict)
    open_loop: bool = False

    def add(self, rec: RequestRecord) -> None:
        self.starts.append(rec.t_start)
        self.ends.append(rec.t_end)
        self.users = max(self.users, rec.users)
        if rec.rate is not None or rec.trace_line is not None:
            self.open_loop = True
        if rec.session is not None:
            start, end = self.sessions.get(rec.session, (rec.t_start, rec.t_end))
            self.sessions[rec.session] = (min(start, rec.t_start), max(end, rec.t_end))

    def merge(self, other: WindowEvents) -> None:
        self.starts.extend(other.starts)
        self.ends.extend(other.ends)
        self.users = max(self.users, other.users)
        self.open_loop = self.open_loop or other.open_loop
        for name, (start, end) in other.sessions.items():
            mine = self.sessions.get(name, (start, end))
            self.sessions[name] = (min(mine[0], start), max(mine[1], end))

    def window(self) -> RungWindow:
        """The rung's window (module docstring)."""
        starts, ends = self.starts, self.ends
        if self.sessions:
            spans = list(self.sessions.values())
            starts, ends = array("d", (s for s, _ in spans)), array("d", (e for _, e in spans))
        return rung_window(self.rung, self.users, starts, ends, held=not self.open_loop)


class RecordWindows:
    """The window of each measured rung and of the warm-up (rung -1), fed one record at a time
    (`RungTally.window` gives the same from a tally)."""

    def __init__(self) -> None:
        self._events: dict[int, WindowEvents] = {}

    def add(self, rec: RequestRecord) -> None:
        if rec.phase not in (MEASURE_PHASE, WARMUP_PHASE):
            return
        if rec.rung not in self._events:
            self._events[rec.rung] = WindowEvents(rec.rung, rec.users)
        self._events[rec.rung].add(rec)

    def windows(self) -> dict[int, RungWindow]:
        """By rung index, in ladder order (the warm-up first)."""
        return {rung: events.window() for rung, events in sorted(self._events.items())}


def record_windows(records: Iterable[RequestRecord]) -> dict[int, RungWindow]:
    """`RecordWindows` of the records."""
    found = RecordWindows()
    for rec in records:
        found.add(rec)
    return found.windows()


class TokenTimeline:
    """Output tokens by the millisecond they arrived (epoch ms -> tokens), fed one completed
    request at a time: each content chunk's tokens at its time (`chunk_tokens` where the server
    reported them, else the request's tokens shared evenly over its chunks; a request without
    chunks, not streamed: all of them at its end). Chunk times are batched and binned by numpy;
    the bins cost 8 bytes per millisecond of the rung's span."""

    BATCH = 1 << 16  # chunk times per batch

    def __init__(self) -> None:
        self._bins = np.zeros(0, dtype=np.float64)
        self._origin = 0  # the epoch millisecond of bins[0]
        self._seconds = array("d")  # chunk times (s after their request's start)
        self._micros = bytearray()  # the same as int32 microseconds (a records file's chunk index)
        self._heads: dict[str, tuple[array[float], array[int], array[float]]] = {
            kind: (array("d"), array("q"), array("d")) for kind in ("seconds", "micros")
        }  # per request: start, chunks, tokens per chunk

    def add(self, rec: RequestRecord, micros: bytes | None = None) -> None:
        """One completed request (`micros`: its chunk times from the chunk index)."""
        if micros is not None and len(micros) >= 4:
            n = len(micros) // 4
            self._micros += micros
            self._head("micros", rec.t_start, n, rec.output_tokens / n)
        elif rec.chunk_tokens is not None and len(rec.chunk_tokens) == len(rec.chunk_times) > 0:
            times = rec.t_start + np.asarray(rec.chunk_times, dtype=np.float64)
            self._deposit(times, np.asarray(rec.chunk_tokens, dtype=np.float64))
        elif rec.chunk_times:
            n = len(rec.chunk_times)
            self._seconds.extend(rec.chunk_times)
            self._head("seconds", rec.t_start, n, rec.output_tokens / n)
        elif rec.output_tokens:
            self._seconds.append(0.0)
            self._head("seconds", rec.t_end, 1, float(rec.output_tokens))
        if len(self._seconds) + len(self._micros) // 4 >= self.BATCH:
            self._flush()

    def _head(self, kind: str, start: float, chunks: int, each: float) -> None:
        starts, counts, shares = self._heads[kind]
        starts.append(start)
        counts.append(chunks)
        shares.append(each)

    def _flush(self) -> None:
        for kind, rel in (("seconds", self._seconds), ("micros", self._micros)):
            starts, counts, shares = self._heads[kind]
            if not counts:
                continue
            offsets = (
                np.frombuffer(rel, dtype=np.float64) if kind == "seconds" else np.frombuffer(rel, "<i4") / 1e6
            ).copy()
            repeat = np.array(counts, dtype=np.int64)  # copies: the arrays are emptied below
            times = np.repeat(np.array(starts, dtype=np.float64), repeat) + offsets
            self._deposit(times, np.repeat(np.array(shares, dtype=np.float64), repeat))
            for held in self._heads[kind]:
                del held[:]
        del self._seconds[:]
        del self._micros[:]

    def _deposit(self, times: np.ndarray, tokens: np.ndarray) -> None:
        if not times.size:
            return
        ms = np.floor(times * 1000.0).astype(np.int64)
        low, high = int(ms.min()), int(ms.max())
        if not self._bins.size:
            self._origin = low
        if low < self._origin:
            self._bins = np.concatenate((np.zeros(self._origin - low), self._bins))
            self._origin = low
        if high - self._origin >= self._bins.size:
            grown = max(high - self._origin + 1, 2 * self._bins.size)
            self._bins = np.concatenate((self._bins, np.zeros(grown - self._bins.size)))
        self._bins += np.bincount(ms - self._origin, weights=tokens, minlength=self._bins.size)

    def split(self, start: float, end: float) -> tuple[float, float, float]:
        """The tokens that arrived before `start`, from `start` to `end` and after `end` (s), to
        the millisecond (the milliseconds of the edges are inside)."""
        self._flush()
        low = min(max(math.floor(start * 1000.0) - self._origin, 0), self._bins.size)
        high = min(max(math.floor(end * 1000.0) - self._origin + 1, low), self._bins.size)
        sums = (self._bins[:low].sum(), self._bins[low:high].sum(), self._bins[high:].sum())
        return float(sums[0]), float(sums[1]), float(sums[2])

    def between(self, start: float, end: float) -> float:
        """The tokens that arrived from `start` to `end` (s), to the millisecond."""
        return self.split(start, end)[1]

    def merge(self, other: TokenTimeline) -> None:
        """Add the tokens of `other`."""
        other._flush()
        if other._bins.size:
            (nonzero,) = np.nonzero(other._bins)
            at = (nonzero + other._origin) / 1000.0 + 0.0005  # each bin's middle: the same bin
            self._deposit(at, other._bins[nonzero])
