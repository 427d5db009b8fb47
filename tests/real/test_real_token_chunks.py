"""Token chunks against the real llama.cpp server: what it streams is the ground truth, read here
with the standard library's HTTP client, beside its own token counter.

- A plain prompt: llama.cpp sends one chunk a token and a closing chunk of empty text that is no
  token (its usage says so). Each request has output tokens - 1 ITL values, and the rung's ITL is
  per token (not labelled "per chunk").
- An emoji prompt: a character of several tokens is sent only once it is complete, so chunks carry
  several tokens (24 tokens in 8 chunks here). The tokens are still exact (the server's usage and
  its counter), TTFT is the first chunk's, the chunks are the server's, and the rung's ITL is
  labelled per chunk.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
import yaml
from fixtures.real_runs import sent_tokens, sweep_ladder

from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.loadgen.transport.server_pages import scrape_metrics

pytestmark = pytest.mark.real

MAX_TOKENS = 24
EMOJI = "Write five emoji: 🎉🎈🎂"
PLAIN = "Translate to Japanese: good morning, thank you, see you tomorrow."
PREDICTED = "llamacpp:tokens_predicted_total"


def server_chunks(url: str, model: str, prompt: str) -> list[str]:
    """The texts of the `choices` chunks the server streams for this greedy request."""
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True, "ignore_eos": True}))
    lines = conn.getresponse().read().decode().splitlines()
    conn.close()
    events = [json.loads(x[6:]) for x in lines if x.startswith("data: ") and x[6:].strip() != "[DONE]"]
    return [e["choices"][0]["text"] for e in events if e.get("choices")]


@pytest.mark.parametrize("prompt", [PLAIN, EMOJI], ids=["plain", "emoji"])
def test_tokens_chunks_and_itl_are_what_the_server_sent(llama_server, tmp_path, prompt):
    texts = server_chunks(llama_server.url, llama_server.model, prompt)
    content = [t for t in texts if t]
    assert texts[-1] == ""  # llama.cpp's closing chunk: finish_reason and usage, no text
    ladder = {"rungs": [1, 2], "max_tokens": MAX_TOKENS, "prompt": prompt, "requests_per_user": 2}
    ladder["distinct_prompts"] = False  # the prompt as written: the stream read above is its stream
    before = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    run = sweep_ladder(llama_server.url, tmp_path / "run", yaml.safe_dump(ladder))
    after = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    records, skipped = read_records(run.records)
    assert not skipped and records
    assert sent_tokens(run.records) == after - before  # the server's own count (the probe's too)
    for rec in records:
        assert rec.ok and not rec.tokens_estimated, (rec.outcome, rec.error)
        assert rec.output_tokens == MAX_TOKENS
        assert rec.chunks == len(content) == len(rec.chunk_times)
        assert rec.t_first - rec.t_start == pytest.approx(rec.chunk_times[0], abs=1e-6)  # TTFT: first chunk
        assert len(itl_ms(rec)) == len(content) - 1
    result = load_run(run.prefix, with_metrics=True)
    assert result.metrics is not None
    one_token_a_chunk = len(content) == MAX_TOKENS
    assert one_token_a_chunk == (prompt == PLAIN)  # the server's chunking, as the docstring says
    for m in result.metrics:
        assert m.itl_per_chunk is not one_token_a_chunk
