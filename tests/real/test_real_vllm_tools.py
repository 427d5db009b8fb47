"""Tool-call streams against a real vLLM with tool calling on: what it streams is the ground truth.

Opt-in: `LLMLOAD_VLLM=1 .venv/bin/python -m pytest tests/real/test_real_vllm_tools.py` starts vLLM's
CPU build itself (`make vllm-server`'s script, installed into ~/.cache/llmload/vllm on first use:
3.5 GB) with `--enable-auto-tool-choice --tool-call-parser hermes` on a free 127.0.0.1 port and
stops it by PID. Without the variable the test is skipped and says so: CI has no vLLM.

The requests offer the built-in `weather` tools with `tool_choice: required` (vLLM forces a call by
guided decoding, whatever the model), greedy, the same prompt every time. One of them is read here
with the standard library's HTTP client and `stream_options.continuous_usage_stats` (vLLM puts the
running `completion_tokens` on every chunk: the tokens each delta carried, by the server's own
count); two identical sweeps send it again at rungs 1 and 2. Checked:

- tokens: the records' output tokens (the preflight's and per-chunk probe's requests included)
  equal the rise of vLLM's `vllm:generation_tokens_total` over each sweep, and each record's
  equal the read request's usage;
- chunks: each record counts exactly the read stream's token messages (its `tool_calls` deltas,
  and the closing `delta: {}` when the server's count grew on it: vLLM's tool parser holds the
  call's last tokens back until then), with the tokens the server put on each, its calls, and as
  invalid the calls whose arguments are not a JSON object;
- identity: each record's tool hash is the BLAKE2b-64 of the read stream's calls (name, then
  arguments in brackets), the same in both sweeps, and `compare` finds the outputs identical.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
import yaml
from fixtures.real_runs import sent_tokens, sweep_ladder
from fixtures.vllm_server import MODEL, generated_tokens, vllm_server

from llmload.analysis.output_identity import IDENTICAL, output_identity
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.core.workload.reply_shapes import BUILTIN_TOOLS

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        os.environ.get("LLMLOAD_VLLM") != "1",
        reason="no vLLM here: LLMLOAD_VLLM=1 installs and starts vLLM's CPU build (3.5 GB) for this test",
    ),
    pytest.mark.timeout(1800),  # a cold start installs vLLM first
]

TOOL_CALLING = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
PROMPT = "What is the weather in Paris?"
MAX_TOKENS = 96  # a cap: a tool call ends on its own
LADDER = {
    "endpoint": "chat",
    "rungs": [1, 2],
    "requests_per_user": 2,
    "warmup_requests": 0,
    "max_tokens": MAX_TOKENS,
    "prompt": PROMPT,
    "distinct_prompts": False,  # the prompt as written: its stream is read below
    "tools": "weather",
    "tool_choice": "required",
}
CALL_SEPARATOR = "\x1e"  # between two calls in the hashed text (the record's definition)


@dataclass
class Stream:
    """One greedy tool-call request as the server streamed it."""

    delta_tokens: list[int] = field(default_factory=list)  # per token message: its tokens
    names: dict[int, str] = field(default_factory=dict)  # per call index
    arguments: dict[int, str] = field(default_factory=dict)
    completion_tokens: int = 0
    finish_reason: str | None = None

    def calls_text(self) -> str:
        return CALL_SEPARATOR.join(f"{self.names[i]}({self.arguments[i]})" for i in sorted(self.names))

    def invalid_calls(self) -> int:
        bad = 0
        for text in self.arguments.values():
            try:
                bad += not isinstance(json.loads(text), dict)
            except ValueError:
                bad += 1
        return bad


def read_stream(url: str) -> Stream:
    """The request the sweep sends, read here with per-chunk usage (module docstring)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": list(BUILTIN_TOOLS["weather"]),
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    lines = conn.getresponse().read().decode().splitlines()
    conn.close()
    stream, seen = Stream(), 0
    for line in lines:
        if not line.startswith("data: ") or line[6:].strip() == "[DONE]":
            continue
        event = json.loads(line[6:])
        total = event["usage"]["completion_tokens"]
        for choice in event["choices"]:
            stream.finish_reason = choice.get("finish_reason") or stream.finish_reason
            calls = choice["delta"].get("tool_calls")
            if calls or total > seen:  # the closing `delta: {}` carries the parser's held-back tokens
                stream.delta_tokens.append(total - seen)
            for call in calls or ():
                function = call.get("function") or {}
                index = call["index"]
                stream.names[index] = stream.names.get(index, "") + (function.get("name") or "")
                stream.arguments[index] = stream.arguments.get(index, "") + (function.get("arguments") or "")
        seen = total
        stream.completion_tokens = total
    return stream


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    with vllm_server(TOOL_CALLING, tmp_path_factory.mktemp("vllm") / "vllm-server.log") as url:
        yield url


def test_tool_call_tokens_chunks_and_hash_against_vllm(vllm, tmp_path):
    read = read_stream(vllm)
    assert read.finish_reason == "tool_calls" and read.names, read  # a call, forced by guided decoding
    assert read.completion_tokens < MAX_TOKENS
    tool_hash = hashlib.blake2b(read.calls_text().encode(), digest_size=8).hexdigest()
    results = []
    for name in ("base", "again"):
        before = generated_tokens(vllm)
        run = sweep_ladder(vllm, tmp_path / name, yaml.safe_dump(LADDER))
        assert sent_tokens(run.records) == generated_tokens(vllm) - before  # the server's own count
        records, skipped = read_records(run.records)
        assert not skipped and len(records) == 1 * 2 + 2 * 2
        for rec in records:
            assert rec.ok and not rec.tokens_estimated, (rec.outcome, rec.error)
            assert rec.finish_reason == "tool_calls"
            assert rec.output_tokens == read.completion_tokens
            assert rec.chunks == len(rec.chunk_times) == len(read.delta_tokens)
            assert rec.chunk_tokens == read.delta_tokens  # vLLM honours per-chunk usage: the run asked
            assert rec.tool_calls == len(read.names)
            assert rec.tool_calls_invalid == read.invalid_calls()
            assert rec.tool_hash == tool_hash
            assert rec.t_first_content is None  # no answer text: only the call
            assert rec.t_first is not None and rec.t_first_tool_call is not None
            assert rec.t_first <= rec.t_first_tool_call
        results.append(load_run(run.prefix))
    identity = output_identity(*results)
    assert identity.verdict == IDENTICAL and identity.compared == 6, identity.summary()
