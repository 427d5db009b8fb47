"""Tool-call streams parsed (llmload.loadgen.stream.tool_calls), on hand-written streams of the
shapes servers send: vLLM's (a delta naming the function, then one argument piece a delta), several
tokens a chunk with per-chunk usage, a name split across deltas, usage on the last tool-call chunk
(llama.cpp), parallel calls, arguments that are not JSON, the Responses API's function-call events;
each read line by line and through the fast path (`feed_lines`), with the same result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmload.analysis.identity.text_identity import compare_pairs
from llmload.core.files.records import RequestRecord
from llmload.loadgen.stream.decode import MalformedStream
from llmload.loadgen.stream.responses import ResponsesAccumulator
from llmload.loadgen.stream.sse import StreamAccumulator

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}


def call(index: int, name: str | None = None, args: str | None = None, **extra: Any) -> dict[str, Any]:
    function = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    return {"index": index, "function": function, **extra}


def delta(*calls: dict[str, Any], finish: str | None = None, usage: int | None = None, content: Any = None):
    msg: dict[str, Any] = {
        "choices": [
            {"index": 0, "delta": {"content": content, "tool_calls": list(calls)}, "finish_reason": finish}
        ]
    }
    if usage is not None:
        msg["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return msg


def lines(*messages: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(m, separators=(",", ":")).encode() for m in messages] + [b"data: [DONE]"]


def parse(messages: list[bytes], fast: bool) -> StreamAccumulator:
    """One message a time step (t = its position), line by line or a read a line."""
    acc = StreamAccumulator(chat=True, keep_text=True)
    for t, line in enumerate(messages):
        if acc.feed_lines([line], float(t)) if fast else acc.feed(line, float(t)):
            break
    return acc


VLLM = lines(
    ROLE,
    delta(call(0, "get_weather", id="call-1", type="function")),
    *(delta(call(0, args=piece)) for piece in ['{"city": "', "Par", "is", '"}']),
    delta(finish="tool_calls"),
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
)


@pytest.mark.parametrize("fast", [False, True])
def test_vllm_tool_call_each_delta_a_chunk(fast):
    acc = parse(VLLM, fast)
    assert acc.done and acc.chunk_times == [1.0, 2.0, 3.0, 4.0, 5.0] and acc.completion_tokens == 5
    assert acc.t_first == 0.0 and acc.t_first_tool_call == 1.0 and acc.t_first_content is None
    assert acc.finish_reason == "tool_calls" and acc.tools is not None
    assert (acc.tools.count, acc.tools.invalid()) == (1, 0)
    assert acc.tools.text() == 'get_weather({"city": "Paris"})'
    assert acc.answer_and_reasoning() == ("", "")  # a call's text is neither the answer nor thinking


@pytest.mark.parametrize("fast", [False, True])
def test_several_tokens_a_chunk_with_per_chunk_usage(fast):
    acc = parse(
        lines(
            delta(call(0, "search"), usage=2),
            delta(call(0, args='{"q": "a b'), usage=6),
            delta(call(0, args=' c"}'), finish="tool_calls", usage=9),
        ),
        fast,
    )
    assert acc.tokens_per_chunk() == [2, 4, 3] and acc.tools is not None and acc.tools.invalid() == 0


CLOSING = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}  # vLLM's: no content key


@pytest.mark.parametrize("fast", [False, True])
def test_a_closing_delta_that_carries_tokens_is_a_chunk(fast):
    """vLLM's tool parser holds back the call's last tokens (the closing tag) and ends the stream
    with an empty `delta: {}` and the finish_reason; with per-chunk usage that message's tokens
    show: it is the reply's last token chunk, so every token is in a chunk and the last step is
    timed (before, the 12 tokens of a real vLLM's closing delta were in no chunk: 34 of 46)."""
    acc = parse(
        lines(
            ROLE,
            delta(call(0, "get_weather"), usage=22),
            delta(call(0, args='{"city": "Paris"}'), usage=32),
            {**CLOSING, "usage": {"prompt_tokens": 3, "completion_tokens": 44}},
        ),
        fast,
    )
    assert acc.tokens_per_chunk() == [22, 10, 12] and acc.chunk_times == [1.0, 2.0, 3.0]
    assert acc.finish_reason == "tool_calls" and acc.output_tokens(64) == (44, False)


@pytest.mark.parametrize(("final", "chunks"), [(3, [0.0, 1.0, 2.0]), (2, [0.0, 1.0])])
def test_a_closing_delta_without_per_chunk_usage_is_a_token_only_when_the_count_says_so(final, chunks):
    """Usage only at the end: the closing `delta: {}` is a token when the count is one above the
    chunks seen (as a text stream's empty closing chunk), else not."""
    acc = parse(
        lines(
            delta(call(0, "f")),
            delta(call(0, args="{}")),
            CLOSING,
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": final}},
        ),
        fast=False,
    )
    assert acc.chunk_times == chunks and acc.completion_tokens == final


@pytest.mark.parametrize("fast", [False, True])
def test_a_name_split_across_deltas_is_one_name(fast):
    acc = parse(lines(delta(call(0, "get_")), delta(call(0, "weather")), delta(call(0, args="{}"))), fast)
    assert acc.tools is not None and acc.tools.text() == "get_weather({})" and len(acc.chunk_times) == 3


def test_usage_on_the_last_tool_call_chunk_as_llama_cpp_sends_it():
    acc = parse(
        lines(ROLE, delta(call(0, "f", args="")), delta(call(0, args="{}"), finish="tool_calls", usage=2)),
        fast=False,
    )
    assert acc.chunk_times == [1.0, 2.0] and acc.completion_tokens == 2 and acc.finish_reason == "tool_calls"
    assert acc.output_tokens(16) == (2, False)


def test_parallel_calls_and_invalid_arguments_counted_not_failed():
    acc = parse(
        lines(
            delta(call(0, "a", args='{"x": 1}')),
            delta(call(1, "b", args='{"y": ')),  # cut: not JSON
            delta(call(2, "c", args="[1]")),  # JSON, not an object
            delta(call(3, "d"), content="and text"),
        ),
        fast=False,
    )
    assert acc.tools is not None and acc.tools.count == 4 and acc.tools.invalid() == 3
    assert acc.answer_and_reasoning() == ("and text", "") and acc.t_first_content == 3.0


@pytest.mark.parametrize(
    "bad",
    [
        {"tool_calls": "x"},
        {"tool_calls": [1]},
        {"tool_calls": [{"index": "0"}]},
        {"tool_calls": [call(0, 5)]},
    ],
)
def test_a_malformed_tool_call_fails_the_stream(bad):
    with pytest.raises(MalformedStream):
        parse(lines({"choices": [{"index": 0, "delta": bad, "finish_reason": None}]}), fast=False)


def responses_events(name: str, pieces: list[str]) -> list[bytes]:
    item = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": name, "arguments": ""}
    events = [
        {"type": "response.created", "response": {}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        *({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": p} for p in pieces),
        {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
        {"type": "response.completed", "response": {"status": "completed", "usage": {"output_tokens": 3}}},
    ]
    return [b"data: " + json.dumps(e).encode() for e in events]


def test_responses_function_call_name_and_arguments_are_chunks_and_hashed():
    acc = ResponsesAccumulator(keep_text=True)
    for t, line in enumerate(responses_events("get_weather", ['{"c":', '"P"}'])):
        acc.feed(line, float(t))
    assert acc.chunk_times == [1.0, 2.0, 3.0] and acc.t_first_tool_call == 1.0 and acc.t_first_content is None
    assert acc.tools is not None and acc.tools.text() == 'get_weather({"c":"P"})' and acc.odd == []
    other = ResponsesAccumulator(keep_text=True)
    for t, line in enumerate(responses_events("get_time", ['{"c":', '"P"}'])):
        other.feed(line, float(t))
    assert other.tools is not None and other.tools.text() != acc.tools.text()  # the name is hashed


def record(text: str, tool: str | None) -> RequestRecord:
    return RequestRecord("r", 0, 1, "measure", "chat", True, 8, 0.0, 1.0, text_hash=text, tool_hash=tool)


def test_a_change_in_the_tool_calls_alone_is_a_change_in_the_tool_calls():
    texts = compare_pairs([(record("e", "t1"), record("e", "t2")), (record("e", "t1"), record("e", "t1"))])
    assert (texts.differing, texts.tool_calls_changed, texts.reasoning_only) == (1, 1, 0)
