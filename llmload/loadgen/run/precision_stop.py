"""The live end of a held rung: run to a stated precision (`precision`, `--precision PCT`, or by
default `llmload.core.config.DEFAULT_PRECISION` when no `requests_per_user` or `duration` ends it).

A held concurrency rung holds its users (each sends again as soon as its request
ends) until the 95 % interval of its agg tok/s (`llmload.analysis.interval`, and of TTFT p50 with
`precision_ttft`) is within +- PCT %, or until a cap: `precision_max_requests` completed requests
or `precision_max_s` seconds (the stage's deadline). The rule is evaluated on the master (or the
local process), which receives every record of every worker as it ends (`llmload_record`): this
module is one of the run's record sinks, and the ladder asks it (`due`) at its ticks, at most
once every CHECK_S seconds. When it is met, the master sends `llmload_rung_end`; the users send no
more and finish what is in flight, and the rung ends as any rung does.

The window of a rung still running is the rung's window (`llmload.analysis.run.window`, its
steady part) as its completed requests give it: a request still in flight is not in the count, so
the window ends before it started and every token counted in it is in. The rule needs at least
MIN_PER_USER completed requests per user first, and holds twice before it ends a rung: met at a
check, it must be met again once every user has completed one more request (an interval over ten
slices is itself noisy, and stopping at its first lucky dip under the asked precision left the
rung's final interval, over its whole window, wider than asked: docs/measurements.md). The
rung's figures and their interval in the table are taken after it ends, over its whole window;
the log line says how many requests it took.
"""

from __future__ import annotations

from llmload.analysis.interval import Interval, RungSlices
from llmload.analysis.run.metrics import ttft_ms
from llmload.analysis.run.window import TokenTimeline, WindowEvents
from llmload.core.config import SweepConfig
from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE
from llmload.loadgen.run.stage_protocol import StageProgress

CHECK_S = 1.0  # the rule is evaluated at most this often (the ladder ticks once a second)
MIN_PER_USER = 2  # completed requests per user before the rule may end a rung


class LiveRung:
    """A running rung's completed requests, as its window and interval need them."""

    def __init__(self, rung: int, users: int) -> None:
        self.events = WindowEvents(rung, users)
        self.timeline = TokenTimeline()
        self.slices = RungSlices()

    def add(self, rec: RequestRecord) -> None:
        self.events.add(rec)
        self.timeline.add(rec)
        first = rec.t_first if rec.t_first is not None else rec.t_end
        self.slices.add(first, ttft_ms(rec), rec.e2e_s)

    def intervals(self) -> dict[str, Interval]:
        """The intervals over the rung's window as its completed requests give it (module docstring)."""
        window = self.events.window()
        return self.slices.intervals(window.start, window.end, self.timeline)


class PrecisionStop:
    """A record sink of the run (its completed measured records), and the rule the ladder asks."""

    def __init__(self, config: SweepConfig) -> None:
        assert config.rung_precision is not None
        self.pct = config.rung_precision
        self.ttft = config.precision_ttft
        self.max_requests = config.precision_max_requests
        self.rungs: dict[int, LiveRung] = {}
        self.ended: set[int] = set()  # stages ended by the rule
        self.met_at: dict[int, int] = {}  # stage -> completed requests when the rule was first met
        self.checked = 0.0

    def __call__(self, rec: RequestRecord) -> None:
        if rec.phase == MEASURE_PHASE and rec.ok:
            if rec.rung not in self.rungs:
                self.rungs[rec.rung] = LiveRung(rec.rung, rec.users)
            self.rungs[rec.rung].add(rec)

    def due(self, progress: StageProgress, now: float) -> str | None:
        """The line to log when the running stage should end now (its precision reached or its
        requests capped), once; None while it runs on."""
        stage = progress.stage
        if stage.phase != MEASURE_PHASE or stage.start_at is None or stage.seq in self.ended:
            return None
        if now - self.checked < CHECK_S:
            return None
        self.checked = now
        live = self.rungs.get(stage.rung)
        done = len(live.slices) if live is not None else 0
        if live is None or done < MIN_PER_USER * stage.users:
            return None
        found = live.intervals()
        reached = self.reached(found)
        if done >= self.max_requests:
            self.ended.add(stage.seq)
            return f"{stage.name}: capped at {done} requests (precision_max_requests): {reached}"
        if not self._met(found):
            self.met_at.pop(stage.seq, None)
            return None
        first = self.met_at.setdefault(stage.seq, done)
        if done < first + stage.users:  # met once: again after one more request a user
            return None
        self.ended.add(stage.seq)
        return f"{stage.name}: {reached} after {done} requests: it ends (precision +-{self.pct:g} %)"

    def finished(self, progress: StageProgress) -> str | None:
        """At a stage's end: what a rung the rule did not end (its time cap) reached."""
        stage = progress.stage
        live = self.rungs.get(stage.rung)
        if stage.phase != MEASURE_PHASE or stage.seq in self.ended or live is None:
            return None
        found = live.intervals()
        return (
            f"{stage.name}: capped at precision_max_s: {self.reached(found)} after {len(live.slices)} "
            f"requests (asked +-{self.pct:g} %)"
        )

    def _met(self, found: dict[str, Interval]) -> bool:
        wanted = ("agg_tok_s", "ttft_p50_ms") if self.ttft else ("agg_tok_s",)
        return all(k in found and found[k].pct <= self.pct for k in wanted)

    def reached(self, found: dict[str, Interval]) -> str:
        """The precision reached, as the log says it: agg tok/s +-1.84 % (ttft p50 +-3.10 %)."""
        shown = [f"{k} +-{v.pct:.2f} %" for k, v in found.items() if self.ttft or k == "agg_tok_s"]
        return ", ".join(shown) or "no interval yet"
