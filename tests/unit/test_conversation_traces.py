"""The peers' conversation traces read back field by field (llmload.core.workload.conversations):
AIPerf's multi-turn Mooncake trace and the Weka agentic trace, their mistakes, and the turn texts
the trace workload builds for them (their tokens by the simulator's count)."""

from __future__ import annotations

import json
import re

import pytest
from fixtures.sim_calibration import SIM_OVERHEAD, SIM_VOCAB

from llmload.cli.trace_stats import main as trace_stats_main
from llmload.core.config import ConfigError, SweepConfig
from llmload.core.workload.conversations import (
    HISTORY_AUTHORED,
    HISTORY_DELTAS,
    HISTORY_ISOLATED,
    HISTORY_WHOLE,
    Conversation,
    ConversationTurn,
)
from llmload.core.workload.trace_file import parse_trace
from llmload.core.workload.trace_formats import parse_conversations
from llmload.loadgen.workload.trace import TraceWorkload
from llmload.sim.tokens import count_tokens

MOONCAKE = """\
{"session_id": "a", "timestamp": 500, "input_length": 600, "output_length": 8, "hash_ids": [4, 5]}
{"session_id": "b", "input_length": 30, "output_length": 6}
{"session_id": "a", "delay": 250.5, "input_length": 20, "output_length": 5, "timestamp": 99999}
{"timestamp": 100, "input_length": 9, "output_length": 2}
"""
SUB = {
    "t": 2.0,
    "type": "subagent",
    "agent_id": "x",
    "subagent_type": "Explore",
    "duration_ms": 1500,
    "requests": [
        {"t": 0.5, "type": "n", "model": "m", "in": 40, "out": 3, "api_time": 0.2},
        {"t": 2.9, "type": "n", "model": "m", "in": 50, "out": 2, "hash_ids": [7], "api_time": 0.1},
    ],
}
WEKA = {
    "id": "s1",
    "models": ["m"],
    "block_size": 16,
    "tool_tokens": 10,
    "system_tokens": 5,
    "requests": [
        {
            "t": 0.0,
            "type": "s",
            "model": "m",
            "in": 100,
            "out": 6,
            "hash_ids": [1, 2],
            "api_time": 1.0,
            "ttft": 0.1,
        },
        SUB,
        {**SUB, "agent_id": "y", "t": 2.5, "duration_ms": None},
        {"t": 5.0, "type": "n", "model": "m", "in": 150, "out": 5, "hash_ids": [1, 2, 3], "api_time": 0.5},
        {"t": 5.25, "type": "s", "model": "m", "in": 160, "out": 5},
    ],
}


def test_mooncake_sessions_are_conversations_in_file_order():
    convs = parse_conversations(MOONCAKE, "t.jsonl")
    assert convs is not None
    assert [(c.id, c.timestamp_ms, c.history, c.block_tokens, c.parent) for c in convs] == [
        ("b", 0.0, HISTORY_DELTAS, 512, None),  # no timestamp: the replay's start
        ("line4", 100.0, HISTORY_DELTAS, 512, None),  # no session_id: a conversation of its own
        ("a", 500.0, HISTORY_DELTAS, 512, None),
    ]
    a = convs[2]
    assert a.turns == (
        ConversationTurn(line=1, input_length=600, output_length=8, hash_ids=(4, 5), wait_s=0.0),
        ConversationTurn(
            line=3, input_length=20, output_length=5, wait_s=0.2505
        ),  # a later timestamp: unread
    )
    assert [c.requests() for c in convs] == [1, 1, 2]
    assert parse_conversations('{"timestamp": 0, "input_length": 5, "output_length": 1}\n', "flat") is None
    lines = parse_trace(MOONCAKE, "t.jsonl")
    assert [(t.line, t.session_id, t.delay_ms) for t in lines] == [
        (2, "b", None),
        (4, None, None),
        (1, "a", None),
        (3, "a", 250.5),
    ]


def test_a_csv_trace_may_carry_sessions_without_timestamps():
    csv = "session_id,delay,input_length,output_length\na,,10,2\na,40,5,1\n"
    (conv,) = parse_conversations(csv, "t.csv") or []
    assert [(t.line, t.input_length, t.wait_s) for t in conv.turns] == [(2, 10, 0.0), (3, 5, 0.04)]


def test_weka_turns_subagents_and_waits():
    for text in (
        json.dumps(WEKA, indent=2),
        json.dumps(WEKA) + "\n" + json.dumps({**WEKA, "id": "s2"}) + "\n",
    ):
        convs = parse_conversations(text, "w.json")
        assert convs is not None and convs[0].id == "s1"
    assert [c.id for c in convs] == ["s1", "s2"] and [t.line for t in convs[1].turns] == [2, 2, 2]
    (conv,) = parse_conversations(json.dumps(WEKA), "w.json") or []
    assert (conv.timestamp_ms, conv.history, conv.block_tokens, conv.parent, conv.wait_s) == (
        0.0,
        HISTORY_WHOLE,
        16,
        None,
        0.0,
    )
    first, second, third = conv.turns
    assert (first.input_length, first.output_length, first.hash_ids, first.wait_s) == (100, 6, (1, 2), 0.0)
    x, y = first.subagents
    assert (x.id, x.parent, x.history, x.block_tokens, x.wait_s) == ("s1/1", "s1", HISTORY_WHOLE, 16, 1.0)
    assert [(t.input_length, t.output_length, t.hash_ids, t.wait_s) for t in x.turns] == [
        (40, 3, None, 0.0),
        (50, 2, (7,), pytest.approx(2.9 - 2.7)),  # 0.5 is before the start 2.0: relative, 2.5 + 0.2 ends it
    ]
    assert (y.id, y.wait_s) == ("s1/2", 1.5)  # y starts at 2.5, 1.5 s after turn 1's recorded end
    # y: its first request at 2.5 + 0.5 = 3.0 (relative), its second at 2.9 (absolute): no wait
    assert [t.wait_s for t in y.turns] == [0.0, 0.0]
    # turn 2 (t 5.0) waits after the last end of its predecessors: x's, 2.0 + 1.5 (duration_ms)
    assert second.wait_s == pytest.approx(1.5) and second.subagents == ()
    assert third.wait_s == 0.0  # t 5.25 is before turn 2's recorded end (5.0 + 0.5): no wait
    assert conv.requests() == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"id": "s", "block_size": 16, "requests": [{"t": 0, "type": "x"}]}',
            "w.json:1 requests[1]: 'type' must be one of n, s, subagent, got 'x'",
        ),
        (
            '{"id": "s", "block_size": 16, "requests": [{"t": 0, "type": "n", "in": "9", "out": 1}]}',
            "w.json:1 requests[1]: 'in' must be an integer >= 1, got '9'",
        ),
        (
            '{"id": "s", "block_size": 16, "requests": [{"t": -1, "type": "n", "in": 9, "out": 1}]}',
            "w.json:1 requests[1]: 't' must be a number >= 0, got -1",
        ),
        (
            '{"id": "s", "block_size": 0, "requests": [{"t": 0}]}',
            "w.json:1: 'block_size' must be an integer >= 1, got 0",
        ),
        ('{"id": "", "block_size": 4, "requests": []}', "w.json:1: 'id' must be a non-empty string, got ''"),
        ('{"id": "s", "block_size": 4, "requests": []}', "w.json:1: 'requests' must be a non-empty list"),
        (
            json.dumps({**WEKA, "requests": [SUB]}),
            "w.json:1 requests[1]: a sub-agent before the first request has no turn to spawn it",
        ),
        (
            json.dumps({**WEKA, "requests": [WEKA["requests"][0], {**SUB, "requests": []}]}),
            "w.json:1 requests[2]: a sub-agent without requests sends nothing",
        ),
        (
            json.dumps(
                {
                    **WEKA,
                    "requests": [WEKA["requests"][0], {**SUB, "requests": [{"t": 0, "type": "subagent"}]}],
                }
            ),
            "w.json:1 requests[2] requests[1]: 'type' must be one of n, s, got 'subagent'",
        ),
        (
            json.dumps(WEKA) + "\n" + json.dumps(WEKA) + "\n",
            "w.json:2: 'id' 's1' is used by an earlier trace",
        ),
        (
            json.dumps(WEKA) + '\n{"timestamp": 0, "input_length": 5, "output_length": 1}\n',
            "w.json:2: not a Weka trace object",
        ),
        (
            '{"session_id": 7, "timestamp": 0, "input_length": 5, "output_length": 1}\n',
            "w.json:1: 'session_id' must be a string, got 7",
        ),
        (
            '{"session_id": "a", "delay": "soon", "input_length": 5, "output_length": 1}\n',
            "w.json:1: 'delay' must be a number of milliseconds >= 0, got 'soon'",
        ),
        (
            '{"timestamp": 0, "delay": 5, "input_length": 5, "output_length": 1}\n',
            "w.json:1: 'delay' is the wait of a turn after its predecessor: it needs a 'session_id'",
        ),
        (
            '{"session_id": "a", "input_length": 5}\n',
            "w.json:1: 'output_length' must be an integer >= 1, got None",
        ),
        ('{"prompt": "hi"}\n', "w.json:1: 'input_length' must be an integer >= 1, got None"),
    ],
)
def test_bad_conversation_traces_name_the_line_and_field(text, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)) as err:
        parse_conversations(text, "w.json")
    assert "\n" not in str(err.value)


def workload(tmp_path, text, endpoint="chat"):
    trace = tmp_path / "t.jsonl"
    trace.write_text(text)
    config = SweepConfig(mode="trace", trace_file=str(trace), warmup_requests=0, seed=3, endpoint=endpoint)
    return TraceWorkload(config, SIM_VOCAB, SIM_OVERHEAD)


def test_turn_texts_cost_what_the_trace_says(tmp_path):
    wl = workload(tmp_path, MOONCAKE)
    a = wl.conversations[2]
    assert wl.requests == 4 and wl.offsets == [0.0, 0.1, 0.5]
    # a user message: input_length words after a space, one token each (no BOS: the request adds it)
    first, second = wl.turn_text(a, 1), wl.turn_text(a, 2)
    assert (count_tokens(first) - 1, count_tokens(second) - 1) == (600, 20)
    assert first.split()[:512] == wl.turn_text(a, 1).split()[:512] and first.startswith(" ")
    weka = workload(tmp_path, json.dumps(WEKA), endpoint="completions")
    (conv,) = weka.conversations
    x = conv.turns[0].subagents[0]
    # a whole prompt: exactly `in` tokens with the overhead, blocks of block_size shared by hash_ids
    assert [count_tokens(weka.turn_text(conv, k)) for k in (1, 2, 3)] == [100, 150, 160]
    assert [count_tokens(weka.turn_text(x, k)) for k in (1, 2)] == [40, 50]
    # the anchor and blocks 1 and 2 (14 + 16 words) shared, the third block not; no hash_ids, nothing
    one, two, three = (weka.turn_text(conv, k).split() for k in (1, 2, 3))
    assert one[:31] == two[:31] and one[31] != two[31] and three[1] != one[1]
    assert weka.requests == 7 and weka.offsets == [0.0]


def test_a_multi_turn_trace_needs_messages(tmp_path):
    with pytest.raises(
        ConfigError,
        match=re.escape("t.jsonl: a multi-turn trace sends each turn as chat messages"),
    ):
        workload(tmp_path, MOONCAKE, endpoint="completions")
    small = {**WEKA, "requests": [{**WEKA["requests"][0], "in": 1}]}
    with pytest.raises(ConfigError, match=re.escape("t.jsonl:1: 'input_length' 1 is below the 2 tokens")):
        workload(tmp_path, json.dumps(small), endpoint="completions")


def test_a_conversation_counts_its_subagents_turns():
    sub = Conversation("p/1", 0.0, (ConversationTurn(1, 5, 1),))
    turn = ConversationTurn(1, 5, 1, subagents=(sub, sub))
    assert Conversation("p", 0.0, (turn, ConversationTurn(1, 5, 1))).requests() == 4


def user(text):
    return {"role": "user", "content": text}


DAG = [
    {
        "session_id": "root",
        "turns": [
            {
                "messages": [{"role": "system", "content": "s"}, user("plan")],
                "max_tokens": 5,
                "delay": 40,
                "spawns": ["a", "b"],
            },
            {
                "messages": [user("merge")],
                "max_tokens": 4,
                "delay": 25.5,
                "spawns": [{"children": ["c"], "join_at": 3}],
            },
            {"messages": [user("go on")], "max_tokens": 3, "model": "x", "extra": {"temperature": 1}},
            {"messages": [user("done")], "max_tokens": 2},
        ],
    },
    {"session_id": "a", "turns": [{"messages": [user("look")], "max_tokens": 6, "delay": 10}]},
    {
        "session_id": "b",
        "context_mode": "message_array_with_responses",
        "turns": [
            {"messages": [user("x")], "max_tokens": 1},
            {"messages": [user("y")], "max_tokens": 1, "spawns": ["d"]},
        ],
    },
    {
        "session_id": "c",
        "context_mode": "deltas_with_responses",
        "turns": [{"messages": [user("z")], "max_tokens": 2}],
    },
    {"session_id": "d", "turns": [{"messages": [user("w")], "max_tokens": 2}]},
    {"session_id": "lone", "turns": [{"messages": [user("q")], "max_tokens": 9}]},
]


def test_dag_roots_spawns_joins_and_context_modes():
    text = "".join(json.dumps(line) + "\n" for line in DAG)
    root, lone = parse_conversations(text, "d.jsonl") or []
    assert (root.id, root.timestamp_ms, root.history, root.parent) == ("root", 40.0, HISTORY_DELTAS, None)
    assert (lone.id, lone.timestamp_ms, lone.turns[0].line, lone.turns[0].output_length) == (
        "lone",
        0.0,
        6,
        9,
    )
    assert [(t.line, t.output_length, t.wait_s, t.messages[-1]["content"]) for t in root.turns] == [
        (1, 5, 0.0, "plan"),  # a first turn's delay is the conversation's (a root: its start)
        (1, 4, 0.0255, "merge"),
        (1, 3, 0.0, "go on"),
        (1, 2, 0.0, "done"),
    ]
    assert root.turns[0].messages[0] == {"role": "system", "content": "s"}
    a, b = root.turns[0].subagents
    (c,) = root.turns[1].subagents
    assert [(s.id, s.parent, s.join_turn, s.wait_s, s.history) for s in (a, b, c)] == [
        ("root/1", "root", None, 0.01, HISTORY_DELTAS),
        ("root/2", "root", None, 0.0, HISTORY_ISOLATED),
        ("root/3", "root", 4, 0.0, HISTORY_AUTHORED),  # join_at 3 (0-based): turn 4 waits for it
    ]
    (d,) = b.turns[1].subagents
    assert (d.id, d.parent, [t.line for t in d.turns]) == ("root/2/1", "root/2", [5])
    assert root.requests() == 9  # root 4, a 1, b 2 and its d 1, c 1


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")]}]}],
            "d.jsonl:1 turns[0]: 'max_tokens' must be an integer >= 1 (required here), got None",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [], "max_tokens": 1}]}],
            "d.jsonl:1 turns[0]: 'messages' must be a non-empty list of objects with a 'role'",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1, "delay": "1"}]}],
            "d.jsonl:1 turns[0]: 'delay' must be a number of milliseconds >= 0, got '1'",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1, "spawns": ["nope"]}]}],
            "d.jsonl:1: 'spawns' names 'nope', which no line defines",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1, "forks": ["r"]}]}],
            "d.jsonl:1: 'forks' is AIPerf's and not replayed here",
        ),
        (
            [{"session_id": "r", "turns": [], "orchestrator": True, "spawns": ["a"]}],
            "d.jsonl:1: 'orchestrator' is AIPerf's and not replayed here",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1}]}] * 2,
            "d.jsonl:2: 'session_id' 'r' is used by line 1",
        ),
        (
            [
                {
                    "session_id": "r",
                    "turns": [
                        {
                            "messages": [user("x")],
                            "max_tokens": 1,
                            "spawns": [{"children": ["r"], "join_at": 0}],
                        }
                    ],
                }
            ],
            "d.jsonl:1 turns[0]: 'join_at' must be a later turn's index, got 0",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1, "spawns": ["r"]}]}],
            "d.jsonl: every conversation is spawned by another: a spawn cycle",
        ),
        (
            [
                {"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1}]},
                {"session_id": "a", "turns": [{"messages": [user("x")], "max_tokens": 1, "spawns": ["b"]}]},
                {"session_id": "b", "turns": [{"messages": [user("x")], "max_tokens": 1, "spawns": ["a"]}]},
            ],
            "d.jsonl: 2 conversations spawn each other in a cycle",
        ),
        (
            [{"session_id": "r", "context_mode": "x", "turns": [{"messages": [user("x")], "max_tokens": 1}]}],
            "d.jsonl:1: 'context_mode' must be one of deltas_without_responses",
        ),
        (
            [{"session_id": "r", "turns": [{"messages": [user("x")], "max_tokens": 1}]}, {"timestamp": 0}],
            "d.jsonl:2: not a DAG conversation",
        ),
    ],
)
def test_bad_dag_traces_name_the_line_and_field(lines, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)) as err:
        parse_conversations("".join(json.dumps(line) + "\n" for line in lines), "d.jsonl")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "name"), [(json.dumps(WEKA), "a Weka trace"), (json.dumps(DAG[1]), "AIPerf's DAG trace")]
)
def test_trace_stats_reads_request_lines_only(tmp_path, capsys, text, name):
    path = tmp_path / "t.jsonl"
    path.write_text(text + "\n")
    assert trace_stats_main([str(path)]) == 2
    message = f"{path}: {name} holds conversations, not the request lines of a Mooncake or CSV trace"
    assert capsys.readouterr().err == f"llmload trace-stats: error: {message}\n"
    path.write_text(MOONCAKE)  # AIPerf's multi-turn trace has them: each turn as a line
    assert trace_stats_main([str(path)]) == 0 and "4 requests" in capsys.readouterr().out
