"""What a request trace asks of a server, before it is replayed: lengths, rate over time, cache hits.

Definitions (over the lines of the replay window, `llmload.core.workload.trace_file`):
- ISL / OSL: `input_length` / `output_length` per line, summarized from raw values.
- rate over time: lines per bin of `bin_s` seconds of replay time (trace time / speed), as
  requests per second; the first bin starts at the window's start.
- ideal prefix-cache hit rate: the lines are played in timestamp order through the simulator's
  prefix cache model (`llmload.sim.prefix_cache`: blocks of `block_size` tokens, chained over the
  prefix, LRU with `capacity_blocks`, a hit never covering the prompt's last token). A block's
  identity comes from `hash_ids`: sub-block j of 512-token block i is the same exactly when the
  ids of blocks 0..i are the same. Lines without `hash_ids` share nothing. hit rate = cached
  tokens / input tokens. It is what a replay against `llmload-sim --prefix-cache-blocks N
  --block-size B` reports on either endpoint: the replay's prompts (`llmload.loadgen.workload.trace`) put
  token i of a line in 512-token block i // 512 whatever the server's overhead (BOS, chat
  template), and the simulator's cache units are its tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from llmload.core.stats import DEFAULT_PERCENTILES, Summary, summarize
from llmload.core.workload.trace_file import BLOCK_TOKENS, TraceLine
from llmload.sim.prefix_cache import PrefixCache


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """The ideal prefix cache of one size over the trace."""

    block_size: int
    capacity_blocks: int
    input_tokens: int
    cached_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(slots=True)
class TraceStats:
    lines: int
    duration_s: float  # first to last send time of the window (replay time)
    input_tokens: int
    output_tokens: int
    isl: Summary
    osl: Summary
    bin_s: float
    rate: list[float]  # requests/s per bin
    cache: list[CacheEstimate] = field(default_factory=list)


def block_ids(line: TraceLine, block_size: int, chains: dict[tuple[Hashable, int], int]) -> list[int]:
    """Cache keys of the full `block_size` blocks of a line's prompt (see the module docstring);
    `chains` interns (parent, hash id) -> prefix id across the lines of one trace."""
    if BLOCK_TOKENS % block_size:
        raise ValueError(f"block_size must divide {BLOCK_TOKENS}, got {block_size}")
    ids = line.hash_ids if line.hash_ids is not None else [-1] * -(-line.input_length // BLOCK_TOKENS)
    prefixes: list[int] = []
    parent: Hashable = None if line.hash_ids is not None else ("line", line.line)
    for hash_id in ids:
        parent = chains.setdefault((parent, hash_id), len(chains))
        prefixes.append(parent)
    per_block = BLOCK_TOKENS // block_size
    full = line.input_length // block_size
    return [prefixes[m // per_block] * per_block + m % per_block for m in range(full)]


def predicted_cached_tokens(lines: Sequence[TraceLine], block_size: int, capacity_blocks: int) -> list[int]:
    """Cached prompt tokens of each line, in order, under the ideal prefix cache."""
    cache = PrefixCache(block_size, capacity_blocks)
    chains: dict[tuple[Hashable, int], int] = {}
    return [cache.admit(block_ids(t, block_size, chains), t.input_length) for t in lines]


def rate_bins(offsets: Sequence[float], bin_s: float) -> list[float]:
    """Requests per second in consecutive bins of bin_s seconds from 0."""
    if not offsets:
        return []
    counts = [0] * (int(max(offsets) // bin_s) + 1)
    for off in offsets:
        counts[int(off // bin_s)] += 1
    return [n / bin_s for n in counts]


def trace_stats(
    window: Sequence[tuple[float, TraceLine]],
    *,
    bin_s: float = 10.0,
    block_size: int = 16,
    capacities: Sequence[int] = (),
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> TraceStats:
    """The statistics of a replay window ((offset, line) pairs, `replay_window`)."""
    if not window:
        raise ValueError("the trace window holds no line")
    offsets = [off for off, _ in window]
    lines = [t for _, t in window]
    isl = summarize([t.input_length for t in lines], percentiles)
    osl = summarize([t.output_length for t in lines], percentiles)
    assert isl is not None and osl is not None
    total_in = sum(t.input_length for t in lines)
    return TraceStats(
        lines=len(lines),
        duration_s=offsets[-1] - offsets[0],
        input_tokens=total_in,
        output_tokens=sum(t.output_length for t in lines),
        isl=isl,
        osl=osl,
        bin_s=bin_s,
        rate=rate_bins(offsets, bin_s),
        cache=[
            CacheEstimate(block_size, n, total_in, sum(predicted_cached_tokens(lines, block_size, n)))
            for n in capacities
        ],
    )
