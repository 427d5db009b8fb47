#!/usr/bin/env python3
"""Cost of llmload's SSE parsing alone: `StreamAccumulator.feed` over a vLLM-shaped stream.

    .venv/bin/python benchmarks/sse_parse.py

The stream is the simulator's vLLM shape with one token per chunk (256 content chunks, each
followed by its blank separator line, then the usage chunk and `data: [DONE]`). Prints the best
(minimum) of several timed passes in microseconds per SSE event, which is robust to a busy
machine. The hot-path edits in llmload/loadgen/sse.py were measured with it (docs/generator-cost.md).
"""

from __future__ import annotations

import timeit

from llmload.loadgen.sse import StreamAccumulator
from llmload.sim.shapes import DONE, Formatter

TOKENS = 256


def stream_lines() -> list[bytes]:
    fmt = Formatter(
        request_id="cmpl-bench",
        model="sim-model",
        created=1_700_000_000,
        chat=False,
        style="vllm",
        prompt_tokens=24,
        include_usage=True,
        continuous_usage=False,
        usage_allowed=True,
    )
    last = TOKENS - 1
    body = b"".join(fmt.content_chunk(" word", i + 1, "length" if i == last else None) for i in range(TOKENS))
    body += b"".join(fmt.final_chunks("length", TOKENS, None)) + DONE
    return [line + b"\n" for line in body.split(b"\n")[:-1]]


def parse(lines: list[bytes]) -> StreamAccumulator:
    acc = StreamAccumulator()
    feed = acc.feed
    for line in lines:
        if feed(line, 0.5):
            break
    return acc


def main() -> None:
    lines = stream_lines()
    acc = parse(lines)
    assert acc.done and acc.completion_tokens == TOKENS and len(acc.chunk_times) == TOKENS
    events = sum(1 for line in lines if line.startswith(b"data:"))
    passes = 200
    best = min(timeit.repeat(lambda: parse(lines), number=passes, repeat=7)) / passes
    per_event_us = best / events * 1e6
    print(f"{len(lines)} lines, {events} SSE events: {per_event_us:.2f} us per event (best of 7 x {passes})")


if __name__ == "__main__":
    main()
