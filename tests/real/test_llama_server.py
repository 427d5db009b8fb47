"""Real llama.cpp server: the response shapes and counters the load generator relies on.

Plain http.client on purpose (independent of the Locust harness): token accounting from
`usage`, where llama.cpp puts it, `[DONE]`, the `/metrics` counter and greedy determinism.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
import urllib.request
from typing import Any

import pytest

from llmload.loadgen.transport.server_pages import scrape_metrics
from llmload.servers.llama_cpp import LlamaServer

pytestmark = pytest.mark.real

PROMPT = "The capital of France is"
TIMEOUT_S = 120.0


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
        return json.loads(resp.read())


def _post_json(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
        return json.loads(resp.read())


def _stream(base_url: str, body: dict[str, Any]) -> list[str]:
    """POST a streaming request; the `data:` payloads in arrival order (read to EOF)."""
    parsed = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=TIMEOUT_S)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
        )
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:500]
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        payloads = []
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:"):
                payloads.append(line[len("data:") :].strip())
        return payloads
    finally:
        conn.close()


def _completion_body(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "smollm2",
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


def test_models_lists_alias(llama_server: LlamaServer) -> None:
    models = _get_json(f"{llama_server.url}/v1/models")
    assert llama_server.model in [entry["id"] for entry in models["data"]]


def test_stream_usage_rides_on_last_choice_chunk_and_matches_metrics(llama_server: LlamaServer) -> None:
    before = scrape_metrics(llama_server.metrics_url)["llamacpp:tokens_predicted_total"]
    body = _completion_body(32, stream=True, stream_options={"include_usage": True})
    payloads = _stream(llama_server.url, body)
    after = scrape_metrics(llama_server.metrics_url)["llamacpp:tokens_predicted_total"]

    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    with_usage = [chunk for chunk in chunks if chunk.get("usage")]
    # llama.cpp: usage is on the final chunk, which still carries a choice (empty text plus
    # finish_reason); there is no separate `choices: []` chunk as with vLLM.
    assert len(with_usage) == 1
    final = with_usage[0]
    assert final is chunks[-1]
    assert final["choices"], "llama.cpp sends usage on a chunk whose choices is not empty"
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["usage"]["completion_tokens"] == 32
    assert after - before == 32


def test_greedy_is_deterministic(llama_server: LlamaServer) -> None:
    url = f"{llama_server.url}/v1/completions"
    first = _post_json(url, _completion_body(24))
    second = _post_json(url, _completion_body(24))
    assert first["usage"]["completion_tokens"] == 24
    assert first["choices"][0]["text"]
    assert first["choices"][0]["text"] == second["choices"][0]["text"]


def test_metrics_page_parses(llama_server: LlamaServer) -> None:
    metrics = scrape_metrics(llama_server.metrics_url)
    for name in ("llamacpp:tokens_predicted_total", "llamacpp:requests_processing"):
        assert name in metrics
    assert metrics["llamacpp:requests_processing"] >= 0


def test_own_server_stops_by_pid_and_frees_port() -> None:
    # A second, short-lived server (the session one stays up): stop() ends it and frees the port.
    with LlamaServer(parallel=1) as server:
        assert server.running
        assert _get_json(f"{server.url}/health")["status"] == "ok"
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{server.url}/health", timeout=2.0)
