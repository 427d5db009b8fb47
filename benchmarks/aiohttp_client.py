"""A minimal asyncio + aiohttp streaming client: the yardstick the overhead benchmark compares
Locust + llmload against.

It does the least a correct streaming client must: N concurrent streams, each sending the same
request body llmload sends (greedy, `max_tokens` with `ignore_eos`, `include_usage`), reading the
SSE stream line by line, parsing every data line as JSON and keeping the arrival time of every
content chunk. No statistics, no events, no messages: one JSON line per request at the end.

    python benchmarks/aiohttp_client.py --url http://127.0.0.1:8000 --streams 64 --duration 3 \
        --max-tokens 256 --out /tmp/aiohttp_records.jsonl

Output lines: {"request_id", "t_start", "t_end", "chunk_times" (s after t_start),
"output_tokens"}, the subset of llmload's RequestRecord the benchmark reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

MODEL = "sim-model"
PROMPT = "Write a detailed technical explanation of continuous batching."


def completion_body(max_tokens: int, model: str = MODEL, prompt: str = PROMPT) -> dict[str, Any]:
    """The benchmark clients' request (this one's and bare_locustfile.py's)."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes) -> dict[str, Any]:
    request_id = uuid.uuid4().hex
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id, "Accept-Encoding": "identity"}
    chunk_times: list[float] = []
    usage = None
    loads, perf = json.loads, time.perf_counter
    t_wall, t0 = time.time(), perf()
    async with session.post(url, data=body, headers=headers) as resp:
        resp.raise_for_status()
        readline = resp.content.readline
        while line := await readline():
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            obj = loads(payload)
            if obj.get("choices") and obj["choices"][0].get("text"):
                chunk_times.append(perf() - t0)
            usage = obj.get("usage") or usage
    end = chunk_times[-1] if chunk_times else perf() - t0
    return {
        "request_id": request_id,
        "t_start": t_wall,
        "t_end": t_wall + end,
        "chunk_times": chunk_times,
        "output_tokens": usage["completion_tokens"] if usage else len(chunk_times),
    }


async def stream_until(session: aiohttp.ClientSession, url: str, body: bytes, deadline: float) -> list[dict]:
    out = []
    while time.time() < deadline:
        out.append(await one_request(session, url, body))
    return out


async def run(url: str, streams: int, duration: float, body: dict[str, Any]) -> list[dict[str, Any]]:
    # no connection cap (aiohttp's default limit of 100 would queue streams beyond 100)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    data = json.dumps(body).encode()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        deadline = time.time() + duration
        parts = await asyncio.gather(*(stream_until(session, url, data, deadline) for _ in range(streams)))
    return [rec for part in parts for rec in part]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--streams", type=int, required=True, help="concurrent streams")
    p.add_argument("--duration", type=float, required=True, help="seconds; streams start no request after it")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--out", type=Path, required=True, help="JSONL file of per-request results")
    args = p.parse_args()
    body = completion_body(args.max_tokens, args.model, args.prompt)
    records = asyncio.run(run(args.url.rstrip("/") + "/v1/completions", args.streams, args.duration, body))
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records))


if __name__ == "__main__":
    main()
