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

The sweep row's tokens per second count the completed requests' output tokens that arrived
inside the window (`TokenTimeline`: each chunk's spread over the gap since its request's previous
chunk, so an edge inside a server's step takes its share of that step), its request rates the
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

    def window(self, *, held: bool = True) -> RungWindow:
        """The rung's window (module docstring; `held` False: its whole span)."""
        starts, ends = self.starts, self.ends
        if self.sessions:
            spans = list(self.sessions.values())
            starts, ends = array("d", (s for s, _ in spans)), array("d", (e for _, e in spans))
        return rung_window(self.rung, self.users, starts, ends, held=held and not self.open_loop)


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
    """Output tokens by the time they arrived, fed one completed request at a time: each content
    chunk's tokens (`chunk_tokens` where the server reported them, else the request's tokens
    shared evenly over its chunks; a request without chunks, not streamed: all of them at its end)
    spread evenly over the gap since the request's previous chunk (its first chunk's at its time):
    a server's step writes every sequence's chunk at once, so a window's edge that falls inside a
    step counts the share of that step's tokens before it, not all or none of them at random.
    Kept as the cumulative tokens' slope and offset changes per BIN_MS (C(X) = X S(X) + O(X), S
    and O the running sums: exact at each bin's edge, linear between; 16 bytes per bin of the
    rung's span), filled by numpy in batches of chunk times. A rung longer than MAX_BINS bins, or a
    hand-made file's times beyond them, overflows it (`overflowed`): its window is then its whole
    span."""

    BATCH = 1 << 16  # chunk times per batch
    BIN_MS = 10.0  # the bins' width
    MAX_BINS = 1 << 24  # 46 h of 10 ms (256 MB): beyond, the timeline gives up

    def __init__(self) -> None:
        self._slope = np.zeros(0, dtype=np.float64)  # per ms from the origin: change of tokens per ms
        self._offset = np.zeros(0, dtype=np.float64)  # and of the offset (C(X) = X S(X) + O(X))
        self._origin = 0  # the bin (epoch ms / BIN_MS) of index 0
        self.overflowed = False
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
            self._deposit(times, np.asarray(rec.chunk_tokens, dtype=np.float64), np.zeros(1, dtype=np.int64))
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
            firsts = np.cumsum(repeat) - repeat
            self._deposit(times, np.repeat(np.array(shares, dtype=np.float64), repeat), firsts)
            for held in self._heads[kind]:
                del held[:]
        del self._seconds[:]
        del self._micros[:]

    def _deposit(self, times: np.ndarray, tokens: np.ndarray, firsts: np.ndarray) -> None:
        """Chunks at `times` (s) of `tokens`, requests one after another (`firsts`: where each
        request's chunks begin): each spread over the gap since its request's previous chunk."""
        if not times.size or self.overflowed:
            return
        ms = times * (1000.0 / self.BIN_MS)
        low, high = float(ms.min()), float(ms.max())
        if not (math.isfinite(low) and math.isfinite(high)) or not self._cover(
            math.floor(low), math.ceil(high) + 1
        ):
            self.overflowed = True
            return
        b = ms - self._origin
        a = np.empty_like(b)
        a[1:] = b[:-1]
        a[firsts] = b[firsts]  # a request's first chunk: at its time
        spread = b > a
        rate = np.where(spread, tokens / np.where(spread, b - a, 1.0), 0.0)
        size = self._slope.size
        at_a, at_b = np.ceil(a).astype(np.int64), np.ceil(b).astype(np.int64)
        self._slope += np.bincount(at_a, weights=rate, minlength=size) - np.bincount(
            at_b, weights=rate, minlength=size
        )
        # a point (a request's first chunk): all its tokens at once, from its millisecond on (so
        # an end's last chunk is inside a window that ends at it)
        points = np.bincount(
            np.floor(b).astype(np.int64), weights=np.where(spread, 0.0, tokens), minlength=size
        )
        offsets = np.bincount(at_b, weights=rate * b, minlength=size) + points
        self._offset += offsets - np.bincount(at_a, weights=rate * a, minlength=size)

    def _cover(self, low: int, high: int) -> bool:
        """Grow the arrays to hold the bins `low` to `high` (exclusive); False (and no change)
        when that would take more than MAX_BINS."""
        if (
            max(high, self._origin + self._slope.size) - min(low, self._origin if self._slope.size else low)
            > self.MAX_BINS
        ):
            return False
        if not self._slope.size:
            self._origin = low
        if low < self._origin:  # the offsets' meaning moves with the origin: O' = O - shift x S
            shift = self._origin - low
            self._offset = np.concatenate((np.zeros(shift), self._offset - shift * self._slope))
            self._slope = np.concatenate((np.zeros(shift), self._slope))
            self._origin = low
        if high - self._origin > self._slope.size:
            grown = min(max(high - self._origin, 2 * self._slope.size), self.MAX_BINS) - self._slope.size
            self._pad(grown)
        return True

    def _pad(self, bins: int) -> None:
        self._slope = np.concatenate((self._slope, np.zeros(bins)))
        self._offset = np.concatenate((self._offset, np.zeros(bins)))

    def _arrived(self, at: np.ndarray) -> np.ndarray:
        """The tokens arrived by each epoch second of `at` (linear between milliseconds)."""
        if not self._slope.size:
            return np.zeros(len(at))
        grid = np.arange(self._slope.size, dtype=np.float64)
        counted = grid * np.cumsum(self._slope) + np.cumsum(self._offset)
        arrived: np.ndarray = np.interp(
            np.asarray(at) * (1000.0 / self.BIN_MS) - self._origin, grid, counted, left=0.0, right=counted[-1]
        )
        return arrived

    def split(self, start: float, end: float) -> tuple[float, float, float]:
        """The tokens that arrived before `start`, from `start` to `end` and after `end` (s), to
        the millionth of a token (so that a file read in parts gives the same figures)."""
        self._flush()
        before, by_end, total = self._arrived(np.array([start, end, math.inf])).tolist()
        return round(before, 6), round(by_end - before, 6), round(total - by_end, 6)

    def between(self, start: float, end: float) -> float:
        """The tokens that arrived from `start` to `end` (s)."""
        return self.split(start, end)[1]

    def merge(self, other: TokenTimeline) -> None:
        """Add the tokens of `other`."""
        self._flush()
        other._flush()
        self.overflowed = self.overflowed or other.overflowed
        if not other._slope.size or self.overflowed:
            return
        low = min(self._origin, other._origin) if self._slope.size else other._origin
        high = max(self._origin + self._slope.size, other._origin + other._slope.size)
        if not (self._cover(low, high) and other._cover(low, high)):
            self.overflowed = True
            return
        size = max(self._slope.size, other._slope.size)
        for timeline in (self, other):
            timeline._pad(size - timeline._slope.size)
        self._slope += other._slope
        self._offset += other._offset
