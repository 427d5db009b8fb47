"""The simulator's tool calls and structured output, on the wire and against its truth log.

Plain `http.client` clients (test_sim's), never Locust: the simulator is checked apart from the
load generator. What is checked: a chat tool-call stream as vLLM sends it (the first delta of a
call names the function with its id and type, later ones append argument text, `finish_reason:
tool_calls`, usage counting the call's tokens), one token a chunk or several; the Responses API's
function_call items; arguments and JSON answers that parse and fit their schema (jsonschema, not
the simulator's own generator); `tool_choice` and `parallel_tool_calls`; the invalid share decided
by the seed (`is_invalid`); the same request getting the same call; a rejected key; the session
header; and every figure against the truth log's own account of what was sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from test_sim import FAST, Reply, call, truth_of  # pytest puts tests/e2e on the path

from llmload.servers.simulator import SimulatorProcess
from llmload.sim.config import DEFAULT_SEED
from llmload.sim.formats.structured import is_invalid
from llmload.sim.tokens import chat_prompt, prompt_hash

pytestmark = pytest.mark.untimed

ONE_TOKEN = {**FAST, "accept_len": 1, "max_draft": 0}  # one token a step, so one a chunk
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "hours": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "maxItems": 4},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}}}
ANSWER = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}}},
    "required": ["title", "tags"],
    "$defs": {"tag": {"type": "string", "maxLength": 12}},
}
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH, "noop": {"type": "object", "properties": {}}}


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": SCHEMAS[n]}} for n in names]


def chat(prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def tool_deltas(reply: Reply) -> list[list[dict[str, Any]]]:
    """Each message's `delta.tool_calls` (messages without one left out)."""
    out = []
    for _, chunk in reply.chunks:
        for choice in chunk.get("choices") or []:
            if calls := (choice.get("delta") or {}).get("tool_calls"):
                out.append(calls)
    return out


def assembled(reply: Reply) -> list[dict[str, str]]:
    """The calls a client assembles from the deltas, by index: id, name, arguments."""
    calls: dict[int, dict[str, str]] = {}
    for deltas in tool_deltas(reply):
        for d in deltas:
            call_ = calls.setdefault(d["index"], {"id": "", "name": "", "arguments": ""})
            call_["id"] += d.get("id", "")
            call_["name"] += d.get("function", {}).get("name", "")
            call_["arguments"] += d.get("function", {}).get("arguments", "")
    return [calls[i] for i in sorted(calls)]


def usage_of(reply: Reply) -> dict[str, Any]:
    return next(c["usage"] for _, c in reply.chunks if c.get("usage"))


def test_a_tool_call_streams_as_vllm_does_one_token_a_chunk(
    sim_start: Callable[..., SimulatorProcess],
) -> None:
    sim = sim_start(**ONE_TOKEN)
    reply = call(
        sim.url,
        "/v1/chat/completions",
        chat("weather in town", tools=tools("get_weather"), tool_choice="required"),
        request_id="w1",
    )
    assert reply.status == 200 and reply.done and reply.finish_reason == "tool_calls"
    deltas = tool_deltas(reply)
    first, rest = deltas[0][0], [d for ds in deltas[1:] for d in ds]
    assert first["type"] == "function" and first["id"] and first["function"]["name"] == "get_weather"
    assert all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in rest)
    (made,) = assembled(reply)
    jsonschema.validate(json.loads(made["arguments"]), WEATHER)
    truth = truth_of(sim, ["w1"])[0]["w1"]
    # one token a chunk: the header token (the name), then one message per argument token
    assert len(deltas) == truth["completion_tokens"] == usage_of(reply)["completion_tokens"]
    assert truth["chunk_tokens"] == [1] * len(deltas)
    assert truth["structured"] == "tool_calls" and truth["valid"] is True
    assert truth["tool_calls"] == [made]
    assert truth["tokens"][0] == "get_weather" and "".join(truth["tokens"][1:]) == made["arguments"]
    assert [d[0]["function"].get("arguments", "") for d in deltas[1:]] == truth["tokens"][1:]


def test_several_tokens_a_chunk_and_the_same_request_gets_the_same_call(
    sim_start: Callable[..., SimulatorProcess],
) -> None:
    sim = sim_start(**FAST, accept_len=4.5)
    body = chat("plan a trip", tools=tools("get_weather", "search"), tool_choice="required")
    replies = [call(sim.url, "/v1/chat/completions", body, request_id=f"r{i}") for i in range(2)]
    assert assembled(replies[0]) == assembled(replies[1])  # greedy: the same call, id included
    requests = truth_of(sim, ["r0", "r1"])[0]
    assert max(requests["r0"]["chunk_tokens"]) > 1  # several tokens a chunk
    assert len(tool_deltas(replies[0])) == len(requests["r0"]["chunk_times"])
    for made in assembled(replies[0]):
        jsonschema.validate(json.loads(made["arguments"]), SCHEMAS[made["name"]])


def test_tool_choice_and_parallel_tool_calls(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    url, path, three = sim.url, "/v1/chat/completions", tools("get_weather", "search", "noop")
    none = call(url, path, chat("say hi", tools=three, tool_choice="none"))
    assert not tool_deltas(none) and reply_words(none) > 0 and none.finish_reason in ("stop", "length")
    named = {"type": "function", "function": {"name": "search"}}
    for i in range(8):
        only = assembled(call(url, path, chat(f"find {i}", tools=three, tool_choice=named)))
        assert [c["name"] for c in only] == ["search"]
        single = assembled(call(url, path, chat(f"one {i}", tools=three, parallel_tool_calls=False)))
        assert len(single) == 1  # auto with --auto-tool-share 1: always a call
    counts = set()
    for i in range(16):
        made = assembled(call(url, path, chat(f"many {i}", tools=three, tool_choice="required")))
        names = [c["name"] for c in made]
        assert len(set(names)) == len(names) and len({c["id"] for c in made}) == len(made)
        counts.add(len(made))
    assert counts == {1, 2, 3}  # parallel calls of different functions, up to MAX_PARALLEL_CALLS


def reply_words(reply: Reply) -> int:
    return len(reply.text.split())


def test_auto_answers_in_text_for_the_share_not_drawn(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST, auto_tool_share=0.5)
    made = [
        assembled(call(sim.url, "/v1/chat/completions", chat(f"maybe {i}", tools=tools("search"))))
        for i in range(24)
    ]
    assert 4 <= sum(1 for m in made if m) <= 20  # some called, some answered in text


def test_json_schema_and_json_object_answers_fit(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER, "strict": True}}
    reply = call(sim.url, "/v1/chat/completions", chat("tag this", response_format=fmt), request_id="j1")
    jsonschema.validate(json.loads(reply.text), ANSWER)
    assert reply.finish_reason == "stop"
    truth = truth_of(sim, ["j1"])[0]["j1"]
    assert truth["structured"] == "json" and "".join(truth["tokens"]) == reply.text
    assert usage_of(reply)["completion_tokens"] == truth["completion_tokens"] == len(truth["tokens"])
    obj = call(sim.url, "/v1/chat/completions", chat("an object", response_format={"type": "json_object"}))
    assert isinstance(json.loads(obj.text), dict)
    plain = call(
        sim.url, "/v1/chat/completions", {**chat("an object"), "stream": False, "response_format": fmt}
    )
    jsonschema.validate(json.loads(json.loads(plain.body)["choices"][0]["message"]["content"]), ANSWER)


def test_the_invalid_share_is_the_seeds_and_the_truth_says_which(
    sim_start: Callable[..., SimulatorProcess],
) -> None:
    sim = sim_start(**FAST, invalid_share=0.4)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
    ids, expected, parsed = [], [], []
    for i in range(30):
        body = (
            chat(f"question {i}", response_format=fmt)
            if i % 2
            else chat(f"question {i}", tools=tools("search"))
        )
        reply = call(sim.url, "/v1/chat/completions", body, request_id=f"q{i}")
        text = reply.text if i % 2 else assembled(reply)[0]["arguments"]
        ids.append(f"q{i}")
        expected.append(not is_invalid(DEFAULT_SEED, prompt_hash(chat_prompt(body["messages"])[0]), 0.4))
        parsed.append(fits(text, ANSWER if i % 2 else SEARCH))
    requests = truth_of(sim, ids)[0]
    assert parsed == expected == [requests[i]["valid"] for i in ids]
    assert 5 <= expected.count(False) <= 20


def fits(text: str, schema: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_a_reply_cut_at_max_tokens_is_invalid(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    reply = call(
        sim.url,
        "/v1/chat/completions",
        chat("cut", tools=tools("get_weather"), max_tokens=4),
        request_id="c1",
    )
    assert reply.finish_reason == "length" and usage_of(reply)["completion_tokens"] == 4
    truth = truth_of(sim, ["c1"])[0]["c1"]
    assert truth["valid"] is False and not fits(assembled(reply)[0]["arguments"], WEATHER)


def test_the_responses_api_streams_function_call_items(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**ONE_TOKEN)
    flat = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    body = {
        "model": "sim-model",
        "input": "weather?",
        "tools": flat,
        "tool_choice": "required",
        "stream": True,
    }
    reply = call(sim.url, "/v1/responses", body, request_id="resp1")
    events = [e for _, e in reply.chunks]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["name"] == "get_weather"
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert "".join(deltas) == done["arguments"]
    jsonschema.validate(json.loads(done["arguments"]), WEATHER)
    truth = truth_of(sim, ["resp1"])[0]["resp1"]
    assert truth["tool_calls"][0]["arguments"] == done["arguments"] and truth["valid"] is True
    assert events[-1]["response"]["usage"]["output_tokens"] == truth["completion_tokens"] == len(deltas) + 1
    fmt = {"format": {"type": "json_schema", "name": "a", "schema": ANSWER}}
    text = call(sim.url, "/v1/responses", {**body, "tools": None, "tool_choice": None, "text": fmt})
    answer = "".join(e["delta"] for _, e in text.chunks if e["type"] == "response.output_text.delta")
    jsonschema.validate(json.loads(answer), ANSWER)


def test_a_rejected_key_bad_tools_and_the_session_header(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST, reject_keys="tools,response_format")
    rejected = call(sim.url, "/v1/chat/completions", chat("x", tools=tools("search")))
    error = json.loads(rejected.body)["error"]
    assert rejected.status == 400 and error["param"] == "tools" and "tools" in error["message"]
    plain = call(sim.url, "/v1/chat/completions", chat("x", tool_choice="none"))
    assert plain.status == 200  # only the keys named are rejected
    other = sim_start(**FAST)
    for bad, param in [
        ({"tools": "search"}, "tools"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": tools("search"), "tool_choice": {"function": {"name": "no"}}}, "tool_choice"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
        ({"parallel_tool_calls": "yes", "tools": tools("search")}, "parallel_tool_calls"),
    ]:  # fmt: skip
        reply = call(other.url, "/v1/chat/completions", chat("x", **bad))
        assert reply.status == 400 and json.loads(reply.body)["error"]["param"] == param, bad


def test_the_truth_log_names_the_session(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    call(sim.url, "/v1/chat/completions", chat("hello"), request_id="s1", headers={"X-Session-Id": "sess-7"})
    call(sim.url, "/v1/chat/completions", chat("hello"), request_id="s2")
    requests = truth_of(sim, ["s1", "s2"])[0]
    assert requests["s1"]["session"] == "sess-7" and requests["s2"]["session"] is None
    assert requests["s1"]["structured"] is None and requests["s1"]["tokens"] is None


def test_a_constrained_step_costs_constrained_ms_per_sequence(
    sim_start: Callable[..., SimulatorProcess],
) -> None:
    """The truth log's step boundaries (the model's, not a clock's): a step of a constrained
    sequence (response_format, tool_choice required or named) lasts constrained_ms more; tool
    choice auto is parsed after the fact, not constrained."""
    sim = sim_start(base_ms=4, per_seq_ms=1, constrained_ms=3, accept_len=1, max_draft=0)
    fmt = {"type": "json_object"}
    for body, constrained in [
        (chat("a json", response_format=fmt), 1),
        (chat("a call", tools=tools("search"), tool_choice="required"), 1),
        (chat("maybe a call", tools=tools("search")), 0),
        (chat("plain text", max_tokens=12), 0),
    ]:
        start = time.time()
        call(sim.url, "/v1/chat/completions", body, request_id=f"c{start}")
        steps = [s for s in truth_of(sim, [f"c{start}"])[1] if s["t_start"] >= start]
        assert steps and all(s.get("constrained", 0) == constrained for s in steps), body
        assert all(
            s["t_end"] - s["t_start"] == pytest.approx(0.005 + 0.003 * constrained, abs=1e-6) for s in steps
        )
