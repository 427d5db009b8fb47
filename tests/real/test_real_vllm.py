"""Token chunks against a real vLLM server, when you have one: what it streams is the ground truth.

Opt-in: `LLMLOAD_VLLM_URL=http://127.0.0.1:8000 .venv/bin/python -m pytest tests/real/test_real_vllm.py`
against a vLLM that nothing else is using (its token counter is compared with the run's); without
the variable the tests are skipped and say so. No machine of this project has a GPU, so CI skips
them; the same checks run in CI against llama.cpp (test_real_token_chunks.py) and against the
simulator's vLLM shape (tests/e2e/test_token_chunks_e2e.py).

The server's own account of each chunk comes from a request read here with the standard library's
HTTP client and `stream_options.continuous_usage_stats`, which makes vLLM put the running
`completion_tokens` on every chunk: a chunk whose count grew carried that many tokens, whatever its
text (vLLM sends a token whose bytes end inside a character with empty text).

- A plain prompt (one token a chunk, the last one with the finish_reason): each request has
  output tokens - 1 ITL values, and the rung's ITL is per token (not labelled "per chunk").
- An emoji prompt (chunks of empty text inside the stream): the tokens are still exact (usage and
  the server's counter) and TTFT is taken at the first `choices` chunk, text or not.
"""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from fixtures.real_runs import sweep_ladder
from fixtures.vllm_server import generated_tokens

from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep

URL = os.environ.get("LLMLOAD_VLLM_URL", "")
pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not URL, reason="no vLLM here: set LLMLOAD_VLLM_URL to run against one"),
]

MAX_TOKENS = 64
EMOJI = "Write twenty emoji in a row: 🎉🎈🎂"
PLAIN = "Write a short story about a lighthouse keeper."


def _get(path: str) -> Any:
    where = urlsplit(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return json.loads(body)


def served_model() -> str:
    return str(_get("/v1/models")["data"][0]["id"])


def tokens_per_chunk(model: str, prompt: str) -> list[int]:
    """Per `choices` chunk of this greedy request, the tokens the server says it carried."""
    where = urlsplit(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    lines = conn.getresponse().read().decode().splitlines()
    conn.close()
    counts, seen = [], 0
    for line in lines:
        if not line.startswith("data: ") or line[6:].strip() == "[DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices"):
            total = event["usage"]["completion_tokens"]
            counts.append(total - seen)
            seen = total
    return counts


@pytest.mark.parametrize("prompt", [PLAIN, EMOJI], ids=["plain", "emoji"])
def test_tokens_chunks_and_itl_against_vllm(tmp_path, prompt):
    model = served_model()
    counts = tokens_per_chunk(model, prompt)
    assert sum(counts) == MAX_TOKENS
    ladder = {
        "rungs": [1, 2],
        "max_tokens": MAX_TOKENS,
        "prompt": prompt,
        "distinct_prompts": False,  # the prompt as written: its chunks were read above
        "requests_per_user": 2,
        "warmup_requests": 0,
    }
    before = generated_tokens(URL)
    run = sweep_ladder(URL, tmp_path / "run", yaml.safe_dump(ladder))
    after = generated_tokens(URL)
    records, skipped = read_records(run.records)
    assert not skipped and records
    probe, _ = read_records(Path(f"{run.prefix}_calibration.jsonl"))  # the per-chunk usage probe
    assert [r.phase for r in probe] == ["calibration"]
    assert sum(r.output_tokens for r in [*probe, *records]) == after - before  # the server's own count
    assert all(r.chunk_tokens is not None for r in records)  # vLLM honours per-chunk usage: asked
    one_token_a_chunk = all(c == 1 for c in counts)
    for rec in records:
        assert rec.ok and not rec.tokens_estimated, (rec.outcome, rec.error)
        assert rec.output_tokens == MAX_TOKENS
        assert rec.t_first is not None and rec.t_first_content is not None
        assert rec.t_first <= rec.t_first_content  # TTFT at the first choices chunk, text or not
        if one_token_a_chunk:
            assert rec.chunks == len(counts) == MAX_TOKENS
            assert len(itl_ms(rec)) == rec.output_tokens - 1
    result = load_run(run.prefix, with_metrics=True)
    assert result.metrics is not None
    if one_token_a_chunk:
        assert not any(m.itl_per_chunk for m in result.metrics)


@pytest.mark.parametrize(("ratio", "share"), [(0.0, 0.0), (0.5, 0.5)], ids=["distinct", "half-shared"])
def test_the_prefix_cache_per_rung_against_vllm(tmp_path, ratio, share):
    """vLLM caches prefixes by default: synthetic prompts get no cached tokens beyond the asked
    shared prefix (within one block: start the server with `--enable-prompt-tokens-details
    --block-size 32`, as `make vllm-server` does), and its own counters per rung
    (`prefix_cache_hits`) equal the records' cached tokens. A second run with the same seed would
    find them cached: this one uses a seed of its own."""
    ladder = tmp_path / "ladder.yaml"
    seed = int.from_bytes(os.urandom(3), "big")  # prompts this server has not seen
    ladder.write_text(
        f"rungs: [1, 2]\nrequests_per_user: 2\nmax_tokens: 8\nprompt_tokens: 256\n"
        f"shared_prefix_ratio: {ratio}\nseed: {seed}\n"
    )
    run = run_sweep(host=URL, run_dir=tmp_path / "run", locust_args=["--ladder", str(ladder)], timeout=600)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    result = load_run(run.prefix)
    assert result.server is not None and result.server.family == "vllm"
    for row in result.rows:
        cache = row.cache
        assert cache is not None and cache["requests"] == row.requests, "no cached_tokens: restart vLLM"
        assert cache["over_shared"] == 0
        assert abs(cache["share"] - share) <= 32 / 256  # one block
        assert row.server is not None and row.server["cache_hits"] == cache["cached_tokens"]
