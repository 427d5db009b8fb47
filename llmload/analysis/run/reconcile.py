"""Token reconciliation: does each completed request's token account add up?

Per completed request, the server's `usage.completion_tokens`, the number of content chunks, the
requested `max_tokens` and the `finish_reason` are compared:
- `stopped_early`: fewer tokens than max_tokens and finish_reason is not "length" (the server
  stopped at end-of-sequence: `ignore_eos` not honoured, or not requested).
- disagreements (`DISAGREE_KINDS`), each one a server (or parser) whose numbers do not add up:
  `over_max_tokens` (more tokens than asked for), `length_short` (finish_reason "length" with
  fewer tokens than max_tokens), `chunks_over_tokens` (more content chunks than tokens: usage
  undercounts), `reasoning_over_tokens` (the server counted more reasoning tokens than output
  tokens: its usage contradicts itself). `no_usage` (no usage sent; tokens estimated by the
  client: max_tokens on finish_reason "length", else the content chunks) is counted and shown but is not a
  disagreement: there is no server count to disagree with, and the sweep table marks such
  figures as estimated (`*`). So a server that never sends usage does not fail the run.
`check_rung` turns a rung's counts into the message that fails a run beyond the configured ratios
(`reconcile:` in the config); the ladder applies it to every rung as the records arrive.

Lengths asked vs sent, input and output alike (`LengthTally`, one per direction in a `Tally`;
`length_summary` is the one summary of both): per rung, the sent lengths of completed requests
(mean, min, max, p50, p99) against what each request asked (each record keeps its own asked
length: drawn lengths differ per request), how far the sent mean missed the asked mean
(`miss_pct`, signed), and `off`: requests whose sent length differed from their own ask.
- Inputs (`inputs`): sent is `usage.prompt_tokens`, asked `prompt_tokens_asked` (synthetic
  prompts); off means more than a token away (a prompt is cut to its length within a token).
  `check_inputs` fails the rung when the mean missed by more than `input_tolerance` (default 2 %).
- Outputs (`outputs`): sent is `output_tokens` (`usage.completion_tokens`, or the client's count
  when the server sent no usage: `client_counted` says on how many requests), asked `max_tokens`;
  off means any difference, and is judged by `issues` itself: a request is off when it finds
  `stopped_early`, `over_max_tokens` or `length_short` (`OFF_KINDS`, disjoint), which is every
  request whose output is not its max_tokens (a client count without usage is max_tokens on
  finish_reason "length", else the content chunks: one short of its ask is `stopped_early`). So
  a rung's output `off` is the sum of those counts, and the run fails on it through `check_rung`
  (with ignore_eos, at the default ratios of 0): the summary and the check agree by construction.
The lengths are kept as histograms (length -> how many), so a rung of a million requests costs
the distinct lengths, not a million integers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmload.core.config import ReconcileConfig
from llmload.core.files.records import OUTCOME_OK, RequestRecord
from llmload.core.stats import summarize_counts

DISAGREE_KINDS = ("over_max_tokens", "length_short", "chunks_over_tokens", "reasoning_over_tokens")
OFF_KINDS = ("stopped_early", "over_max_tokens", "length_short")  # an output that is not its max_tokens
INPUT_SLACK = 1  # tokens an input may be off its ask (a prompt is cut to its length within a token)


def issues(rec: Mapping[str, Any]) -> list[str]:
    """The reconciliation findings of one record (as a dict); [] for a request that adds up."""
    if rec.get("outcome", "ok") != "ok":
        return []
    return _issues(
        rec.get("output_tokens", 0),
        rec["max_tokens"],
        rec.get("finish_reason"),
        rec.get("chunks", 0),
        bool(rec.get("tokens_estimated")),
        _server_reasoning(rec),
    )


def _server_reasoning(rec: Mapping[str, Any]) -> int | None:
    """A record's (dict's) reasoning tokens when the server counted them, else None."""
    count = rec.get("reasoning_tokens")
    return count if type(count) is int and not rec.get("reasoning_counted") else None


def _issues(
    tokens: int,
    max_tokens: int,
    finish: str | None,
    chunks: int,
    estimated: bool,
    reasoning: int | None = None,
) -> list[str]:
    """`issues` of a completed request, from its fields."""
    found = []
    if tokens < max_tokens and finish != "length":
        found.append("stopped_early")
    if tokens > max_tokens:
        found.append("over_max_tokens")
    if finish == "length" and tokens < max_tokens and not estimated:
        found.append("length_short")
    if chunks > tokens:
        found.append("chunks_over_tokens")
    if reasoning is not None and reasoning > tokens and not estimated:
        found.append("reasoning_over_tokens")
    if estimated:
        found.append("no_usage")
    return found


@dataclass(slots=True)
class LengthTally:
    """Lengths of a rung's completed requests in one direction (input or output): sent length ->
    how many, asked length -> how many (of the requests that say what they asked), how many were
    more than `slack` tokens off their own ask, and how many sent lengths the client counted."""

    slack: int = 0
    sent: Counter[int] = field(default_factory=Counter)
    asked: Counter[int] = field(default_factory=Counter)
    off: int = 0
    client_counted: int = 0

    def add(self, sent: int, asked: int | None, *, client: bool = False, off: bool | None = None) -> None:
        """One completed request's lengths; `off`: whether it is off its ask, when the caller
        judges that (outputs: by token reconciliation's findings), else more than `slack` away."""
        self.sent[sent] += 1
        self.client_counted += client
        if asked is not None:
            self.asked[asked] += 1
            self.off += abs(sent - asked) > self.slack if off is None else off

    def merge(self, other: LengthTally) -> None:
        self.sent.update(other.sent)
        self.asked.update(other.asked)
        self.off += other.off
        self.client_counted += other.client_counted

    def summary(self, *, counted_by: bool = False) -> dict[str, Any] | None:
        """`length_summary` of these lengths (`counted_by`: say how many the client counted)."""
        return length_summary(self.sent, self.asked, self.off, self.client_counted if counted_by else None)


@dataclass(slots=True)
class Tally:
    """Counts of one rung: completed requests, stopped early, disagreeing, by kind; and the input
    and output lengths, asked against sent."""

    completed: int = 0
    stopped_early: int = 0
    disagree: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    inputs: LengthTally = field(default_factory=lambda: LengthTally(INPUT_SLACK))  # usage.prompt_tokens
    outputs: LengthTally = field(default_factory=LengthTally)  # output_tokens against max_tokens

    def add(self, rec: Mapping[str, Any]) -> None:
        """One record, as its dict (a line of a records file)."""
        if rec.get("outcome", "ok") != "ok":
            return
        tokens, max_tokens = rec.get("output_tokens", 0), rec["max_tokens"]
        found = _issues(
            tokens,
            max_tokens,
            rec.get("finish_reason"),
            rec.get("chunks", 0),
            bool(rec.get("tokens_estimated")),
            _server_reasoning(rec),
        )
        self._count(rec.get("prompt_tokens"), rec.get("prompt_tokens_asked"), tokens, max_tokens, found)

    def add_record(self, rec: RequestRecord) -> None:
        """One record (as the ladder receives them: no dict to read)."""
        if rec.outcome != OUTCOME_OK:
            return
        tokens, max_tokens = rec.output_tokens, rec.max_tokens
        reasoning = None if rec.reasoning_counted else rec.reasoning_tokens
        found = _issues(tokens, max_tokens, rec.finish_reason, rec.chunks, rec.tokens_estimated, reasoning)
        self._count(rec.prompt_tokens, rec.prompt_tokens_asked, tokens, max_tokens, found)

    def _count(
        self, sent: int | None, asked: int | None, tokens: int, max_tokens: int, found: list[str]
    ) -> None:
        """A completed request: its input lengths, its output tokens against max_tokens, its findings."""
        self.completed += 1
        if sent is not None:
            self.inputs.add(sent, asked)
        off = any(k in OFF_KINDS for k in found)
        self.outputs.add(tokens, max_tokens, client="no_usage" in found, off=off)
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
        self.inputs.merge(other.inputs)
        self.outputs.merge(other.outputs)


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


def _p50_p99(counts: list[tuple[int, int]]) -> tuple[float, float]:
    """The 50th and 99th percentiles (`llmload.core.stats`'s one percentile) of a histogram
    [(length, how many), ...] with at least one value."""
    found = summarize_counts(dict(counts), (50.0, 99.0))
    if found is None:
        raise ValueError("percentiles of no lengths")
    return found.percentiles[50.0], found.percentiles[99.0]


def length_summary(
    sent: Mapping[int, int], asked: Mapping[int, int], off: int = 0, client_counted: int | None = None
) -> dict[str, Any] | None:
    """The lengths sent (a histogram: length -> how many; mean, min, max, p50, p99: the one
    percentile, `llmload.core.stats`) and, when lengths were asked, what was asked (`asked`: the
    one length, or the asked lengths' mean when they differ; `asked_p50`, `asked_p99`), the signed
    miss of the mean in percent, and `off`: requests off their own ask; `client_counted` (when
    given): how many sent lengths are the client's count (no usage). None without values. Inputs
    and outputs alike."""
    ordered = sorted((v, n) for v, n in sent.items() if n > 0)
    total = sum(n for _, n in ordered)
    if not total:
        return None
    mean = sum(v * n for v, n in ordered) / total  # exact integer sum, as the records hold
    summary: dict[str, Any] = {
        "asked": None,
        "mean": mean,
        "min": ordered[0][0],
        "max": ordered[-1][0],
        **dict(zip(("p50", "p99"), _p50_p99(ordered), strict=True)),
        "miss_pct": None,
    }
    if client_counted is not None:
        summary["client_counted"] = client_counted
    wanted = sorted((v, n) for v, n in asked.items() if n > 0)
    asked_total = sum(n for _, n in wanted)
    if asked_total:
        asked_mean = sum(v * n for v, n in wanted) / asked_total
        fixed = len(wanted) == 1
        summary |= {
            "asked": wanted[0][0] if fixed else asked_mean,
            **dict(zip(("asked_p50", "asked_p99"), _p50_p99(wanted), strict=True)),
            "miss_pct": 100.0 * (mean - asked_mean) / asked_mean if asked_mean else None,  # 0: not a length
            "off": off,
        }
    return summary


def check_inputs(name: str, counts: Tally, tolerance: float) -> str | None:
    """Why the rung's inputs were not the asked length, or None when within `tolerance`."""
    summary = counts.inputs.summary()
    if summary is None or summary["miss_pct"] is None or abs(summary["miss_pct"]) <= 100.0 * tolerance:
        return None
    return (
        f"{name}: input tokens mean {summary['mean']:.1f} (min {summary['min']}, max {summary['max']}) "
        f"missed prompt_tokens {summary['asked']:g} by {summary['miss_pct']:+.1f} % "
        f"(input_tolerance {100.0 * tolerance:g} %)"
    )
