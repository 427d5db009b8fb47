"""The report of `llmload trace-stats` (llmload.analysis.trace_stats): the window's size, its
input and output lengths, the request rate over time and the ideal prefix cache's hits."""

from __future__ import annotations

from llmload.analysis.trace_stats import TraceStats
from llmload.core.stats import Summary
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid


def _length_row(name: str, s: Summary) -> list[str]:
    return [name, str(s.count), fmt_num(s.mean), *(fmt_num(v) for v in s.percentiles.values())]


def render_trace_stats(stats: TraceStats) -> str:
    """The human-readable report (docs/traces.md shows one)."""
    labels = [f"p{q:g}" for q in stats.isl.percentiles]
    header = ["tokens", "count", "mean", *labels]
    lengths = grid(
        header,
        [_length_row("input_length (ISL)", stats.isl), _length_row("output_length (OSL)", stats.osl)],
        "table",
        align=["left", *["decimal"] * (len(header) - 1)],
    )
    cache = grid(
        ["capacity_blocks", "capacity_tokens", "cached_tokens", "hit_rate"],
        [
            [
                str(c.capacity_blocks),
                str(c.capacity_blocks * c.block_size),
                str(c.cached_tokens),
                f"{fmt_pct(c.hit_rate)} %",
            ]
            for c in stats.cache
        ],
        "table",
        align=["decimal", "decimal", "decimal", "left"],
    )
    return "\n".join(
        [
            f"{stats.lines} requests over {stats.duration_s:.2f} s; "
            f"input {stats.input_tokens} tokens, output {stats.output_tokens} tokens",
            "",
            lengths,
            "",
            f"requests/s per {stats.bin_s:g} s: {' '.join(fmt_num(r) for r in stats.rate)}",
            "",
            f"ideal prefix cache, {stats.cache[0].block_size}-token blocks, LRU:" if stats.cache else "",
            cache,
        ]
    )
