"""Agent sessions (`sessions.agent`) by a real sweep against the simulator, held to its truth log:
each turn's session id as the server received it, every tool result answering the calls of the
reply before it, the context growing every turn, the tool wait before each turn, a fan-out's
sub-agents arriving together and the parent's next turn only after the last of them, and two
runs of one seed sending the same conversations (paired by `compare` by session and turn).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from llmload.analysis.output_identity import output_identity
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import RequestRecord, read_records
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

SIM = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.2}
AGENT = """\
endpoint: {endpoint}
rungs: [2]
max_tokens: 200
warmup_requests: 0
tools: weather
tool_choice: auto
sessions:
  agent: true
  turns: 4
  per_user: 2
  user_tokens: 40
  system_tokens: 20
  tool_latency_s: 0.03
  tool_result_tokens: {{dist: uniform, min: 5, max: 30}}
"""
FAN_OUT = """\
endpoint: chat
rungs: [1]
max_tokens: 200
warmup_requests: 0
tools: weather
parallel_tool_calls: false
sessions:
  agent: true
  turns: 3
  per_user: 2
  user_tokens: 30
  tool_latency_s: 0.02
  fan_out: 4
  fan_out_turn: 1
  sub_agent_turns: 2
"""


def agent_run(tmp: Path, ladder: str, **sim: object) -> tuple[list[RequestRecord], dict, Path]:
    path = tmp / "agent.yaml"
    path.write_text(ladder)
    run = run_sweep(run_dir=tmp / "run", locust_args=["--ladder", str(path)], sim={**SIM, **sim}, timeout=120)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, skipped = read_records(run.records)
    assert not skipped and records and all(r.ok for r in records)
    assert run.truth_log is not None
    return [r for r in records if r.phase == "measure"], load_truth(run.truth_log)[0], run.prefix


def by_session(records: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r.session or "", r.turn or 0)):
        out[rec.session or ""].append(rec)
    return out


@pytest.fixture(scope="module")
def chat_agents(tmp_path_factory):
    return agent_run(tmp_path_factory.mktemp("agents"), AGENT.format(endpoint="chat"), auto_tool_share=0.7)


@pytest.fixture(scope="module")
def fan_out(tmp_path_factory):
    return agent_run(tmp_path_factory.mktemp("fan_out"), FAN_OUT)


def check_conversations(records: list[RequestRecord], truth: dict, limit: int, sub_limit: int = 0) -> None:
    """Every session's turns against what the simulator received and sent (module docstring);
    `limit`, `sub_limit`: the turn limits of top-level sessions and of sub-agents."""
    for sid, turns in by_session(records).items():
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1)), sid
        answered: list[str] = []  # the call ids of the replies so far, in order
        for i, rec in enumerate(turns):
            served = truth[rec.request_id]
            assert served["session"] == sid  # sent as X-Session-Id
            assert (served["tool_results"] or []) == answered  # each result answers its call
            if i:
                assert served["prompt_tokens"] > truth[turns[i - 1].request_id]["prompt_tokens"]
            calls = served["tool_calls"] or []
            assert rec.tool_calls == (len(calls) or None)
            answered += [c["id"] for c in calls]
            last = i == len(turns) - 1
            # a session ends at its final answer (a reply without tool calls) or its turn limit
            assert bool(calls) == (not last or len(turns) == (sub_limit if "/" in sid else limit))


def test_agent_turns_answer_the_calls_before_them(chat_agents):
    records, truth, _ = chat_agents
    sessions = by_session(records)
    assert sorted(sessions) == ["r0u0s1", "r0u0s2", "r0u1s1", "r0u1s2"]  # (rung, user slot, session)
    check_conversations(records, truth, limit=4)
    lengths = {len(turns) for turns in sessions.values()}
    assert len(lengths) > 1  # some ended at a final answer (--auto-tool-share 0.7), drawn
    for turns in sessions.values():
        assert turns[0].tool_wait_s is None and all(r.parent_session is None for r in turns)
        for before, rec in zip(turns, turns[1:], strict=False):
            assert rec.tool_wait_s == 0.03
            # the tool's latency passed between the reply's end and the next turn's arrival
            assert truth[rec.request_id]["received"] - truth[before.request_id]["closed"] >= 0.03


def test_a_fan_out_runs_its_sub_agents_at_once_and_waits_for_the_last(fan_out):
    records, truth, _ = fan_out
    sessions = by_session(records)
    for parent in ("r0u0s1", "r0u0s2"):
        subs = [sessions[f"{parent}/{k}"] for k in range(1, 5)]
        assert all(turns[0].parent_session == parent for turns in subs)
        assert all(len(turns) == 2 for turns in subs)  # every reply a tool call: the turn limit
        firsts = [truth[turns[0].request_id]["received"] for turns in subs]
        assert max(firsts) - min(firsts) < 0.010  # started together
        turns = sessions[parent]
        assert len(turns) == 3 and turns[1].tool_wait_s is None and turns[2].tool_wait_s == 0.02
        assert min(firsts) >= truth[turns[0].request_id]["closed"]
        last_end = max(truth[t[-1].request_id]["closed"] for t in subs)
        assert truth[turns[1].request_id]["received"] > last_end  # after the last sub-agent ended
    assert len(sessions) == 2 * 5
    check_conversations(records, truth, limit=3, sub_limit=2)


def test_responses_agents_send_function_call_items(tmp_path):
    records, truth, _ = agent_run(tmp_path, AGENT.format(endpoint="responses"), auto_tool_share=0.7)
    check_conversations(records, truth, limit=4)
    assert any(r.turn == 4 for r in records)


def test_a_rerun_sends_the_same_conversations(chat_agents, tmp_path):
    again, _, prefix = agent_run(tmp_path, AGENT.format(endpoint="chat"), auto_tool_share=0.7)
    first, _, base = chat_agents
    hashes = [{(r.session, r.turn): r.prompt_hash for r in run} for run in (first, again)]
    assert hashes[0] == hashes[1] and None not in hashes[0].values()
    outputs = output_identity(load_run(base), load_run(prefix))
    assert outputs.verdict == "identical" and outputs.compared == len(first)
