"""Fault injection: which fault kinds exist, how `--fault KIND=RATE` parses, and the per-request draw.

At most one fault per generation request, drawn in arrival order from `random.Random(fault_seed)`:
one uniform number per request, mapped onto the cumulative rates (so the rates must sum to <= 1).
What each kind does on the wire is implemented by the HTTP handler (`llmload.sim.server`).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping

# kind -> one-line description (used in --help and in the README)
FAULT_KINDS: dict[str, str] = {
    "http_500": "answer 500 with an OpenAI error JSON before admission",
    "http_503": "answer 503 with an OpenAI error JSON before admission",
    "http_429": "answer 429 with `Retry-After: 1` and an OpenAI error JSON before admission",
    "reset": "reset the TCP connection (RST) before sending any response header",
    "drop": "cut the connection (RST) after --drop-after tokens, without finish, usage or [DONE]",
    "malformed": "insert one invalid-JSON `data:` line mid-stream, then finish normally",
    "stall": "after the first content chunk, write nothing for --stall-s seconds, then go on",
    "slow_headers": "wait --slow-headers-s seconds before handling the request, then go on",
    "wrong_content_type": "answer 200 with a text/html body before admission",
    "no_done": "complete stream (usage included) but the body ends without `data: [DONE]`",
    "no_usage": "never send usage, even when asked for",
    "bunched": "hold every other content chunk and write it with the next (a buffering proxy, late delivery)",
}
# kind -> the outcome a correct client records for a streamed request with that fault: a failure
# kind of `llmload.loadgen.request.client`, or "ok". The one place that maps simulator faults to client kinds
# (tests and the README use it). Assumes the client's first_token timeout is shorter than
# --stall-s and longer than --slow-headers-s, and max_tokens > --drop-after. Non-streamed
# requests: the same, except that no_done and no_usage do not apply (no_usage: estimated tokens).
CLIENT_OUTCOME: dict[str, str] = {
    "http_500": "http_500",
    "http_503": "http_503",
    "http_429": "http_429",
    "reset": "reset",
    "drop": "drop",
    "malformed": "malformed",
    "stall": "timeout",
    "slow_headers": "ok",  # only slower; a timeout if --slow-headers-s exceeds the first_token timeout
    "wrong_content_type": "wrong_content_type",
    "no_done": "no_done",
    "no_usage": "ok",  # completed; output tokens estimated by the client (tokens_estimated)
    "bunched": "ok",  # only late: the held chunks are marked uncertain (records' uncertain_chunks)
}
# Faults answered before the request reaches the engine.
PRE_ADMISSION = frozenset({"http_500", "http_503", "http_429", "reset", "wrong_content_type"})


def parse_fault(text: str) -> tuple[str, float]:
    """argparse type for `KIND=RATE`."""
    kind, sep, rate_text = text.partition("=")
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault kind {kind!r}; choose from {', '.join(FAULT_KINDS)}")
    try:
        rate = float(rate_text) if sep else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"fault rate must be a number in [0, 1], got {rate_text!r}"
        ) from None
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"fault rate must be in [0, 1], got {rate}")
    return kind, rate


class FaultPicker:
    """Draws the fault (or None) for each request, in the order requests arrive."""

    def __init__(self, rates: Mapping[str, float], seed: int = 0) -> None:
        unknown = set(rates) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds: {sorted(unknown)}")
        total = sum(rates.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates sum to {total:g} > 1 (at most one fault per request)")
        self._cumulative: list[tuple[float, str]] = []
        acc = 0.0
        for kind, rate in rates.items():
            if rate > 0:
                acc += rate
                self._cumulative.append((acc, kind))
        self._rng = random.Random(seed)

    def draw(self) -> str | None:
        if not self._cumulative:
            return None
        u = self._rng.random()
        for bound, kind in self._cumulative:
            if u < bound:
                return kind
        return None
