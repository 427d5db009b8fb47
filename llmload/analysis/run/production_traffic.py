"""Results of production-shaped traffic: metrics per session turn, and a trace replay's lateness.

Per rung and turn (sessions; completed measured requests whose record has a `turn`, grouped by
rung and turn index):
- requests: completed turns with that index;
- ttft_ms / ttft_content_ms: median TTFT (first message with choices) and median time to the
  first content, as in `llmload.analysis.run.metrics` (a chat server that sends the role-only delta
  before prefilling, like the simulator, shows the prefix cache in ttft_content);
- prompt_tokens: mean usage.prompt_tokens (turn k resends the history, so it grows with k);
- cached_tokens: mean prompt tokens the server reported as served by its prefix cache, None when
  no request of the turn reported it; cached_share = their sum / the sum of prompt_tokens.

Trace replay lateness (records with a `trace_line`): lateness = t_start - t_scheduled, the time a
request was sent after its scaled timestamp (waiting for a free client slot included). A rung
whose p99 lateness exceeds its bar (`lateness_bar_ms`: `LATE_P99_MS`, or the largest event-loop lag
the health sampler saw in the rung when that is larger) gets a warning: the generator fell behind
the trace. A send late by no more than the loop's own oversleep (greenlets woken late on a busy
machine) cannot be told from it, so it is no sign of a busy client slot or a saturated generator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmload.analysis.run.metrics import ttft_content_ms, ttft_ms
from llmload.analysis.run.rung_tally import RungTally
from llmload.core.files.records import RequestRecord
from llmload.core.names import rung_name
from llmload.core.stats import mean, percentile

LATE_P99_MS = 5.0  # a replay sends 99 % of its requests within this of their timestamps
VERY_LATE_MS = 100.0


@dataclass(frozen=True, slots=True)
class TurnMetrics:
    rung: int
    users: int
    turn: int
    requests: int
    ttft_ms: float | None
    ttft_content_ms: float | None
    prompt_tokens: float | None
    cached_tokens: float | None
    cached_share: float | None


def _median(values: list[float]) -> float | None:
    return percentile(values, 50.0) if values else None


def turn_metrics(records: Iterable[RequestRecord]) -> list[TurnMetrics]:
    """One row per rung and turn index of the completed measured session turns (module docstring)."""
    by_turn: dict[tuple[int, int, int], list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None and r.ok and r.phase == "measure":
            by_turn.setdefault((r.rung, r.users, r.turn), []).append(r)
    rows = []
    for (rung, users, turn), recs in sorted(by_turn.items()):
        prompts = [r.prompt_tokens for r in recs if r.prompt_tokens is not None]
        reported = [r for r in recs if r.cached_tokens is not None]
        cached = [r.cached_tokens or 0 for r in reported]
        prompt_of_reported = sum(r.prompt_tokens or 0 for r in reported)
        rows.append(
            TurnMetrics(
                rung=rung,
                users=users,
                turn=turn,
                requests=len(recs),
                ttft_ms=_median([v for v in map(ttft_ms, recs) if v is not None]),
                ttft_content_ms=_median([v for v in map(ttft_content_ms, recs) if v is not None]),
                prompt_tokens=mean(prompts) if prompts else None,
                cached_tokens=mean(cached) if cached else None,
                cached_share=sum(cached) / prompt_of_reported if reported and prompt_of_reported else None,
            )
        )
    return rows


def lateness_bar_ms(lag_max_ms: float | None) -> float:
    """The p99 lateness above which a trace-replay rung fell behind: `LATE_P99_MS`, or the rung's
    largest event-loop lag (`lag_max_ms` of its health, None when unknown) when that is larger."""
    return LATE_P99_MS if lag_max_ms is None else max(LATE_P99_MS, lag_max_ms)


def replay_warnings(rungs: Sequence[RungTally], loop_lag_ms: Mapping[int, float]) -> list[str]:
    """A warning for each trace-replay rung whose generator fell behind the schedule.
    `loop_lag_ms`: rung index -> the largest event-loop lag of the rung (`lateness_bar_ms`); a
    rung without it (no health samples, an older run) has the bar `LATE_P99_MS`."""
    warnings = []
    for rung in rungs:
        late = rung.trace_late_ms
        bar = lateness_bar_ms(loop_lag_ms.get(rung.index))
        if not late or (p99 := percentile(late, 99.0)) <= bar:
            continue
        very = sum(v > VERY_LATE_MS for v in late)
        warnings.append(
            f"{rung_name(rung.index, rung.users)}: the generator fell behind the trace: p99 lateness "
            f"{p99:.1f} ms > {bar:.4g} ms (the bar: {LATE_P99_MS:g} ms, or the event loop's own "
            f"largest lag in the rung if larger), {very} of {len(late)} requests more than "
            f"{VERY_LATE_MS:g} ms late (every client slot busy: raise max_concurrency; or the "
            "generator saturated: more --processes)"
        )
    return warnings
