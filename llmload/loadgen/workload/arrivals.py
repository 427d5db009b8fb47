"""Request-rate mode: a rung's arrival schedule, and handing it out to the users of a process.

A rung at rate r has n arrivals (`requests_per_rung`, or round(r * duration)): the first at the
rung's go time (`Stage.start_at`, the schedule's origin), then n - 1 gaps drawn from a gamma
distribution with shape `burstiness` and mean 1/r, as vLLM `bench serve` does (burstiness 1 is a
Poisson process; below 1 burstier, above 1 more regular; the gaps' coefficient of variation is
1/sqrt(burstiness)). The drawn gaps are then scaled by one common factor so that their mean is
exactly 1/r: each rung offers the load it names (500 Poisson gaps alone miss their rate by 4.5 %
at one sigma), and the shape of the distribution is unchanged. Seeded by (seed, rung index), so
every process computes the same schedule and a rerun repeats it.

Several processes: arrival j belongs to the process that holds slot j mod U of the rung's U
users (`slot_ranges`: each process's [lo, hi) range, by its share of the users), so together
the processes send exactly the one schedule, each in proportion to its users.

Within a process the users take the next arrival from a shared `ArrivalQueue` whenever they are
free, sleep until it is due and send it. When every user is busy a due arrival waits for the
next free user (the `max_concurrency` cap, like vLLM's semaphore); the wait, t_start minus the
scheduled time, is recorded with the request.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping, Sequence


def arrival_count(rate: float, requests: int | None, duration: float | None) -> int:
    """Arrivals in a rung: `requests`, else rate * duration (at least one)."""
    if requests is not None:
        return requests
    if duration is None:
        raise ValueError("a rate rung needs a request count or a duration")
    return max(1, round(rate * duration))


def arrival_offsets(
    rate: float, count: int, *, burstiness: float = 1.0, seed: int = 0, rung: int = 0
) -> list[float]:
    """Seconds after the rung's origin of each of `count` arrivals (the first at 0)."""
    if rate <= 0 or burstiness <= 0 or count < 1:
        raise ValueError("rate and burstiness must be > 0 and count >= 1")
    rng = random.Random(f"llmload-arrivals:{seed}:{rung}")
    gaps = [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(count - 1)]
    total = sum(gaps)
    scale = (count - 1) / rate / total if total > 0 else 1.0
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap * scale)
    return offsets


def slot_ranges(users_by_process: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Each process's [lo, hi) range of the rung's slots, in process-id order."""
    ranges: dict[str, tuple[int, int]] = {}
    lo = 0
    for process in sorted(users_by_process):
        hi = lo + users_by_process[process]
        ranges[process] = (lo, hi)
        lo = hi
    return ranges


def slot_indices(slots: tuple[int, int], total_slots: int, per_slot: int | None) -> Iterator[int]:
    """The request indices of a process whose users are slots [lo, hi) of a concurrency rung, so
    that all processes together take the indices one process would, without overlap: with
    `per_slot` requests per user (a count-bounded rung) the block [lo * per_slot, hi * per_slot);
    in a timed rung (`per_slot` None) the slots' indices in turn, lo..hi-1 of every round of
    `total_slots` (then the union is the one sequence but for the last, unfinished round)."""
    lo, hi = slots
    if per_slot is not None:
        return itertools.count(lo * per_slot)
    width = max(1, hi - lo)
    return (k // width * total_slots + lo + k % width for k in itertools.count())


class ArrivalQueue:
    """This process's arrivals of one rung (epoch seconds), taken in order by whichever user is free."""

    def __init__(
        self, origin: float, offsets: Sequence[float], slots: tuple[int, int], total_slots: int
    ) -> None:
        lo, hi = slots
        self._due = [(j, origin + off) for j, off in enumerate(offsets) if lo <= j % total_slots < hi]
        self._next = 0

    def __len__(self) -> int:
        return len(self._due)

    def take(self) -> tuple[int, float] | None:
        """(arrival index in the rung, scheduled epoch time) of the next arrival; None when all are taken."""
        if self._next >= len(self._due):
            return None
        item = self._due[self._next]
        self._next += 1
        return item
