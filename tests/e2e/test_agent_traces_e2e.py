"""Replay of the peers' conversation traces (`mode: trace`, llmload.core.workload.trace_formats) by
a real `locust` run against the simulator, checked against its truth log: AIPerf's multi-turn
Mooncake trace (`session_id`, `delay`; each turn a new user message after the history and the
replies as received), AIPerf's DAG trace (authored messages, two sub-agents spawned at once, the
next turn waiting for both) and the Weka agentic trace of inference-perf and AIPerf
(whole-context prompts, a sub-agent spawned after a turn, the next turn waiting for it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep
from llmload.sim.tokens import BOS_TOKENS, CHAT_TEMPLATE_TOKENS_PER_MESSAGE, chat_prompt
from llmload.sim.truth import load_truth

FAST_SIM = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.2}
LATE_S = 0.060  # a turn is sent after its predecessors' end plus its wait, at most this much later
# AIPerf's multi-turn Mooncake trace: two conversations interleaved in the file
MOONCAKE = [
    {"session_id": "a", "timestamp": 0, "input_length": 40, "output_length": 8},
    {"session_id": "b", "timestamp": 100, "input_length": 30, "output_length": 6},
    {"session_id": "a", "delay": 300, "input_length": 20, "output_length": 5},
    {"session_id": "b", "delay": 200, "input_length": 25, "output_length": 4},
    {"session_id": "a", "delay": 150, "input_length": 10, "output_length": 5},
]

PLAN, MERGE = (
    {"role": "user", "content": "plan the work"},
    {"role": "user", "content": "merge the two reports"},
)
# AIPerf's DAG trace: the root's first turn spawns a and b (b 50 ms later); its second waits for both
DAG = [
    {
        "session_id": "root",
        "turns": [
            {"messages": [PLAN], "max_tokens": 5, "spawns": ["a", "b"]},
            {"messages": [MERGE], "max_tokens": 4, "delay": 150},
        ],
    },
    {"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "look here"}], "max_tokens": 6}]},
    {
        "session_id": "b",
        "turns": [{"messages": [{"role": "user", "content": "look there"}], "max_tokens": 8, "delay": 50}],
    },
]


def request(t: float, kind: str, tokens_in: int, out: int, *ids: int) -> dict:
    """A Weka request that took 0.1 s."""
    return {
        "t": t,
        "type": kind,
        "model": "m",
        "in": tokens_in,
        "out": out,
        "hash_ids": list(ids),
        "api_time": 0.1,
    }


# a Weka trace: turn 1, a sub-agent of two requests spawned 0.2 s after it ends, turn 2 after both
SUBAGENT = [request(0.0, "n", 70, 4), request(0.25, "n", 90, 4, 9)]
SPAWN = {"t": 0.3, "type": "subagent", "agent_id": "agent_1", "duration_ms": 500, "requests": SUBAGENT}
WEKA = {
    "id": "w",
    "block_size": 64,
    "requests": [request(0.0, "s", 100, 6, 1), SPAWN, request(1.0, "s", 150, 5, 1, 2)],
}


def replay(tmp: Path, trace: str, endpoint: str) -> tuple[list, dict]:
    path = tmp / "trace.jsonl"
    path.write_text(trace)
    ladder = tmp / "trace.yaml"
    ladder.write_text(
        f"mode: trace\ntrace_file: {path}\nendpoint: {endpoint}\nmax_concurrency: 4\nwarmup_requests: 0\n"
    )
    run = run_sweep(
        run_dir=tmp, endpoint=endpoint, locust_args=["--ladder", str(ladder)], sim=FAST_SIM, timeout=120
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, skipped = read_records(run.records)
    assert not skipped and all(r.ok for r in records)
    truth, _ = load_truth(run.truth_log)
    return records, truth


def by_session(truth: dict) -> dict[str, list[dict]]:
    """The simulator's requests per `X-Session-Id` (not the calibration's: no session), as received."""
    sessions: dict[str, list[dict]] = {}
    for t in sorted(truth.values(), key=lambda t: t["received"]):
        if t["session"] is not None:
            sessions.setdefault(t["session"], []).append(t)
    return sessions


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    text = "".join(json.dumps(line) + "\n" for line in MOONCAKE)
    return replay(tmp_path_factory.mktemp("mooncake"), text, "chat")


@pytest.fixture(scope="module")
def dag(tmp_path_factory):
    return replay(tmp_path_factory.mktemp("dag"), "".join(json.dumps(line) + "\n" for line in DAG), "chat")


@pytest.fixture(scope="module")
def weka(tmp_path_factory):
    return replay(tmp_path_factory.mktemp("weka"), json.dumps(WEKA, indent=1), "completions")


def test_mooncake_turns_arrive_in_order_after_their_delay(mooncake):
    records, truth = mooncake
    sessions = by_session(truth)
    assert sorted(sessions) == ["a", "b"]
    for sid, seen in sessions.items():
        turns = [line for line in MOONCAKE if line["session_id"] == sid]
        mine = sorted((r for r in records if r.session == sid), key=lambda r: r.turn)
        assert [r.turn for r in mine] == list(range(1, len(turns) + 1))
        assert [truth[r.request_id]["received"] for r in mine] == [t["received"] for t in seen]  # in order
        for before, after, line in zip(seen[:-1], seen[1:], turns[1:], strict=True):
            gap = after["received"] - before["closed"]
            assert line["delay"] / 1000 <= gap <= line["delay"] / 1000 + LATE_S
    # b's first turn at its timestamp, 100 ms after a's
    assert 0.1 - LATE_S <= sessions["b"][0]["received"] - sessions["a"][0]["received"] <= 0.1 + LATE_S


def test_mooncake_turns_resend_the_history_with_the_replies(mooncake):
    records, truth = mooncake
    template = CHAT_TEMPLATE_TOKENS_PER_MESSAGE
    for sid, seen in by_session(truth).items():
        turns = [line for line in MOONCAKE if line["session_id"] == sid]
        expected = BOS_TOKENS
        for k, (t, line) in enumerate(zip(seen, turns, strict=True)):
            if k:
                expected += template + seen[k - 1]["completion_tokens"]  # the reply, resent
            expected += template + line["input_length"]
            assert t["prompt_tokens"] == expected
            assert t["completion_tokens"] == line["output_length"]
    assert {(r.session, r.turn): r.trace_line for r in records}[("a", 3)] == 5
    assert all(r.parent_session is None for r in records)
    assert sorted(r.tool_wait_s for r in records if r.turn > 1) == pytest.approx([0.15, 0.2, 0.3])


def test_dag_subagents_run_at_once_and_the_next_turn_waits_for_both(dag):
    records, truth = dag
    sessions = by_session(truth)
    assert sorted(sessions) == ["root", "root/1", "root/2"]
    (t1, t2), (a,), (b,) = sessions["root"], sessions["root/1"], sessions["root/2"]
    assert 0.0 <= a["received"] - t1["closed"] <= LATE_S  # both spawned when turn 1 ends, b 50 ms later
    assert 0.05 <= b["received"] - t1["closed"] <= 0.05 + LATE_S
    assert 0.15 <= t2["received"] - max(a["closed"], b["closed"]) <= 0.15 + LATE_S
    # turn 2 resends turn 1's message and its reply as received, then its own message
    resent = CHAT_TEMPLATE_TOKENS_PER_MESSAGE + t1["completion_tokens"]
    assert t2["prompt_tokens"] == chat_prompt([PLAN, MERGE])[1] + resent
    assert [t["completion_tokens"] for t in (t1, a, b, t2)] == [5, 6, 8, 4]
    mine = {r.session: r for r in records if r.turn == 1}
    assert mine["root/1"].parent_session == mine["root/2"].parent_session == "root"
    assert [r.tool_wait_s for r in records if r.session == "root" and r.turn == 2] == [pytest.approx(0.15)]


def test_weka_subagent_runs_between_its_turns(weka):
    records, truth = weka
    sessions = by_session(truth)
    assert sorted(sessions) == ["w", "w/1"]
    (t1, t2), (s1, s2) = sessions["w"], sessions["w/1"]
    # the sub-agent starts 0.3 - 0.1 s after turn 1 ends; its second request 0.25 - 0.1 s after its first
    assert 0.2 <= s1["received"] - t1["closed"] <= 0.2 + LATE_S
    assert 0.15 <= s2["received"] - s1["closed"] <= 0.15 + LATE_S
    # turn 2 waits for the sub-agent's recorded end (0.3 + 0.5 s) and then 1.0 - 0.8 s
    assert 0.2 <= t2["received"] - s2["closed"] <= 0.2 + LATE_S
    assert [t["prompt_tokens"] for t in (t1, s1, s2, t2)] == [100, 70, 90, 150]  # the whole context
    assert [t["completion_tokens"] for t in (t1, s1, s2, t2)] == [6, 4, 4, 5]
    subs = [r for r in records if r.session == "w/1"]
    assert {r.parent_session for r in subs} == {"w"} and sorted(r.turn for r in subs) == [1, 2]


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (json.dumps({**WEKA, "requests": [SPAWN]}), ":1 requests[1]: a sub-agent before the first request"),
        ('{"session_id": "a", "input_length": 5, "output_length": true}\n', ":1: 'output_length'"),
        ('{"prompt": "neither format"}\n', ":1: 'input_length' must be an integer >= 1, got None"),
    ],
)
def test_a_bad_conversation_trace_stops_the_run_before_any_turn(tmp_path, trace, message):
    path = tmp_path / "trace.jsonl"
    path.write_text(trace)
    ladder = tmp_path / "trace.yaml"
    ladder.write_text(f"mode: trace\ntrace_file: {path}\nendpoint: chat\nwarmup_requests: 0\n")
    run = run_sweep(run_dir=tmp_path, locust_args=["--ladder", str(ladder)], sim=FAST_SIM, timeout=60)
    log = run.log.read_text()
    assert run.returncode == 2, log[-2000:]
    (line,) = (raw for raw in log.splitlines() if raw.startswith("llmload: error: "))
    assert line.startswith(f"llmload: error: {path}{message}") and "Traceback" not in log
    truth, _ = load_truth(run.truth_log)
    assert by_session(truth) == {}  # no turn was sent
