"""A real reasoning server, when you have one: what it streams is the ground truth.

Opt-in: `LLMLOAD_REASONING_URL=http://127.0.0.1:8000 .venv/bin/python -m pytest
tests/real/test_real_reasoning.py` against a server that streams a model's thinking (vLLM or
SGLang with `--reasoning-parser`, llama.cpp with `--reasoning-format deepseek` on a thinking
model); `LLMLOAD_REASONING_ENDPOINT` picks `chat` (default) or `responses`. Without the variable
the test is skipped and says so: no server here reasons (the real tier's llama.cpp serves
SmolLM2-135M, whose chat template llama.cpp does not parse for thinking and whose tokenizer has
no `<think>` token: docs/measurements.md says what was tried).

The server's own account of each chunk comes from a greedy request read here with the standard
library's HTTP client: which of its messages carried reasoning, which answer text. llmload's
records of the same prompt must hold as many token chunks, its first answer on the same chunk,
and the server's reasoning count (or the client's, said so).
"""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import urlsplit

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.core.files.records import read_records

URL = os.environ.get("LLMLOAD_REASONING_URL", "")
ENDPOINT = os.environ.get("LLMLOAD_REASONING_ENDPOINT", "chat")
pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not URL, reason="no reasoning server here: set LLMLOAD_REASONING_URL to run against one"
    ),
]
MAX_TOKENS = 96
PROMPT = "How many r are in strawberry? Think step by step."


def served_model() -> str:
    where = urlsplit(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.close()
    return str(model)


def server_kinds(model: str) -> list[str]:
    """Per token message of a chat stream: "r" (reasoning), "a" (answer) or "b" (both)."""
    where = urlsplit(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True}  # fmt: skip
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    lines = conn.getresponse().read().decode().splitlines()
    conn.close()
    kinds = []
    for line in lines:
        if not line.startswith("data: ") or line[6:].strip() == "[DONE]":
            continue
        choices = json.loads(line[6:]).get("choices") or [{}]
        delta = choices[0].get("delta") or {}
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought or delta.get("content"):
            kinds.append("b" if thought and delta.get("content") else "r" if thought else "a")
    return kinds


def test_reasoning_chunks_against_the_server(tmp_path):
    model = served_model()
    kinds = server_kinds(model)
    assert "r" in kinds, "the server streamed no reasoning: is its reasoning parser on?"
    ladder = f"rungs: [1]\nrequests_per_user: 2\nmax_tokens: {MAX_TOKENS}\nprompt: {json.dumps(PROMPT)}\n"
    run = sweep_ladder(URL, tmp_path / "run", ladder, endpoint=ENDPOINT)
    records, _ = read_records(run.files.records)
    for rec in (r for r in records if r.phase == "measure"):
        assert rec.ok and rec.reasoning_tokens and rec.reasoning_tokens <= rec.output_tokens
        if ENDPOINT == "chat":
            assert rec.chunks == len(kinds)
            first_answer = next((i for i, k in enumerate(kinds) if k != "r"), None)
            if first_answer is None:
                assert rec.t_first_content is None  # never answered within max_tokens
            else:
                assert rec.t_first_content == pytest.approx(
                    rec.t_start + rec.chunk_times[first_answer], abs=1e-6
                )
