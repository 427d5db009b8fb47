"""A rung's window: the one interval every per-rung figure is taken over (docs/metrics.md).

`rung_window` is the definition, and the one place to change it: from the rung's first measured
request's start to its last measured request's end, failed requests included (the sweep table's
`wall_s`). The sweep row's tokens per second, request rates and achieved concurrency divide by
it; latencies are those of the requests inside it (all of the rung's); the generator's health is
the samples inside it; the server's gauges (running, waiting, KV usage) are the scrapes inside
it; its counters (generated tokens, drafts, prefix cache) and the GPUs' energy counters rise over
it, read at the scrapes that bracket it (`bracket`: the last at or before its start, the first at
or after its end; the scraper samples at every stage boundary, while the server is idle), and
`generation_tok_s` divides the server's tokens by the same window.

Why the requests' interval, not the stage's `started` / `finished` of the run file: tokens per
second is what the server delivered while the rung's requests were in flight. The stage's end is
when the ladder saw the rung complete (the last user reporting, up to a second later), which the
server spent idle, and the run file is absent from a bare records file. The warm-up (rung -1) has
its window by the same rule, over its own requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE, WARMUP_PHASE


@dataclass(frozen=True, slots=True)
class RungWindow:
    """One rung's (or the warm-up's) window, epoch seconds; built by `rung_window` alone."""

    rung: int
    conc: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def as_dict(self) -> dict[str, Any]:
        """The json row's `window`."""
        return {"start": self.start, "end": self.end, "seconds": self.seconds}


def rung_window(rung: int, conc: int, first_start: float, last_end: float) -> RungWindow:
    """The rung's window from its requests' earliest start and latest end (module docstring)."""
    return RungWindow(rung, conc, first_start, last_end)


class RecordWindows:
    """The window of each measured rung and of the warm-up (rung -1), fed one record at a time
    (`RungTally.window` gives the same from a tally)."""

    def __init__(self) -> None:
        self._spans: dict[int, tuple[int, float, float]] = {}  # rung -> (users, first start, last end)

    def add(self, rec: RequestRecord) -> None:
        if rec.phase not in (MEASURE_PHASE, WARMUP_PHASE):
            return
        users, start, end = self._spans.get(rec.rung, (rec.users, rec.t_start, rec.t_end))
        self._spans[rec.rung] = (users, min(start, rec.t_start), max(end, rec.t_end))

    def windows(self) -> dict[int, RungWindow]:
        """By rung index, in ladder order (the warm-up first)."""
        return {rung: rung_window(rung, *span) for rung, span in sorted(self._spans.items())}


def record_windows(records: Iterable[RequestRecord]) -> dict[int, RungWindow]:
    """`RecordWindows` of the records."""
    found = RecordWindows()
    for rec in records:
        found.add(rec)
    return found.windows()
