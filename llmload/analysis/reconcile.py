"""Token reconciliation: does each completed request's token account add up?

Per completed request, the server's `usage.completion_tokens`, the number of content chunks, the
requested `max_tokens` and the `finish_reason` are compared:
- `stopped_early`: fewer tokens than max_tokens and finish_reason is not "length" (the server
  stopped at end-of-sequence: `ignore_eos` not honoured, or not requested).
- disagreements (`DISAGREE_KINDS`), each one a server (or parser) whose numbers do not add up:
  `over_max_tokens` (more tokens than asked for), `length_short` (finish_reason "length" with
  fewer tokens than max_tokens), `chunks_over_tokens` (more content chunks than tokens: usage
  undercounts). `no_usage` (no usage sent; tokens estimated by the client: max_tokens on
  finish_reason "length", else the content chunks) is counted and shown but is not a
  disagreement: there is no server count to disagree with, and the sweep table marks such
  figures as estimated (`*`). So a server that never sends usage does not fail the run.
`check_rung` turns a rung's counts into the message that fails a run beyond the configured ratios
(`reconcile:` in the config); the ladder applies it to every rung as the records arrive.

Input lengths (synthetic prompts, `prompt_tokens`): `input_summary` gives the input tokens a rung
really sent by the server's count (`usage.prompt_tokens` of completed requests: mean, min, max,
p50, p99) against what was asked (each record keeps its own asked length: drawn lengths differ
per request), how far the sent mean missed the asked mean (`miss_pct`, signed), and how many
requests were more than a token from their own ask (`off`); `check_inputs` fails the rung when
the mean missed by more than `input_tolerance` (default 2 %). Output lengths need no summary of
their own: each request's `max_tokens` is its asked (or drawn) length, checked above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.core.config import ReconcileConfig

DISAGREE_KINDS = ("over_max_tokens", "length_short", "chunks_over_tokens")


def issues(rec: Mapping[str, Any]) -> list[str]:
    """The reconciliation findings of one record (as a dict); [] for a request that adds up."""
    if rec.get("outcome", "ok") != "ok":
        return []
    tokens, max_tokens, finish = rec.get("output_tokens", 0), rec["max_tokens"], rec.get("finish_reason")
    found = []
    if tokens < max_tokens and finish != "length":
        found.append("stopped_early")
    if tokens > max_tokens:
        found.append("over_max_tokens")
    if finish == "length" and tokens < max_tokens and not rec.get("tokens_estimated"):
        found.append("length_short")
    if rec.get("chunks", 0) > tokens:
        found.append("chunks_over_tokens")
    if rec.get("tokens_estimated"):
        found.append("no_usage")
    return found


@dataclass(slots=True)
class Tally:
    """Counts of one rung: completed requests, stopped early, disagreeing, by kind."""

    completed: int = 0
    stopped_early: int = 0
    disagree: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    inputs: list[int] = field(default_factory=list)  # usage.prompt_tokens of completed requests
    inputs_asked: list[int] = field(default_factory=list)  # each one's asked length, when the records say it
    inputs_off: int = 0  # completed requests whose input missed its asked length by more than a token

    def add(self, rec: Mapping[str, Any]) -> None:
        if rec.get("outcome", "ok") != "ok":
            return
        self.completed += 1
        sent, asked = rec.get("prompt_tokens"), rec.get("prompt_tokens_asked")
        if sent is not None:
            self.inputs.append(sent)
            if asked is not None:
                self.inputs_asked.append(asked)
                self.inputs_off += abs(sent - asked) > 1
        found = issues(rec)
        self.stopped_early += "stopped_early" in found
        bad = [k for k in found if k in DISAGREE_KINDS]
        self.disagree += bool(bad)
        for kind in found:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def merge(self, other: Tally) -> None:
        """Add the counts of the requests that follow ours."""
        self.completed += other.completed
        self.stopped_early += other.stopped_early
        self.disagree += other.disagree
        for kind, n in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n
        self.inputs.extend(other.inputs)
        self.inputs_asked.extend(other.inputs_asked)
        self.inputs_off += other.inputs_off


def tally(records: Iterable[Mapping[str, Any]]) -> Tally:
    out = Tally()
    for rec in records:
        out.add(rec)
    return out


def check_rung(name: str, counts: Tally, limits: ReconcileConfig, *, ignore_eos: bool) -> str | None:
    """Why the rung fails reconciliation, or None when it is within the limits."""
    n = counts.completed
    if not n:
        return None
    problems = []
    if ignore_eos and counts.stopped_early / n > limits.max_stopped_early_ratio:
        problems.append(
            f"{counts.stopped_early} of {n} requests stopped before max_tokens although ignore_eos was sent "
            "(the server does not honour ignore_eos?; "
            f"reconcile.max_stopped_early_ratio {limits.max_stopped_early_ratio:g})"
        )
    if counts.disagree / n > limits.max_disagree_ratio:
        kinds = ", ".join(f"{k} x{counts.kinds[k]}" for k in DISAGREE_KINDS if counts.kinds.get(k))
        problems.append(
            f"{counts.disagree} of {n} requests' token counts disagree ({kinds}; "
            f"reconcile.max_disagree_ratio {limits.max_disagree_ratio:g})"
        )
    return f"{name}: " + "; ".join(problems) if problems else None


def _quantile(sorted_values: Sequence[int], q: float) -> int:
    """The nearest-rank q-quantile of sorted integers."""
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def input_summary(prompt_tokens: Sequence[int], asked: Sequence[int], off: int = 0) -> dict[str, Any] | None:
    """Input tokens sent (mean, min, max, p50, p99) and, when lengths were asked, what was asked
    (`asked`: the one length, or the asked lengths' mean when they differ; `asked_p50`,
    `asked_p99`), the signed miss of the mean in percent, and `off`: requests more than a token
    from their own asked length; None without values."""
    if not prompt_tokens:
        return None
    mean = sum(prompt_tokens) / len(prompt_tokens)
    ordered = sorted(prompt_tokens)
    summary: dict[str, Any] = {
        "asked": None,
        "mean": mean,
        "min": ordered[0],
        "max": ordered[-1],
        "p50": _quantile(ordered, 0.5),
        "p99": _quantile(ordered, 0.99),
        "miss_pct": None,
    }
    if asked:
        asked_sorted = sorted(asked)
        asked_mean = sum(asked) / len(asked)
        fixed = asked_sorted[0] == asked_sorted[-1]
        summary |= {
            "asked": asked_sorted[0] if fixed else asked_mean,
            "asked_p50": _quantile(asked_sorted, 0.5),
            "asked_p99": _quantile(asked_sorted, 0.99),
            "miss_pct": 100.0 * (mean - asked_mean) / asked_mean if asked_mean else None,  # 0: not a length
            "off": off,
        }
    return summary


def check_inputs(name: str, counts: Tally, tolerance: float) -> str | None:
    """Why the rung's inputs were not the asked length, or None when within `tolerance`."""
    summary = input_summary(counts.inputs, counts.inputs_asked, counts.inputs_off)
    if summary is None or summary["miss_pct"] is None or abs(summary["miss_pct"]) <= 100.0 * tolerance:
        return None
    return (
        f"{name}: input tokens mean {summary['mean']:.1f} (min {summary['min']}, max {summary['max']}) "
        f"missed prompt_tokens {summary['asked']:g} by {summary['miss_pct']:+.1f} % "
        f"(input_tolerance {100.0 * tolerance:g} %)"
    )
