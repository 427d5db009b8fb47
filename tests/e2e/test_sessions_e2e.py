"""Multi-turn sessions by a real `locust` run against the simulator, with its prefix cache on and
off: TTFT by turn, the cached tokens reported, and the history each turn resent, checked against
the simulator's truth log (hashes of the assistant messages it received and of its replies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.analysis.run.production_traffic import turn_metrics
from llmload.cli import table
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

# prefill costs 0.05 ms per uncached prompt token: the 2000-token system message of turn 1 takes
# 100 ms; with the cache, later turns prefill only their new tokens (~230, 12 ms), without it
# every turn prefills its whole prompt, 11 ms more than the turn before
SIM = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.2, "prefill_ms_per_token": 0.05, "block_size": 16}
LADDER = """\
endpoint: chat
rungs: [1]
max_tokens: 16
warmup_requests: 0
sessions:
  turns: 4
  per_user: 3
  user_tokens: 200
  system_tokens: 2000
  think_time_s: 0.02
  think_time: exponential
"""


def session_run(tmp: Path, cache_blocks: int) -> tuple[list, dict, Path]:
    ladder = tmp / "sessions.yaml"
    ladder.write_text(LADDER)
    sim = {**SIM, "prefix_cache_blocks": cache_blocks} if cache_blocks else SIM
    run = run_sweep(run_dir=tmp, endpoint="chat", locust_args=["--ladder", str(ladder)], sim=sim, timeout=120)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, skipped = read_records(run.records)
    assert not skipped and len(records) == 12 and all(r.ok for r in records)
    truth, _ = load_truth(run.truth_log)
    return records, truth, run.prefix


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    return session_run(tmp_path_factory.mktemp("cache_on"), 4096)


@pytest.fixture(scope="module")
def uncached(tmp_path_factory):
    return session_run(tmp_path_factory.mktemp("cache_off"), 0)


def test_later_turns_are_faster_with_the_cache_and_not_without(cached, uncached):
    on, off = turn_metrics(cached[0]), turn_metrics(uncached[0])
    assert [t.turn for t in on] == [t.turn for t in off] == [1, 2, 3, 4]
    assert all(t.requests == 3 for t in on + off)
    # the simulator sends the chat role delta before prefilling: the time to first content shows it
    assert on[0].ttft_content_ms > 100.0
    assert all(t.ttft_content_ms < on[0].ttft_content_ms / 3 for t in on[1:])
    assert all(t.ttft_content_ms > off[0].ttft_content_ms for t in off[1:])  # longer prompts, no cache


def test_cached_tokens_reported_match_the_server(cached, uncached):
    records, truth, _ = cached
    by_turn = {(r.session, r.turn): r for r in records}
    for r in records:
        assert r.cached_tokens == truth[r.request_id]["cached_tokens"]
        # turn 1 is cold; a later turn finds exactly the full 16-token blocks of the turn before
        previous = by_turn.get((r.session, r.turn - 1))
        assert r.cached_tokens == (0 if previous is None else previous.prompt_tokens // 16 * 16)
    assert all(r.cached_tokens is None for r in uncached[0])  # vLLM-style usage: no cache, no details


@pytest.mark.parametrize("run", ["cached", "uncached"])
def test_history_sent_equals_what_the_server_answered(run, request):
    records, truth, _ = request.getfixturevalue(run)
    sessions: dict[str, list] = {}
    for r in records:
        sessions.setdefault(r.session, []).append(r)
    assert len(sessions) == 3
    for turns in sessions.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == [1, 2, 3, 4]
        replies = []
        for r in turns:
            assert truth[r.request_id]["history_hashes"] == replies  # every earlier reply, in order
            replies.append(truth[r.request_id]["reply_hash"])
        # the prompt grows by exactly the previous reply and the new message (+ 3 template tokens each)
        for a, b in zip(turns, turns[1:], strict=False):
            assert b.prompt_tokens == a.prompt_tokens + a.output_tokens + 3 + 200 + 3


def test_each_turn_is_hashed_by_what_it_sent(cached, capsys):
    """At temperature 0 the records keep text hashes (`llmload compare` matches them); each turn's
    prompt hash is of the messages it sent, its own session's history, so no two turns share one.
    The greedy-determinism check runs on request (its own probes), so the table has no verdict."""
    records, _, prefix = cached
    assert all(r.text_hash is not None for r in records)
    assert len({r.prompt_hash for r in records}) == len(records)
    assert table.main([str(prefix), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["determinism"] is None
