"""Latency and throughput metrics per rung, with vLLM `bench serve` definitions.

Latencies come from completed (outcome "ok") requests and are summarized from raw values in ms
(`llmload.core.stats`: mean, median, population std, linear-interpolation percentiles):
- TTFT = t_first - t_start (first SSE message with non-empty `choices`, as vLLM; for a reasoning
  model, its first token of either kind: reasoning chunks are token chunks).
- TTFO (time to the first answer token; `ttft_content` is its older name) = t_first_content -
  t_start: the first answer (not reasoning) text, AIPerf's TTFO and guidellm's
  time_to_first_output_token. None for a request that never answered (all reasoning, cut by
  max_tokens): the rung counts those as `unanswered`.
- TTFTC (time to the first tool call; our name: AIPerf and guidellm define none) =
  t_first_tool_call - t_start: the first message carrying a piece of a tool call (its function's
  name or arguments: llmload.loadgen.stream.tool_calls). None for a reply without a tool call.
- think = t_first_content - t_first_reasoning: from the first reasoning token to the first
  answer token, for requests that reasoned and answered.
  None of these exists for a non-streamed request (`stream: false`): its one body arrives at the end, so
  TTFT, TPOT and ITL are left out ('-'), never shown as the end time.
- E2EL = t_end - t_start.
- TPOT per request = (E2EL - TTFT) / (output_tokens - 1); requests with <= 1 token are excluded.
- ITL = gaps between successive content chunks (`chunk_times`, recorded to the microsecond: the gaps
  are taken in whole microseconds), pooled over requests. When the
  server reports tokens per chunk (`chunk_tokens`), ITL is per token: the gap before a chunk of
  k tokens contributes k values of gap / k (so the ITL values of a request add up to its decode
  time and there is one per token after the first chunk, comparable with TPOT under speculative
  decoding). Chunks with 0 tokens contribute nothing; their gap is carried into the next
  token-bearing chunk. Without `chunk_tokens`, ITL is per chunk and `itl_per_chunk` is set when
  some request has more tokens than chunks (a chunk then spans several tokens).

Rates per rung, over its one window (llmload.analysis.run.window; wall_s its length); latencies are
those of the requests that overlap it (all of them for a whole-span window):
- output_tok_s = output tokens of completed requests that arrived in the window / wall_s (the
  sweep table's agg_tok/s).
- total_tok_s = (prompt tokens of the completed requests that ended in the window + output_tok_s's
  tokens) / wall_s; None when a completed request has no prompt_tokens.
- request_s = completed requests that ended in the window / wall_s.
- achieved_concurrency = the seconds each measured request (failed too) was in flight inside the
  window, summed, / wall_s (a whole-span window: sum of E2EL / wall_s).
- goodput_request_s = of those, the requests meeting every given SLO / wall_s (vLLM: a value meets
  its SLO when <= the limit; a 1-token request has TPOT 0; SLO keys not given are not checked).

Request-rate mode: queue_wait = t_start - t_scheduled (a due request waiting for a free client
slot; not part of TTFT or E2EL, as in vLLM); `rate` is the rung's target request rate. From the
intended time (`SCHEDULED_NAMES`, the sweep row's `scheduled`): ttft_sched = TTFT + queue_wait =
t_first - t_scheduled and e2el_sched = E2EL + queue_wait = t_end - t_scheduled, of completed
requests (capacity's rate probes judge their SLOs on these); a request `waited` when it was sent
more than WAITED_MS after its scheduled arrival (for a client slot, behind earlier due requests,
or for the generator's own loop).
input_tokens summarizes usage.prompt_tokens (the real input lengths).

Connections (llmload.loadgen.transport.connections): connect and tls summarize `connect_ms` / `tls_ms` of
the rung's requests that opened a connection (any outcome); both times are inside their TTFT.

Token reconciliation (`llmload.analysis.run.reconcile`, counts over completed requests): stopped_early
(fewer tokens than max_tokens without finish_reason "length": ignore_eos not honoured?),
disagree (usage, chunks, max_tokens and finish_reason do not add up), chunks_over_tokens.

A rung's metrics are computed by `llmload.analysis.run.rung_tally.RungTally.metrics` (the one
implementation, built on this module's per-request functions). `vllm_result()` gives a rung's
figures under the key names of vLLM `bench serve`'s result JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import repeat
from operator import mul, sub
from typing import Any

from llmload.core.files.records import RequestRecord
from llmload.core.stats import Summary

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
LATENCY_NAMES = ("ttft", "ttfo", "ttftc", "think", "tpot", "itl", "e2el", "queue_wait", "connect", "tls")
LATENCY_ALIASES = {"ttft_content": "ttfo"}  # an older name -> the figure it names
VLLM_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2el"}  # ours -> vLLM's name


SCHEDULED_NAMES = ("ttft_sched", "e2el_sched")  # rate mode: latencies from the scheduled arrival
WAITED_MS = 1.0  # a request sent later than this after its scheduled arrival waited


def queue_wait_ms(rec: RequestRecord) -> float | None:
    return None if rec.t_scheduled is None else (rec.t_start - rec.t_scheduled) * 1000.0


def from_arrival(metric: Callable[[RequestRecord], float | None]) -> Callable[[RequestRecord], float | None]:
    """A latency measured from the request's send, plus its wait for a client slot (rate mode;
    None without a scheduled arrival)."""

    def measured(rec: RequestRecord) -> float | None:
        value = metric(rec)
        wait = queue_wait_ms(rec)
        return None if value is None or wait is None else value + wait

    return measured


def connect_ms(rec: RequestRecord) -> float | None:
    return rec.connect_ms


def tls_ms(rec: RequestRecord) -> float | None:
    return rec.tls_ms


def ttft_ms(rec: RequestRecord) -> float | None:
    ttft = rec.ttft_s  # None for a non-streamed request: its one body is no first token
    return None if ttft is None else ttft * 1000.0


def ttfo_ms(rec: RequestRecord) -> float | None:
    """Time to the first answer token (module docstring); None without one, or not streamed."""
    if rec.t_first_content is None or not rec.stream:
        return None
    return (rec.t_first_content - rec.t_start) * 1000.0


ttft_content_ms = ttfo_ms  # its older name


def ttftc_ms(rec: RequestRecord) -> float | None:
    """Time to the first tool call (module docstring); None without one, or not streamed."""
    if rec.t_first_tool_call is None or not rec.stream:
        return None
    return (rec.t_first_tool_call - rec.t_start) * 1000.0


def think_ms(rec: RequestRecord) -> float | None:
    """First reasoning token to first answer token; None unless the request did both, streamed."""
    if rec.t_first_content is None or rec.t_first_reasoning is None or not rec.stream:
        return None
    return (rec.t_first_content - rec.t_first_reasoning) * 1000.0


def reasoned(rec: RequestRecord) -> bool:
    """Whether the request reasoned: reasoning tokens counted, or reasoning text streamed."""
    return bool(rec.reasoning_tokens) or rec.t_first_reasoning is not None


def unanswered(rec: RequestRecord) -> bool:
    """A streamed request that reasoned and never answered (max_tokens ended its thinking)."""
    return rec.stream and rec.t_first_content is None and reasoned(rec)


def e2el_ms(rec: RequestRecord) -> float:
    return rec.e2e_s * 1000.0


def tpot_ms(rec: RequestRecord) -> float | None:
    """(E2EL - TTFT) / (output_tokens - 1); None for requests with <= 1 token or no TTFT."""
    ttft = ttft_ms(rec)
    if ttft is None or rec.output_tokens <= 1:
        return None
    return (e2el_ms(rec) - ttft) / (rec.output_tokens - 1)


def _usable_chunk_tokens(rec: RequestRecord) -> list[int] | None:
    tokens = rec.chunk_tokens
    return tokens if tokens is not None and len(tokens) == len(rec.chunk_times) else None


def chunk_times_us(rec: RequestRecord) -> list[int]:
    """The chunk times in whole microseconds after t_start (the client records them to the µs)."""
    return list(map(round, map(mul, rec.chunk_times, repeat(1e6))))


def itl_gaps_us(rec: RequestRecord) -> list[int]:
    """The gaps between successive content chunks in whole microseconds (one per chunk after the
    first): the per-chunk ITL values of a request, in µs."""
    return gaps_us(rec.chunk_times)


def gaps_us(chunk_times: Sequence[float]) -> list[int]:
    """`itl_gaps_us` of a request's chunk times."""
    us = list(map(round, map(mul, chunk_times, repeat(1e6))))
    return list(map(sub, us[1:], us))


def itl_ms(rec: RequestRecord) -> list[float]:
    """The request's inter-token latencies in ms, from the chunk times in whole microseconds: per
    token when `chunk_tokens` is known (the gap before a chunk of k tokens gives k values of
    gap / k), else one value per chunk gap."""
    tokens = _usable_chunk_tokens(rec)
    if tokens is None:
        return [gap / 1000.0 for gap in itl_gaps_us(rec)]
    values: list[float] = []
    previous: int | None = None
    for t, k in zip(chunk_times_us(rec), tokens, strict=True):
        if k <= 0:
            continue
        if previous is not None:
            values.extend([(t - previous) / 1000.0 / k] * k)
        previous = t
    return values


def itl_is_per_chunk(rec: RequestRecord) -> bool:
    """True when this request's ITL values are per chunk although chunks carried several tokens."""
    return _usable_chunk_tokens(rec) is None and rec.output_tokens > rec.chunks


def meets_slo(rec: RequestRecord, slo: Mapping[str, float]) -> bool:
    """Whether a completed request meets every SLO given (keys ttft_ms, tpot_ms, e2el_ms)."""
    unknown = set(slo) - set(SLO_KEYS)
    if unknown:
        raise ValueError(f"unknown SLO keys {sorted(unknown)}; known: {list(SLO_KEYS)}")
    ttft = ttft_ms(rec)
    observed = {
        "ttft_ms": ttft,
        "tpot_ms": tpot_ms(rec) if rec.output_tokens > 1 else 0.0,
        "e2el_ms": e2el_ms(rec),
    }
    return all((value := observed[k]) is not None and value <= limit for k, limit in slo.items())


@dataclass(slots=True)
class RungMetrics:
    """Latency summaries (ms) and rates of one rung; a summary is None when it has no values."""

    rung: int
    conc: int
    completed: int
    latencies: dict[str, Summary | None]  # keyed by LATENCY_NAMES
    itl_per_chunk: bool
    output_tok_s: float
    total_tok_s: float | None
    request_s: float
    achieved_concurrency: float
    slo: dict[str, float]
    good_requests: int
    goodput_request_s: float
    stopped_early: int
    chunks_over_tokens: int
    disagree: int = 0  # completed requests whose token counts do not add up (llmload.analysis.run.reconcile)
    rate: float | None = None  # rate mode: the target request rate
    input_tokens: Summary | None = None  # usage.prompt_tokens of completed requests
    wall_s: float = 0.0
    reasoning: dict[str, Any] | None = None  # reasoning models: rung_tally.RungTally.reasoning_summary
    tool_calls: dict[str, Any] | None = None  # replies with tool calls: rung_tally.RungTally.tool_summary

    def as_dict(self) -> dict[str, Any]:
        skip = ("latencies", "input_tokens")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        out["latencies_ms"] = {k: None if s is None else s.as_dict() for k, s in self.latencies.items()}
        out["latencies_ms"] |= {old: out["latencies_ms"].get(new) for old, new in LATENCY_ALIASES.items()}
        out["input_tokens"] = None if self.input_tokens is None else self.input_tokens.as_dict()
        out["vllm"] = self.vllm_result()
        return out

    def vllm_result(self) -> dict[str, Any]:
        """The rung under vLLM `bench serve` result-file key names, where the meaning is the same."""
        out: dict[str, Any] = {
            "duration": self.wall_s,
            "completed": self.completed,
            "request_throughput": self.request_s,
            "request_goodput": self.goodput_request_s if self.slo else None,
            "output_throughput": self.output_tok_s,
            "total_token_throughput": self.total_tok_s,
            "max_concurrency": self.conc,
            "request_rate": self.rate if self.rate is not None else "inf",
        }
        for ours, theirs in VLLM_METRICS.items():
            s = self.latencies.get(ours)
            if s is None:
                continue
            out |= {f"mean_{theirs}_ms": s.mean, f"median_{theirs}_ms": s.median, f"std_{theirs}_ms": s.std}
            out |= {f"p{q:g}_{theirs}_ms": v for q, v in s.percentiles.items()}
        return out


ttft_sched_ms = from_arrival(ttft_ms)  # rate mode: t_first - t_scheduled
e2el_sched_ms = from_arrival(e2el_ms)  # rate mode: t_end - t_scheduled
