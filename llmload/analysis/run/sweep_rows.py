"""The sweep table's vocabulary: records grouped into rungs, and the row of throughput figures
each rung gets (computed by `llmload.analysis.run.rung_tally.RungTally.row`, the one implementation of
these definitions: a rung's wall time and rates are tallied there and nowhere else).

A rung is identified by its index in the ladder (`RequestRecord.rung`), never by its concurrency:
a ladder may repeat a concurrency. Only measured records (phase "measure") count: the warm-up, the
determinism probes and the calibration requests (llmload.core.names) are excluded from everything.

Definitions (per rung):
- wall_s: the length of the rung's one window (llmload.analysis.run.window, docs/window.md: a
  concurrency rung's steady part, where ceil(0.95 c) requests were in flight, failed ones too;
  else first t_start to last t_end), the interval of every other per-rung figure; `window` in
  json: its start, end, seconds, rule, ramp and drain, and the tokens before, in and after it.
- tokens: output tokens of completed (outcome "ok") requests, all of them (ramp and drain too).
- agg_tok_s: the completed requests' tokens that arrived inside the window / wall_s (the whole
  span's window: tokens / wall_s).
- per_req_tok_s: mean over completed requests of output_tokens / (t_end - t_start).
- ttft_p50_ms: median of t_first - t_start over completed requests (linear interpolation).
- partial_tokens: output tokens received by failed requests; never counted in tokens or rates.
- estimated: at least one completed request had no usage: its tokens are estimated (see
  `StreamAccumulator.output_tokens`: max_tokens on finish_reason "length", else its chunks).
- partial: the rung did not finish (given by the caller, or fewer requests than expected).
- input_tokens: usage.prompt_tokens of completed requests (mean, min, max, p50, p99), the asked
  lengths (one, or drawn: their mean, p50, p99), the mean's miss in % and `off`, the requests more
  than a token off their own ask (llmload.analysis.run.reconcile.length_summary).
- output_tokens: the same of output tokens (`usage.completion_tokens`, or the client's count
  where usage is missing: `client_counted` requests) against each request's `max_tokens`; `off`:
  requests whose output was not exactly their max_tokens (the ones token reconciliation flags
  stopped_early, over_max_tokens or length_short).
- rate: rate mode, the rung's target request rate (the table shows it in place of `conc`).
- new_connections: requests that opened a connection (`conn_reused` false); with keep-alive one
  per user plus the reconnects; None when the records do not say (older runs).
- connect_ttft_ms: how much those connections raise ttft_p50_ms: the p50 less the p50 of TTFT
  without each new connection's own setup (its TCP handshake as the kernel timed it,
  `handshake_ms`, where recorded, else `connect_ms`; plus `tls_ms`).
- reasoning (a reasoning model's rung, else None): reasoning tokens (the server's count, else the
  client's), their share of `tokens`, the requests that reasoned, the client counted, never
  answered, the median TTFO and thinking time, and the odd stream events by name
  (`RungTally.reasoning_summary`; definitions in docs/reasoning.md).
- structured (tools or response_format, else None): the completed requests that carried them, of
  them those that stopped before max_tokens (such replies end on their own: max_tokens is a
  cap) and their share, and the answers checked against the response_format's schema, of them
  the valid ones and their share (`valid_share`; `RungTally.structured_summary`; definitions in
  docs/agent-traffic.md).
- tool_calls (a rung whose replies made tool calls, else None): the completed requests whose reply
  made one, the calls, replies of several calls, calls whose arguments are not a JSON object
  (`invalid`) and the valid share of the calls, 1 - invalid / calls (`RungTally.tool_summary`;
  definitions in docs/metrics.md).
- scheduled (rate mode, else None): TTFT and E2EL from each request's scheduled arrival (p50, p99),
  queue_wait's, and the requests that waited for a client slot (`waited`: sent more than 1 ms
  after their scheduled arrival) and their share (`RungTally.scheduled_summary`; definitions in
  llmload.analysis.run.metrics).
- waited / decoding_max: requests that waited for a place in the server's batch and the most
  streams decoding at once (llmload.analysis.run.steps.waited_requests); None without streams.
- saturated / generator: the load generator's own health during the rung (llmload.analysis.run.health),
  filled in by post-processing when the run has a health file.
- chunks_lower_bound: some completed request had more tokens than chunks and no usage per chunk:
  a closing chunk of empty text may then hold a token the client cannot tell from a closing
  message, so the rung's chunk counts (and its per-chunk ITL) are a lower bound.
- cache: the prefix cache's share of the rung's prompt tokens, from the completed requests whose
  usage said how many it served (`RungTally.cache`); None when none said.
- server: the server's own figures of the rung (llmload.analysis.run.server_metrics: running,
  waiting, KV usage, acceptance, its cache counters), filled in when the run scraped /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llmload.core.files.records import RequestRecord
from llmload.core.names import MEASURE_PHASE


@dataclass(slots=True)
class Rung:
    """The measured requests of one rung of the ladder, held (for the consumers that resample or
    compare records; its figures are those of `rung_tally.tally_rungs`)."""

    index: int
    users: int
    records: list[RequestRecord]

    @property
    def completed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]


def group_rungs(records: Iterable[RequestRecord], phase: str = MEASURE_PHASE) -> list[Rung]:
    """The records of one phase (measured, by default) grouped by rung index, in ladder order."""
    by_index: dict[int, list[RequestRecord]] = {}
    for rec in records:
        if rec.phase == phase:
            by_index.setdefault(rec.rung, []).append(rec)
    return [Rung(index=i, users=recs[0].users, records=recs) for i, recs in sorted(by_index.items())]


@dataclass(slots=True)
class SweepRow:
    """One row of the sweep table (full precision; rounding is the formatter's job)."""

    rung: int
    conc: int
    agg_tok_s: float
    per_req_tok_s: float | None  # None when no request completed
    tokens: int
    wall_s: float
    ttft_p50_ms: float | None
    requests: int
    failures: int
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    partial_tokens: int = 0
    estimated: bool = False
    partial: bool = False
    saturated: bool = False
    machine_busy: bool = False
    generator: dict[str, Any] | None = None
    new_connections: int | None = None  # requests that opened a connection; None: not recorded
    connect_ttft_ms: float | None = None  # ttft_p50_ms less the p50 of TTFT without handshake + TLS
    input_tokens: dict[str, Any] | None = None  # asked, mean, p50, p99, off... (reconcile.length_summary)
    timing_uncertainty: dict[str, Any] | None = (
        None  # llmload.analysis.run.uncertainty; None: every time exact
    )
    rate: float | None = None  # rate mode: the rung's target request rate (its users are client slots)
    output_tokens: dict[str, Any] | None = None  # the same of output lengths, + client_counted
    reasoning: dict[str, Any] | None = None  # reasoning models: rung_tally.RungTally.reasoning_summary
    waited: int | None = None  # requests that waited for a place in the batch (None: no streams)
    decoding_max: int | None = None  # the most of its streams decoding at once
    chunks_lower_bound: bool = False  # multi-token chunks without per-chunk usage
    cache: dict[str, Any] | None = None  # prefix cache share of the prompts (RungTally.cache)
    server: dict[str, Any] | None = None  # the server's figures (ServerRungMetrics.as_dict)
    window: dict[str, Any] | None = None  # the rung's one window: edges, seconds (= wall_s), ramp...
    structured: dict[str, Any] | None = None  # tools, response_format: RungTally.structured_summary
    tool_calls: dict[str, Any] | None = None  # replies with tool calls: RungTally.tool_summary
    interval: dict[str, Any] | None = None  # +- % of agg tok/s and TTFT p50 (llmload.analysis.interval)
    scheduled: dict[str, Any] | None = None  # rate mode, from the intended time: RungTally.scheduled_summary


@dataclass(frozen=True, slots=True)
class MissingRung:
    """A rung of the ladder without a single measured record: it started but the run stopped before
    its first request ended (`started`), or the run stopped before it began. The table lists it,
    marked, so a stopped run never looks shorter than its ladder."""

    rung: int
    conc: int
    started: bool
