#!/usr/bin/env python3
"""Cost of llmload's SSE parsing alone, over a vLLM-shaped stream: line by line
(`StreamAccumulator.feed`, the TLS path) and as the StreamReader does it (each event's bytes one
read, split into lines in a bytearray, `feed_lines`).

    .venv/bin/python benchmarks/sse_parse.py

The stream is the simulator's vLLM shape with one token per chunk (256 content chunks, each
followed by its blank separator line, then the usage chunk and `data: [DONE]`). Prints the best
(minimum) of several timed passes in microseconds per SSE event, which is robust to a busy
machine. The hot-path edits in llmload/loadgen/stream/ (sse.py, sse_template.py) were measured
with it (docs/measurements.md).
"""

from __future__ import annotations

import timeit

from llmload.loadgen.stream.sse import StreamAccumulator
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


def parse_reads(reads: list[bytes]) -> StreamAccumulator:
    """As the StreamReader: a read's bytes appended to the body buffer, its complete lines split out."""
    acc = StreamAccumulator()
    buf = bytearray()
    for data in reads:
        buf += data
        lines = buf.split(b"\n")
        buf[:] = lines.pop()
        if acc.feed_lines(lines, 0.5):
            break
    return acc


def main() -> None:
    lines = stream_lines()
    reads = [lines[i] + lines[i + 1] for i in range(0, len(lines) - 1, 2)]  # an event and its blank line
    for way, run, arg in (("line by line", parse, lines), ("one read per event", parse_reads, reads)):
        acc = run(arg)
        assert acc.done and acc.completion_tokens == TOKENS and len(acc.chunk_times) == TOKENS
        events = sum(1 for line in lines if line.startswith(b"data:"))
        passes = 200
        best = min(timeit.repeat(lambda run=run, arg=arg: run(arg), number=passes, repeat=7)) / passes
        per_event_us = best / events * 1e6
        print(f"{way}: {events} SSE events, {per_event_us:.2f} us per event (best of 7 x {passes})")


if __name__ == "__main__":
    main()
