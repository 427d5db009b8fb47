#!/usr/bin/env python3
"""A request's fixed CPU and a chunk's CPU in the load generator, solved from two output lengths.

    .venv/bin/python benchmarks/request_cost.py [--streams 64] [--tokens 16,128]
        [--tokens-per-chunk 1,4] [--step-ms 20] [--duration 12] [--repeats 3] [--baseline DIR]
        [--bare] [--aiohttp]

The client's CPU per request is, to a good approximation, a fixed part (sending the request,
reading its response head, building and handing over its record, Locust's request event) plus a
part per SSE chunk read. The benchmark runs the overhead benchmark's rungs (benchmarks/overhead.py:
one locust process, time-based rungs of `--streams` users, the simulator at a `--step-ms` step with
k tokens per chunk) once with short and once with long requests (`--tokens`), takes the CPU per
request of each (CPU per token x tokens per request), and solves the line through the two points:

    cpu per request = fixed + per_chunk x chunks per request

`--baseline DIR` runs another checkout's llmload in the same repeats, the two in turn first
(overhead.py's order), so before and after are measured side by side on one machine and load.
`--bare` and `--aiohttp` solve the same line for overhead.py's other clients in the same repeats:
a plain Locust user doing the least a streamed request needs (the floor under llmload's fixed
cost) and the asyncio client the ratio is taken against.
Figures are medians over the repeats of each repeat's solution. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402  (the sibling benchmark whose rungs and CPU tracking this reuses)


def solve(points: dict[int, float], per_chunk: int) -> tuple[float, float]:
    """(fixed s, per-chunk s) of the line through {tokens per request: CPU s per request}."""
    (t1, c1), (t2, c2) = sorted(points.items())
    n1, n2 = t1 / per_chunk, t2 / per_chunk
    slope = (c2 - c1) / (n2 - n1)
    return c1 - slope * n1, slope


def one_repeat(
    args: argparse.Namespace, root: Path, repeat: int
) -> dict[tuple[str, int], tuple[float, float]]:
    """(client, tokens per chunk) -> (fixed s, per-chunk s) of this repeat."""
    per_request: dict[tuple[str, int], dict[int, float]] = {}
    for k in args.chunking:
        for tokens in args.tokens:
            run_args = argparse.Namespace(**{**vars(args), "max_tokens": tokens})
            work = root / f"repeat{repeat}-chunk{k}-tokens{tokens}"
            work.mkdir(parents=True, exist_ok=True)
            for (client, _n), f in overhead.one_repeat(run_args, work, k, repeat).items():
                per_request.setdefault((client, k), {})[tokens] = f.cpu_s_per_1k * tokens / 1000.0
    return {key: solve(points, key[1]) for key, points in per_request.items()}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=_ints, default=[64])
    p.add_argument("--tokens", type=_ints, default=[16, 128], help="two output lengths (max_tokens)")
    p.add_argument("--tokens-per-chunk", type=_ints, default=[1, 4], dest="chunking")
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--duration", type=float, default=12.0, help="seconds per rung")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=overhead.SIM["max_num_seqs"])
    p.add_argument("--baseline", type=Path, default=None, help="another checkout, run in the same repeats")
    p.add_argument("--bare", action="store_true", help="also a plain Locust user (bare_locustfile.py)")
    p.add_argument("--aiohttp", action="store_true", help="also the asyncio client (aiohttp_client.py)")
    p.add_argument("--keep", type=Path, default=None, help="keep the runs' files in this directory")
    args = p.parse_args(argv)
    if len(args.tokens) != 2 or len(args.streams) != 1:
        p.error("--tokens takes two lengths and --streams one count")
    args.floor = False
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        overhead.checkout_env(args.baseline)  # a baseline that imports this code is no baseline
    print(f"machine: {overhead.machine()}", flush=True)
    print(
        f"{args.streams[0]} streams, step {args.step_ms:g} ms, {args.duration:g} s rungs, "
        f"tokens {args.tokens}"
    )
    solved: list[dict[tuple[str, int], tuple[float, float]]] = []
    with tempfile.TemporaryDirectory(prefix="llmload-request-cost-") as tmp:
        root = (args.keep or Path(tmp)).resolve()  # absolute: a baseline runs in its checkout
        for i in range(args.repeats):
            solved.append(one_repeat(args, root, i))
            print(f"repeat {i + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    print(f"median of {args.repeats} repeats (each repeat's line; min-max in brackets):")
    print("client    tok/chunk  fixed_ms_per_request          per_chunk_us")
    for key in sorted(solved[0]):
        fixed = [r[key][0] * 1e3 for r in solved]
        chunk = [r[key][1] * 1e6 for r in solved]
        print(
            f"{key[0]:<8}  {key[1]:>9}  {median(fixed):>6.3f} [{min(fixed):.3f}-{max(fixed):.3f}]"
            f"  {median(chunk):>10.1f} [{min(chunk):.1f}-{max(chunk):.1f}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
