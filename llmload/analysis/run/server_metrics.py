"""The server's own Prometheus counters during a run, read back from their scrape file and turned
into per-rung figures (the live scrape is `llmload.loadgen.monitor.scraper`).

During a run the master appends one line per scrape to `<prefix>_server_metrics.jsonl`:
`{"t": epoch seconds, "samples": {"name{labels}": value, ...}}` (only the metrics named in
`FAMILIES`), or `{"t": ..., "error": "..."}` when a scrape failed; each line is flushed as written.

One table maps the common quantities to each server family's metric names. Counters become
per-rung deltas, gauges per-rung means, over each rung's one window
(llmload.analysis.run.window: a concurrency rung's steady part, else its requests' span):
- a counter's delta is taken between the last sample at or before the window's start and the
  first sample at or after its end (`bracket`, the bracketing samples: the scraper samples at
  every stage boundary, while the server is idle, and every `--scrape-interval`). The bracket
  holds another stage's tokens only if it overlaps that stage's window, and then the rung is
  flagged `overlap`. The master learns a request's start only when its record arrives (at its
  end), so it cannot scrape at a steady window's edges live: such a bracket reaches up to one
  scrape interval into the ramp and the drain, and the client's tokens it is checked against
  (`client_tokens`) are those that arrived between the same two scrapes.
- generation_tok_s: the generated tokens' delta over the window's length (a steady window's:
  over its bracket, less what of it lies outside the rung's requests' span), the server's side
  of the sweep table's agg_tok/s (the same tokens over the same seconds, when every request
  completed: they agree within the tokens of one scrape interval).
- a gauge's mean is over the samples taken inside the window.
- accept_len = 1 + d(accepted) / d(drafts) from the speculative-decoding counters (vLLM,
  llama.cpp), else the mean of an accept-length gauge (SGLang).
- cache_hits / cache_queries: the prefix cache's counter deltas, in prompt tokens (vLLM
  `prefix_cache_hits` / `prefix_cache_queries`); cache_share = hits / queries, else the mean of
  SGLang's `cache_hit_rate` gauge. llama.cpp has no such metric (its records' `cache_n` do).
Only the warm-up and the measured rungs have a window (the determinism probes do not).
Label sets of one metric are summed (counters, request counts) or averaged (ratios), so
data-parallel ranks add up.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmload.analysis.run.window import STEADY, RecordWindows, RungWindow, TokenTimeline
from llmload.core.files.jsonl import iter_jsonl
from llmload.core.files.records import RequestRecord
from llmload.core.files.run_files import RunFiles
from llmload.core.names import MEASURE_PHASE, WARMUP_PHASE, WARMUP_RUNG, rung_name
from llmload.core.stats import mean

# quantity -> (kind, how label sets combine)
QUANTITIES: dict[str, tuple[str, str]] = {
    "generation_tokens": ("counter", "sum"),
    "spec_drafts": ("counter", "sum"),
    "spec_accepted": ("counter", "sum"),
    "running": ("gauge", "sum"),
    "waiting": ("gauge", "sum"),
    "kv_usage": ("gauge", "mean"),  # 0..1
    "accept_len_gauge": ("gauge", "mean"),
    "cache_queries": ("counter", "sum"),
    "cache_hits": ("counter", "sum"),
    "cache_hit_rate": ("gauge", "mean"),  # 0..1
}

# family -> quantity -> metric names (the first one present is used; older names come later)
FAMILIES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "generation_tokens": ("vllm:generation_tokens_total",),
        "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
        "spec_accepted": ("vllm:spec_decode_num_accepted_tokens_total",),
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    },
    "sglang": {
        "generation_tokens": ("sglang:generation_tokens_total",),
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "accept_len_gauge": ("sglang:spec_accept_length",),
        "cache_hit_rate": ("sglang:cache_hit_rate",),
    },
    "llamacpp": {
        "generation_tokens": ("llamacpp:tokens_predicted_total",),
        "spec_drafts": ("llamacpp:spec_decode_num_drafts_total",),
        "spec_accepted": ("llamacpp:spec_decode_num_accepted_tokens_total",),
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
    },
    "tgi": {
        # a histogram's sum, observed when a request ends (not per step)
        "generation_tokens": ("tgi_request_generated_tokens_sum",),
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
    },
}
FAMILY_PREFIXES = {"vllm": "vllm:", "sglang": "sglang:", "llamacpp": "llamacpp:", "tgi": "tgi_"}
KNOWN_NAMES = frozenset(name for fam in FAMILIES.values() for names in fam.values() for name in names)
TOKEN_TOLERANCE = 0.01  # relative disagreement of server and client token counts tolerated


def base_name(key: str) -> str:
    """'vllm:num_requests_running{model_name="m"}' -> 'vllm:num_requests_running'."""
    return key.partition("{")[0]


def detect_family(samples: Mapping[str, float]) -> str | None:
    """The server family whose metric prefix the samples use, or None."""
    for family, prefix in FAMILY_PREFIXES.items():
        if any(key.startswith(prefix) for key in samples):
            return family
    return None


def quantity(samples: Mapping[str, float], family: str, name: str) -> float | None:
    """One quantity of a scrape (label sets combined), or None if the server does not expose it."""
    _, combine = QUANTITIES[name]
    for metric in FAMILIES[family].get(name, ()):
        values = [v for k, v in samples.items() if base_name(k) == metric]
        if values:
            return sum(values) if combine == "sum" else mean(values)
    return None


def metrics_path(prefix: str | Path) -> Path:
    return RunFiles(Path(prefix)).server_metrics


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    values: dict[str, float]  # quantity -> value (only the quantities present)


def read_samples(path: Path) -> tuple[str | None, list[Sample]]:
    """(family, successful samples in time order) of a scrape file; unreadable lines skipped."""
    raw: list[tuple[float, dict[str, float]]] = []
    for _, data in iter_jsonl(path):
        try:
            if data is not None and "samples" in data:
                raw.append((float(data["t"]), dict(data["samples"])))
        except (ValueError, TypeError, KeyError):
            continue
    family = next((f for _, s in raw if (f := detect_family(s)) is not None), None)
    if family is None:
        return None, []
    samples = []
    for t, scraped in sorted(raw, key=lambda item: item[0]):
        values = {q: v for q in QUANTITIES if (v := quantity(scraped, family, q)) is not None}
        samples.append(Sample(t, values))
    return family, samples


# --- per-rung aggregation --------------------------------------------------------------------


@dataclass(slots=True)
class ServerRungMetrics:
    """The server's view of one stage (a rung, or the warm-up with rung -1)."""

    rung: int
    conc: int
    samples: int  # scrapes taken inside the window
    generation_tokens: float | None
    # tokens the client received in the stage (completed and failed requests; a steady window's:
    # its completed requests' tokens that arrived inside the bracket, rounded); None: no bracket
    client_tokens: int | None
    running: float | None
    waiting: float | None
    kv_usage: float | None
    accept_len: float | None
    overlap: bool  # the counters' bracket overlaps another stage's window
    bracket: tuple[float, float] | None = None  # the scrapes the generated tokens' delta is taken between
    generation_tok_s: float | None = None  # generation_tokens over the window (a steady one's: the bracket)
    cache_queries: float | None = None  # prompt tokens looked up in the prefix cache (counter delta)
    cache_hits: float | None = None  # of which it served (counter delta)
    cache_share: float | None = None  # hits / queries, or SGLang's hit-rate gauge (0..1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def counter_delta(
    samples: Sequence[Sample], times: Sequence[float], name: str, w: RungWindow
) -> tuple[float | None, tuple[float, float] | None]:
    """(delta, bracket) between the bracketing samples holding the counter, or (None, None)."""
    before = [s for s in samples[: bisect_right(times, w.start)] if name in s.values]
    after = [s for s in samples[bisect_left(times, w.end) :] if name in s.values]
    if not before or not after:
        return None, None
    first, last = before[-1], after[0]
    delta = last.values[name] - first.values[name]
    return (delta if delta >= 0 else None), (first.t, last.t)  # a negative delta: server restarted


def gauge_mean(inside: Sequence[Sample], name: str) -> float | None:
    """The mean of a gauge over the samples that hold it; None when none does."""
    values = [s.values[name] for s in inside if name in s.values]
    return mean(values) if values else None


def _accept_len(
    samples: Sequence[Sample], times: Sequence[float], w: RungWindow, inside: Sequence[Sample]
) -> float | None:
    drafts, _ = counter_delta(samples, times, "spec_drafts", w)
    accepted, _ = counter_delta(samples, times, "spec_accepted", w)
    if drafts and accepted is not None:
        return 1.0 + accepted / drafts
    return gauge_mean(inside, "accept_len_gauge")


# the client's output tokens of a stage: all of them, or those that arrived between two times
ClientTokens = int | Callable[[float, float], float]


def client_tokens(
    records: Iterable[RequestRecord],
) -> tuple[dict[int, ClientTokens], list[int], list[RungWindow]]:
    """Output tokens the client received per rung index (warm-up and failed requests too; a
    rung with a steady window: its completed requests' tokens between two times), the rungs
    with a failed request, and the windows of the warm-up and of each measured rung; one pass
    over the records."""
    client: dict[int, int] = {}
    timelines: dict[int, TokenTimeline] = {}
    failed: set[int] = set()
    windows = RecordWindows()
    for rec in records:
        if rec.phase not in (MEASURE_PHASE, WARMUP_PHASE):
            continue
        windows.add(rec)
        client[rec.rung] = client.get(rec.rung, 0) + rec.output_tokens
        if rec.ok:
            timelines.setdefault(rec.rung, TokenTimeline()).add(rec)
        else:
            failed.add(rec.rung)
    found = windows.windows()
    given: dict[int, ClientTokens] = {
        rung: timelines[rung].between if found[rung].rule == STEADY and rung in timelines else tokens
        for rung, tokens in client.items()
    }
    return given, sorted(failed), list(found.values())


def rung_server_metrics(
    samples: Sequence[Sample], windows: Sequence[RungWindow], client: Mapping[int, ClientTokens]
) -> list[ServerRungMetrics]:
    """Per-stage server figures (see the module docstring for the window rules); `client`: output
    tokens the client received per rung index (`client_tokens`)."""
    times = [s.t for s in samples]
    out = []
    for w in windows:
        inside = samples[bisect_left(times, w.start) : bisect_right(times, w.end)]
        tokens, bracket = counter_delta(samples, times, "generation_tokens", w)
        overlap = bracket is not None and any(
            o is not w and o.start < bracket[1] and o.end > bracket[0] for o in windows
        )
        given = client.get(w.rung, 0)
        received = given if not callable(given) else round(given(*bracket)) if bracket else None
        seconds = _generating_s(w, bracket)
        out.append(
            ServerRungMetrics(
                rung=w.rung,
                conc=w.conc,
                samples=len(inside),
                generation_tokens=tokens,
                client_tokens=received,
                running=gauge_mean(inside, "running"),
                waiting=gauge_mean(inside, "waiting"),
                kv_usage=gauge_mean(inside, "kv_usage"),
                accept_len=_accept_len(samples, times, w, inside),
                overlap=overlap,
                bracket=bracket,
                generation_tok_s=None if tokens is None or seconds <= 0 else tokens / seconds,
                **_cache(samples, times, w, inside),
            )
        )
    return out


def _generating_s(w: RungWindow, bracket: tuple[float, float] | None) -> float:
    """The seconds the server's tokens of a bracket are divided by: the window's, or a steady
    window's bracket (its scrapes inside the rung's requests' span: the ramp's and the drain's
    tokens they hold are counted) less what of it lies outside that span."""
    if bracket is None or w.rule != STEADY:
        return w.seconds
    return min(bracket[1], w.last_end) - max(bracket[0], w.first_start)


def _cache(
    samples: Sequence[Sample], times: Sequence[float], w: RungWindow, inside: Sequence[Sample]
) -> dict[str, float | None]:
    """The prefix cache's figures of a window (module docstring)."""
    queries, _ = counter_delta(samples, times, "cache_queries", w)
    hits, _ = counter_delta(samples, times, "cache_hits", w)
    share = hits / queries if queries and hits is not None else gauge_mean(inside, "cache_hit_rate")
    return {"cache_queries": queries, "cache_hits": hits, "cache_share": share}


def run_accept_len(samples: Sequence[Sample]) -> float | None:
    """Acceptance length over the whole scrape file (first to last sample)."""
    if len(samples) < 2:
        return None
    w = RungWindow(0, 0, samples[0].t, samples[-1].t)  # the whole file, not a rung
    return _accept_len(samples, [s.t for s in samples], w, samples)


def token_warnings(metrics: Sequence[ServerRungMetrics], failed_rungs: Sequence[int] = ()) -> list[str]:
    """Cross-check: the server's generated tokens per stage against what the client received.

    The server generates every token the client receives, so fewer server tokens is always an
    error. More is expected only when requests failed (tokens generated but never delivered)."""
    out = []
    for m in metrics:
        if m.generation_tokens is None or m.client_tokens is None or m.overlap:
            continue
        name = rung_name(m.rung, m.conc)
        server, client = m.generation_tokens, m.client_tokens
        if server < client * (1 - TOKEN_TOLERANCE):
            out.append(f"{name}: server generated {server:.0f} tokens but the client received {client:.0f}")
        elif server > client * (1 + TOKEN_TOLERANCE) + 1 and m.rung not in failed_rungs:
            out.append(
                f"{name}: server generated {server:.0f} tokens, the client received {client:.0f} "
                "(another client on the server?)"
            )
    return out


@dataclass(slots=True)
class ServerMetrics:
    """What post-processing derived from a run's scrape file."""

    family: str
    rungs: list[ServerRungMetrics]  # warm-up included (rung -1)
    run_generation_tokens: float | None  # last minus first sample over the whole file
    run_accept_len: float | None  # over the whole file
    warnings: list[str]

    @property
    def measured(self) -> list[ServerRungMetrics]:
        return [m for m in self.rungs if m.rung != WARMUP_RUNG]


def load_server_metrics(prefix: str | Path, records: Iterable[RequestRecord]) -> ServerMetrics | None:
    """Per-rung server metrics of a run, or None without a scrape file or samples."""
    if not metrics_path(prefix).exists():
        return None
    return server_metrics_of(prefix, *client_tokens(records))


def server_metrics_of(
    prefix: str | Path,
    client: Mapping[int, ClientTokens],
    failed: Sequence[int],
    windows: Sequence[RungWindow],
) -> ServerMetrics | None:
    """`load_server_metrics` with the client's tokens per rung index, the rungs with a failed
    request and the windows already found (`client_tokens`, or the post-processor's tallies)."""
    path = metrics_path(prefix)
    if not path.exists():
        return None
    family, samples = read_samples(path)
    if family is None or not samples:
        return None
    metrics = rung_server_metrics(samples, windows, client)
    gen = [s.values["generation_tokens"] for s in samples if "generation_tokens" in s.values]
    return ServerMetrics(
        family=family,
        rungs=metrics,
        run_generation_tokens=(gen[-1] - gen[0]) if len(gen) >= 2 else None,
        run_accept_len=run_accept_len(samples),
        warnings=token_warnings(metrics, failed),
    )
