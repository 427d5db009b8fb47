"""Agent sessions (pure logic): the tool-call history each turn resends (chat and the Responses
API), the turn loop until a final answer or the turn limit, tool waits, a fan-out's sub-agents run
at once, seeded ids and text, the client's reading of call ids, the pairing of session turns
across runs, and the config keys' errors."""

from __future__ import annotations

import contextlib
import re

import gevent
import pytest
from fixtures.runs import make_record
from fixtures.sim_calibration import SIM_VOCAB

from llmload.analysis.identity.text_identity import pair_places
from llmload.core.clock import wall
from llmload.core.config import ConfigError, SessionConfig, parse_config
from llmload.loadgen.run.messages import config_to_dict
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.workload.session_play import SessionPlayer
from llmload.loadgen.workload.sessions import Reply, Session, ToolCall
from llmload.sim.formats.structured import tool_result_ids
from llmload.sim.tokens import chat_prompt

CALLS = (ToolCall("call-a", "get_weather", '{"city": "x"}'), ToolCall("call-b", "get_forecast", "{}"))
AGENT = SessionConfig(agent=True, turns=4, user_tokens=5, tool_result_tokens=7)


def test_a_tool_call_reply_and_its_results_are_resent_as_received_on_chat():
    session = Session(AGENT, 0, SIM_VOCAB, "r0u0s1")
    first = session.next_turn()
    session.answered(Reply("", CALLS))
    session.answer_tools(CALLS)
    second = session.next_turn(0.25)
    assert second.messages[: len(first.messages)] == first.messages
    assistant, *results = second.messages[len(first.messages) :]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "x"}'},
            },
            {"id": "call-b", "type": "function", "function": {"name": "get_forecast", "arguments": "{}"}},
        ],
    }
    assert [(m["role"], m["tool_call_id"]) for m in results] == [("tool", "call-a"), ("tool", "call-b")]
    assert all(len(m["content"].split()) == 7 for m in results)  # tool_result_tokens one-token words
    assert second.wait_s == 0.25 and second.number == 2  # no new user message after results
    assert tool_result_ids({"messages": second.messages}, responses=False) == ["call-a", "call-b"]
    assert chat_prompt(second.messages)[1] > chat_prompt(first.messages)[1]  # the context grows


def test_the_responses_api_gets_function_call_items_and_their_outputs():
    session = Session(AGENT, 0, SIM_VOCAB, "r0u0s1", responses=True)
    session.next_turn()
    session.answered(Reply(" let me look", CALLS[:1]))
    session.answer_tools(CALLS[:1], first=" the sub-agents' answer")
    messages = session.next_turn().messages
    assert messages[-3:] == [
        {"role": "assistant", "content": " let me look"},
        {"type": "function_call", "call_id": "call-a", "name": "get_weather", "arguments": '{"city": "x"}'},
        {"type": "function_call_output", "call_id": "call-a", "output": " the sub-agents' answer"},
    ]
    assert tool_result_ids({"input": messages}, responses=True) == ["call-a"]


def test_ids_and_text_are_seeded_by_seed_and_id():
    def text(seed, sid):
        session = Session(AGENT, seed, SIM_VOCAB, sid)
        session.next_turn()
        session.answered(Reply("", CALLS))
        session.answer_tools(CALLS)
        return session.next_turn().messages

    assert text(1, "r0u0s1") == text(1, "r0u0s1")
    assert text(1, "r0u0s1") != text(2, "r0u0s1") and text(1, "r0u0s1") != text(1, "r0u0s2")


def same(send):
    """A sub-agent sender that sends as the parent does (no connection of its own)."""
    return lambda: contextlib.nullcontext(send)


def scripted(replies_per_session, log):
    """A sender whose k-th reply in a session is replies_per_session(sid)[k-1] (None: the turn fails)."""

    def send(turn, on_reply):
        log.append((turn.session, turn.number, turn.parent, turn.wait_s, wall()))
        script = replies_per_session(turn.session)
        reply = script[min(turn.number, len(script)) - 1]
        gevent.sleep(0.01)
        if reply is not None:
            on_reply(reply)
        return 1

    return send


def test_an_agent_session_runs_until_its_final_answer_or_its_turn_limit():
    log: list = []
    tool, final = Reply("", CALLS[:1]), Reply(" done")
    script = {"r0u0s1": [tool, tool, final], "r0u0s2": [tool] * 9, "r0u0s3": [tool, None]}
    send = scripted(script.__getitem__, log)
    config = SessionConfig(agent=True, turns=4, per_user=3, tool_latency_s=0.02)
    assert SessionPlayer(config, 0, SIM_VOCAB, None, False, send, same(send)).play(0, 0) == 3 + 4 + 2
    turns = {}
    for sid, number, parent, wait, _ in log:
        turns.setdefault(sid, []).append((number, wait))
        assert parent is None
    assert turns["r0u0s1"] == [(1, None), (2, 0.02), (3, 0.02)]  # the final answer ends it
    assert [n for n, _ in turns["r0u0s2"]] == [1, 2, 3, 4]  # the turn limit
    assert [n for n, _ in turns["r0u0s3"]] == [1, 2]  # a failed turn ends it
    # the tool wait passed before the next turn was sent
    times = [t for sid, _, _, _, t in log if sid == "r0u0s1"]
    assert all(b - a >= 0.01 + 0.02 for a, b in zip(times, times[1:], strict=False))


def test_a_fan_out_starts_its_sub_agents_at_once_and_resumes_after_the_last():
    log: list = []
    tool = Reply("", CALLS[:1])

    def script(sid):
        return [tool, tool, Reply(" parent done")] if "/" not in sid else [tool, Reply(f" answer {sid[-1]}")]

    connections: list[str] = []

    @contextlib.contextmanager
    def own_connection():
        connections.append("open")
        yield send
        connections.append("closed")

    send = scripted(script, log)
    config = SessionConfig(
        agent=True, turns=4, tool_latency_s=0.01, fan_out=3, fan_out_turn=2, sub_agent_turns=2
    )
    player = SessionPlayer(config, 0, SIM_VOCAB, None, False, send, own_connection)
    assert player.play(1, 2) == 3 + 3 * 2
    assert connections == ["open"] * 3 + ["closed"] * 3  # each sub-agent on a connection of its own
    subs = {f"r1u2s1/{k}" for k in (1, 2, 3)}
    firsts = [t for sid, n, parent, _, t in log if sid in subs and n == 1 and parent == "r1u2s1"]
    assert len(firsts) == 3 and max(firsts) - min(firsts) < 0.005  # started together
    last_sub = max(t for sid, *_, t in log if sid in subs)
    (resumed,) = [(wait, t) for sid, n, _, wait, t in log if sid == "r1u2s1" and n == 3]
    assert resumed[0] is None and resumed[1] >= last_sub + 0.01  # after the last sub-agent's reply


def test_the_fan_out_result_is_the_sub_agents_answers_joined():
    seen: list = []

    def send(turn, on_reply):
        seen.append(turn)
        if "/" in turn.session:
            on_reply(Reply(f" answer {turn.session[-1]}"))
        else:
            on_reply(Reply("", CALLS[:1]) if turn.number == 1 else Reply(" done"))
        return 1

    config = SessionConfig(agent=True, turns=3, fan_out=2, fan_out_turn=1)
    SessionPlayer(config, 0, SIM_VOCAB, None, False, send, same(send)).play(0, 0)
    resumed = next(t for t in seen if t.session == "r0u0s1" and t.number == 2)
    assert resumed.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call-a",
        "content": " answer 1\n\n answer 2",
    }


def test_the_client_keeps_each_calls_id():
    acc = StreamAccumulator(chat=True, keep_text=True)
    lines = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
        b'"function":{"name":"f","arguments":""}}]}}]}',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2",'
        b'"function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}',
        b"data: [DONE]",
    ]
    for i, line in enumerate(lines):
        acc.feed(line, i * 0.01)
    assert acc.tools is not None and acc.tools.calls() == [("c1", "f", "{}"), ("c2", "g", "{}")]


def test_compare_pairs_session_turns_by_session_and_turn():
    def turn(t, prompt):
        return make_record(t, t + 1, 8, 0.1, session="r0u0s1", turn=t, prompt_hash=prompt, text_hash="x")

    base = [turn(t, f"b{t}") for t in (1, 2)]
    # the candidate's turn 2 resent another reply (its history differs): still its partner
    cand = [turn(t, f"c{t}") for t in (1, 2)]
    pairs, cand_left, base_left = pair_places(base, cand)
    assert [(c.turn, b.turn) for c, b in pairs] == [(1, 1), (2, 2)] and cand_left == base_left == 0


def test_agent_settings_survive_the_trip_to_the_workers():
    raw = {
        "endpoint": "chat",
        "tools": "weather",
        "sessions": {
            "agent": True,
            "tool_result_tokens": {"dist": "uniform", "min": 5, "max": 9},
            "fan_out": 2,
        },
    }
    config = parse_config(raw, "c.yaml")
    assert parse_config(config_to_dict(config), "c.yaml") == config
    assert config.with_overrides(max_tokens=5).sessions == config.sessions


TOOLS = {"endpoint": "chat", "tools": "weather"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**TOOLS, "sessions": {"agent": True, "fan_out": 0}}, "'sessions.fan_out' must be"),
        ({**TOOLS, "sessions": {"agent": True, "fan_out": 17}}, "'sessions.fan_out' must be"),
        (
            {**TOOLS, "sessions": {"agent": True, "fan_out": 2, "turns": 2, "fan_out_turn": 2}},
            "must be below",
        ),
        ({**TOOLS, "sessions": {"agent": True, "tool_latency_s": -1}}, "'sessions.tool_latency_s' must be"),
        ({**TOOLS, "sessions": {"agent": True, "tool_latency": "pareto"}}, "'sessions.tool_latency' must be"),
        ({**TOOLS, "sessions": {"agent": True, "tool_result_tokens": 0}}, "'sessions.tool_result_tokens'"),
        ({**TOOLS, "sessions": {"agent": True, "sub_agent_turns": 0}}, "'sessions.sub_agent_turns' must be"),
        ({**TOOLS, "sessions": {"agent": "yes"}}, "'sessions.agent' must be true or false"),
        (
            {**TOOLS, "sessions": {"agent": True, "think_time_s": 1}},
            "'sessions.think_time_s' is a user's pause",
        ),
        ({"endpoint": "chat", "sessions": {"agent": True}}, "'sessions.agent' needs 'tools'"),
        ({**TOOLS, "tool_choice": "none", "sessions": {"agent": True}}, "'sessions.agent' needs 'tools'"),
        ({**TOOLS, "sessions": {"fan_out": 2}}, "'sessions.fan_out' needs 'sessions.agent: true'"),
    ],
)
def test_config_errors(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(raw, "c.yaml")


def test_a_user_session_resends_only_the_text_of_a_tool_call_reply():
    session = Session(SessionConfig(turns=3), 0, SIM_VOCAB, "r0u0s1")
    session.next_turn()
    session.answered(Reply(" text", CALLS))
    assert [m["role"] for m in session.next_turn().messages] == ["user", "assistant", "user"]
    assert session.history[1] == {"role": "assistant", "content": " text"}


def test_stopping_the_user_stops_its_sub_agents():
    started: list = []
    stopped: list = []

    def send(turn, on_reply):
        started.append(turn.session)
        try:
            gevent.sleep(0 if "/" not in turn.session else 10)
        finally:
            stopped.append(turn.session)
        on_reply(Reply("", CALLS[:1]))
        return 1

    config = SessionConfig(agent=True, turns=3, fan_out=2)
    user = gevent.spawn(SessionPlayer(config, 0, SIM_VOCAB, None, False, send, same(send)).play, 0, 0)
    gevent.sleep(0.05)
    assert started == ["r0u0s1", "r0u0s1/1", "r0u0s1/2"] and stopped == ["r0u0s1"]
    user.kill()  # as Locust stops a user
    assert sorted(stopped) == ["r0u0s1", "r0u0s1/1", "r0u0s1/2"]  # its sub-agents were killed with it
