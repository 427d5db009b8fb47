"""Write the sample trace `config/sample-trace.jsonl`: synthetic, seeded, in the Mooncake format.

    python scripts/make_sample_trace.py [--lines 500] [--rate 10] [--seed 16] [--out FILE]

Arrivals are Poisson at `--rate` requests/s with gaps of at least 40 ms (so a replay at speed 5
still sends every request at least 8 ms after the previous one, and the server sees them in
trace order). Prompts are built from 512-token blocks with shared prefixes the way production
traffic shares them: 30 % of requests continue one of the 50 requests before them (its full
blocks, as a later turn of a conversation would), 50 % start with one of 8 system prompts (1-4
blocks, picked with Zipf-like weights), 20 % share nothing; every request ends with 1-3 blocks
of its own, the last one partial.
Output lengths are 8-128 tokens. The same arguments always write the same file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from pathlib import Path

BLOCK = 512
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "config" / "sample-trace.jsonl"


def sample_trace(lines: int, rate: float, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    ids = itertools.count(1)
    systems = [[next(ids) for _ in range(rng.randint(1, 4))] for _ in range(8)]
    weights = [1.0 / (k + 1) for k in range(len(systems))]
    earlier: list[list[int]] = []  # full blocks of earlier requests
    out = []
    t_ms = 0.0
    for _ in range(lines):
        roll = rng.random()
        if earlier and roll < 0.3:
            prefix = list(rng.choice(earlier[-50:]))
        elif roll < 0.8:
            prefix = list(rng.choices(systems, weights)[0])
        else:
            prefix = []
        own = [next(ids) for _ in range(rng.randint(1, 3))]
        hash_ids = prefix + own
        input_length = BLOCK * (len(hash_ids) - 1) + rng.randint(1, BLOCK)
        earlier.append(hash_ids[:-1])
        out.append(
            {
                "timestamp": round(t_ms),
                "input_length": input_length,
                "output_length": rng.randint(8, 128),
                "hash_ids": hash_ids,
            }
        )
        t_ms += max(40.0, rng.expovariate(rate) * 1000.0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=500)
    p.add_argument("--rate", type=float, default=10.0, help="mean requests/s")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    trace = sample_trace(args.lines, args.rate, args.seed)
    args.out.write_text("".join(json.dumps(line, separators=(", ", ": ")) + "\n" for line in trace))
    print(f"{args.out}: {len(trace)} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
