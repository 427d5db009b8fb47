"""Describe a request trace before replaying it: lengths, request rate over time, prefix-cache hits.

    llmload trace-stats FILE [--speed S] [--start-s S] [--duration-s S] [--bin-s 10]
        [--block-size 16] [--cache-blocks N[,N...]] [--format table|json]

FILE is a Mooncake-style JSONL or CSV trace (`docs/traces.md`); the window and speed
options select what `mode: trace` with the same keys would send. The ideal hit rate is computed
for each cache size given (in blocks of --block-size tokens), and for an unbounded cache.
Definitions: `llmload.analysis.trace_stats`. Exit status: 0, or 2 for an unreadable or invalid
trace (one line naming the file, line and field).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from llmload.analysis.trace_stats import trace_stats
from llmload.core.checks import flag_type, number
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.workload.trace_file import BLOCK_TOKENS, replay_window
from llmload.core.workload.trace_formats import read_request_lines
from llmload.output.trace_report import render_trace_stats

MAX_CACHE_BLOCKS = 10**9  # 16 billion tokens of cache at 16-token blocks
MAX_BINS = 1_000_000  # of the request rate over time: a line of a million numbers is already unread


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected block counts like 1024,4096, got {text!r}") from None
    if not sizes or min(sizes) < 1 or max(sizes) > MAX_CACHE_BLOCKS:
        raise argparse.ArgumentTypeError(f"block counts must be in [1, {MAX_CACHE_BLOCKS}], got {text!r}")
    return sizes


def _checked(parse: Callable[[str], float], ok: Callable[[float], bool], what: str) -> Callable[[str], Any]:
    """An argparse type: `parse` the text, which must then satisfy `ok`."""

    def check(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return check


_block_size = _checked(int, lambda v: v >= 1 and BLOCK_TOKENS % v == 0, f"a divisor of {BLOCK_TOKENS}")


@command("llmload trace-stats")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload trace-stats", description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="trace file (JSONL or CSV)")
    p.add_argument(
        "--speed",
        type=flag_type(number(0, 1_000, above=True), "speed"),
        default=1.0,
        help="replay speed factor",
    )
    p.add_argument(
        "--start-s",
        type=flag_type(number(0, 1e9), "start_s"),
        default=0.0,
        help="window start (trace seconds)",
    )
    p.add_argument(
        "--duration-s",
        type=flag_type(number(0, 1e9, above=True), "duration_s"),
        default=None,
        help="window length (trace seconds)",
    )
    p.add_argument(
        "--bin-s",
        type=flag_type(number(0.001, 1e9), "bin_s"),
        default=10.0,
        help="bin of the request rate (replay seconds)",
    )
    p.add_argument("--block-size", type=_block_size, default=16, help="prefix-cache block, tokens")
    p.add_argument(
        "--cache-blocks", type=_sizes, default=[], help="cache capacities in blocks, e.g. 1024,4096"
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    args = p.parse_args(argv)
    try:
        window = replay_window(
            read_request_lines(args.trace), start_s=args.start_s, duration_s=args.duration_s, speed=args.speed
        )
    except ConfigError as exc:
        print(f"llmload trace-stats: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    if not window:
        print(f"llmload trace-stats: error: {args.trace}: no line in the window", file=sys.stderr)
        return BAD_INPUT
    span = max(offset for offset, _ in window)
    if span / args.bin_s >= MAX_BINS:
        print(
            f"llmload trace-stats: error: --bin-s {args.bin_s:g}: {span / args.bin_s:.3g} bins over the "
            f"window's {span:g} s; at most {MAX_BINS}: give a larger --bin-s",
            file=sys.stderr,
        )
        return BAD_INPUT
    unbounded = sum(t.input_length // args.block_size for _, t in window)
    stats = trace_stats(
        window, bin_s=args.bin_s, block_size=args.block_size, capacities=[*args.cache_blocks, unbounded]
    )
    if args.format == "json":
        print(json.dumps(asdict(stats), indent=1))
    else:
        print(render_trace_stats(stats))
    return OK
