"""Connections and input lengths against the real llama.cpp server (SmolLM2-135M).

- Inputs: with `prompt_tokens` N (completions and chat, with and without `unique_prompts`) every
  request's `usage.prompt_tokens`, the server's own count, is within 1 of N. llama-server's chat
  template for this model adds a default system prompt (31 tokens with the anchor word), so a chat
  prompt of 16 tokens cannot exist: the run stops before sending anything, naming the shortest
  length it can build.
- Connections, default `connection: keep-alive`: llama-server answers `Keep-Alive: timeout=5,
  max=100`, keeps the socket after a non-streamed reply and closes it after every stream. A
  rate-mode ladder with one client slot and a seeded schedule holding an idle gap of more than
  5 s: zero failures; non-streamed, a request after a short gap is sent on the same connection
  (`conn_reused`, same `conn_port`, answered) and the one after the long gap on a new one
  (`reconnect: expired`); streamed, every request after the first opens a new connection and
  says why (`closed`, or `resent` when the close raced the request).
"""

from __future__ import annotations

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep

pytestmark = pytest.mark.real

CHAT_FLOOR = 32  # the shortest chat prompt llama-server's SmolLM2 template allows (measured)


@pytest.mark.parametrize("unique", [False, True], ids=["shared", "unique"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("tokens", [16, 64, 512])
def test_inputs_as_asked(llama_server, tmp_path, tokens, endpoint, unique):
    config = tmp_path / "inputs.yaml"
    config.write_text(
        f"rungs: [1]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: 2\nendpoint: {endpoint}\n"
        f"prompt_tokens: {tokens}\nunique_prompts: {str(unique).lower()}\n"
    )
    run = run_sweep(
        host=llama_server.url,
        run_dir=tmp_path,
        endpoint=endpoint,
        locust_args=["--ladder", str(config), "--scrape-interval", "0"],
        timeout=300,
    )
    log = run.log.read_text()
    if endpoint == "chat" and tokens < CHAT_FLOOR:
        assert run.returncode == 2 and f"'prompt_tokens' {tokens} is too short" in log, log[-3000:]
        return
    assert run.returncode == 0, log[-3000:]
    records, _ = read_records(run.records)
    assert len(records) == 2 and all(r.ok for r in records)
    assert all(abs(r.prompt_tokens - tokens) <= 1 for r in records), [r.prompt_tokens for r in records]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_keep_alive_across_an_idle_gap(llama_server, tmp_path, stream):
    ladder = (  # seed 3: arrivals 0, 0.7, 4.2, 12.6, 16.0 s (an 8.4 s gap)
        "mode: rate\nrungs: [0.25]\nrequests_per_rung: 5\nmax_concurrency: 1\nseed: 3\n"
        f"warmup_requests: 1\nmax_tokens: 4\nstream: {str(stream).lower()}\n"
    )
    run = sweep_ladder(llama_server.url, tmp_path / "run", ladder)
    records, _ = read_records(run.records)
    records.sort(key=lambda r: r.t_start)
    assert len(records) == 6 and all(r.ok for r in records), [(r.outcome, r.error) for r in records]
    gaps = [b.t_start - a.t_end for a, b in zip(records, records[1:], strict=False)]
    assert max(gaps) > 5.0
    for gap, prev, rec in zip(gaps, records[:-1], records[1:], strict=True):
        if stream:  # llama-server closed the socket after the previous stream (after a long
            # gap its announced idle timeout had passed too, and is checked first)
            assert not rec.conn_reused and rec.reconnect in (
                "closed",
                "resent",
                "expired" if gap > 4.5 else "",
            ), rec
        elif gap < 4.5:  # the server kept the socket: reused, and it answered on it
            assert rec.conn_reused and rec.conn_port == prev.conn_port and rec.connect_ms is None, rec
        elif gap > 5.0:  # past the server's announced idle timeout
            assert not rec.conn_reused and rec.reconnect in ("expired", "closed"), rec
