"""Trace replay's synthetic prompts on a real tokenizer (llama.cpp, SmolLM2): every line costs
exactly `input_length` by `usage.prompt_tokens` on both endpoints, and lines whose `hash_ids`
agree share exactly the token prefix the ids say (the prefix `trace-stats` assumes)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from llmload.core.config import SweepConfig
from llmload.loadgen.transport.token_counts import ServerTokenCounts
from llmload.loadgen.workload.payload import endpoint_path
from llmload.loadgen.workload.prompts import calibrate_prompts
from llmload.loadgen.workload.trace import TraceWorkload

pytestmark = pytest.mark.real

# (input_length, hash_ids): a partial first block, one full block, blocks that share block 0
# (and then block 1), and lines without hash_ids
LINES = [(40, [1]), (512, [1]), (700, [1, 2]), (1024, [1, 2]), (1500, [1, 3, 4]), (300, None), (1100, None)]


def post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_trace_prompts_cost_input_length_and_share_the_blocks_hash_ids_say(llama_server, tmp_path, endpoint):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {"timestamp": i, "input_length": n, "output_length": 1, **({"hash_ids": ids} if ids else {})}
            )
            + "\n"
            for i, (n, ids) in enumerate(LINES)
        )
    )
    cal = calibrate_prompts(ServerTokenCounts(llama_server.url, llama_server.model, endpoint == "chat", {}))
    prompts = TraceWorkload(
        SweepConfig(mode="trace", trace_file=str(trace)), cal.vocab, cal.overhead
    ).prepare()
    chat = endpoint == "chat"
    sent = []
    for prompt in prompts:
        body: dict[str, Any] = {"model": llama_server.model, "max_tokens": 1, "temperature": 0}
        body |= {"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}
        sent.append(post(llama_server.url + endpoint_path(endpoint), body)["usage"]["prompt_tokens"])
    assert sent == [n for n, _ in LINES]
    if not chat:  # the completions prompt's tokens are the text's tokens
        tokens = [
            post(llama_server.url + "/tokenize", {"content": p, "add_special": True})["tokens"]
            for p in prompts
        ]
        assert common_prefix(tokens[1], tokens[2]) == 512  # block 0 shared, the 512-line ends there
        assert common_prefix(tokens[2], tokens[3]) == 700  # a partial block is the full block's prefix
        assert common_prefix(tokens[3], tokens[4]) == 512  # block 1 differs (ids 2 and 3)
        assert common_prefix(tokens[4], tokens[5]) < 16  # no hash_ids: nothing beyond the overhead
