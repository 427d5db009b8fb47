"""A reasoning model's stream, in each shape servers send it: every chunk of reasoning or answer is
a token chunk, TTFT is the first of either kind, the first answer token has its own time, and the
reasoning tokens are the server's count or the client's.

Shapes (each stream below is a minimal one in the server's documented shape):
- `delta.reasoning_content` (SGLang, llama.cpp `--reasoning-format deepseek`; SGLang counts
  reasoning in a top-level `usage.reasoning_tokens`);
- `delta.reasoning` (vLLM since its rename; `completion_tokens_details.reasoning_tokens` with a
  reasoning parser);
- both names in one delta, one text (a server that kept the old name beside the new);
- `<think>` tags in a completion's text (no reasoning parser);
- the Responses API's events (vLLM's order, `event:` and `data:` lines, no `[DONE]`).
"""

from __future__ import annotations

import json
from unittest import mock

import pytest

from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent
from llmload.loadgen.stream.responses import ResponsesAccumulator, accumulator_for
from llmload.loadgen.stream.sse import StreamAccumulator

N, M = 5, 3  # reasoning tokens, then answer tokens, one a chunk
THOUGHTS = [f" t{i}" for i in range(N)]
ANSWERS = [f" a{i}" for i in range(M)]


def line(data: dict | str) -> bytes:
    return b"data: " + (data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))).encode()


def chat_chunk(delta: dict, finish: str | None = None, **extra: object) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def chat_stream(field: str, usage: dict | None = None) -> list[bytes]:
    """role chunk, N reasoning chunks in `field` ("both": the two names), M answer chunks (the
    last with finish_reason "length"), the usage chunk, [DONE]."""
    lines = [line(chat_chunk({"role": "assistant", "content": ""}))]
    for text in THOUGHTS:
        delta = {"reasoning_content": text, "reasoning": text} if field == "both" else {field: text}
        lines.append(line(chat_chunk(delta)))
    for i, text in enumerate(ANSWERS):
        lines.append(line(chat_chunk({"content": text}, "length" if i == M - 1 else None)))
    total = {"prompt_tokens": 7, "completion_tokens": N + M, "total_tokens": 7 + N + M, **(usage or {})}
    return [*lines, line({"id": "chatcmpl-1", "choices": [], "usage": total}), line("[DONE]")]


def text_chunk(text: str, finish: str | None = None, **extra: object) -> dict:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        **extra,
    }


def tagged_stream() -> list[bytes]:
    """A completion whose first N tokens think between <think> tags (the tags on the first and
    last reasoning token, as the simulator sends them)."""
    texts = ["<think>" + THOUGHTS[0], *THOUGHTS[1:-1], THOUGHTS[-1] + "</think>", *ANSWERS]
    lines = [line(text_chunk(t, "length" if i == len(texts) - 1 else None)) for i, t in enumerate(texts)]
    usage = {"prompt_tokens": 7, "completion_tokens": N + M, "total_tokens": 7 + N + M}
    return [*lines, line({"id": "cmpl-1", "choices": [], "usage": usage}), line("[DONE]")]


def responses_event(kind: str, seq: int, **fields: object) -> list[bytes]:
    return [f"event: {kind}".encode(), line({"type": kind, "sequence_number": seq, **fields}), b""]


def responses_stream(reasoning_tokens: int | None = N, status: str = "incomplete") -> list[bytes]:
    """vLLM's event order for a reply of N reasoning then M answer tokens, one a delta."""
    seq = iter(range(1000))
    resp = {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None}
    out = responses_event("response.created", next(seq), response=resp)
    out += responses_event("response.in_progress", next(seq), response=resp)
    item = {"type": "reasoning", "id": "r1", "summary": []}
    out += responses_event("response.output_item.added", next(seq), output_index=0, item=item)
    out += responses_event("response.content_part.added", next(seq), item_id="r1", output_index=0,
                           content_index=0, part={"type": "reasoning_text", "text": ""})  # fmt: skip
    for text in THOUGHTS:
        out += responses_event("response.reasoning_text.delta", next(seq), content_index=0, delta=text,
                               item_id="r1", output_index=0)  # fmt: skip
    out += responses_event("response.reasoning_text.done", next(seq), item_id="r1", text="".join(THOUGHTS))
    out += responses_event("response.output_item.done", next(seq), output_index=0, item=item)
    out += responses_event("response.output_item.added", next(seq), output_index=1, item={"type": "message"})
    for text in ANSWERS:
        out += responses_event("response.output_text.delta", next(seq), content_index=0, delta=text,
                               item_id="m1", logprobs=[], output_index=1)  # fmt: skip
    out += responses_event("response.output_text.done", next(seq), item_id="m1", text="".join(ANSWERS))
    usage: dict = {"input_tokens": 7, "output_tokens": N + M, "total_tokens": 7 + N + M,
                   "input_tokens_details": {"cached_tokens": 2}}  # fmt: skip
    if reasoning_tokens is not None:
        usage["output_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    done = {**resp, "status": status, "usage": usage}
    return out + responses_event("response.completed", next(seq), response=done)


def by_line(acc: StreamAccumulator, lines: list[bytes]) -> StreamAccumulator:
    """Every line on its own, at time i (its index among the data lines)."""
    t = 0
    for raw in lines:
        if acc.feed(raw, float(t)):
            break
        t += raw.startswith(b"data:")
    return acc


def by_read(acc: StreamAccumulator, lines: list[bytes]) -> StreamAccumulator:
    """The same lines one message a read (`feed_lines`, the fast paths), at the same times."""
    t = 0
    for raw in lines:
        if acc.feed_lines([bytearray(raw), bytearray()], float(t)):
            break
        t += raw.startswith(b"data:")
    return acc


STREAMS = {
    "reasoning_content": (True, chat_stream("reasoning_content", {"reasoning_tokens": N})),
    "reasoning": (True, chat_stream("reasoning", {"completion_tokens_details": {"reasoning_tokens": N}})),
    "both-names": (True, chat_stream("both")),
    "think-tags": (False, tagged_stream()),
}


def figures(acc: StreamAccumulator) -> dict:
    return {
        "chunks": len(acc.chunk_times),
        "times": list(acc.chunk_times),
        "t_first": acc.t_first,
        "t_first_content": acc.t_first_content,
        "t_first_reasoning": acc.t_first_reasoning,
        "t_last": acc.t_last,
        "reasoning": acc.reasoning_tokens(),
        "texts": acc.answer_and_reasoning(),
        "chunk_texts": acc.texts,
        "odd": list(acc.odd),
        "finish": acc.finish_reason,
    }


@pytest.mark.parametrize("name", [*STREAMS, "responses"])
@pytest.mark.parametrize("feed", [by_line, by_read], ids=["feed", "feed_lines"])
def test_reasoning_then_answer(name, feed):
    """N+M token chunks, TTFT on the first reasoning token, the first answer on token N+1, N
    reasoning tokens (the server's count, or counted), the texts apart."""
    if name == "responses":
        acc = feed(ResponsesAccumulator(keep_text=True), responses_stream())
        first = 4.0  # four events before the first delta
    else:
        chat, lines = STREAMS[name]
        acc = feed(StreamAccumulator(chat=chat, keep_text=True), lines)
        first = 1.0 if chat else 0.0  # chat: the role chunk is data line 0
    assert acc.done
    assert len(acc.chunk_times) == N + M
    assert acc.chunk_times[0] == acc.t_first_reasoning == first
    assert acc.t_first_content == acc.chunk_times[N] == first + N + (name == "responses") * 3
    assert acc.t_first == (0.0 if STREAMS.get(name, (False,))[0] else first)  # chat: the role chunk
    counted = name in ("both-names", "think-tags")
    assert acc.reasoning_tokens() == (N, counted)
    answer, reasoning = acc.answer_and_reasoning()
    assert answer == "".join(ANSWERS) and acc.text == answer
    assert reasoning.replace("<think>", "").replace("</think>", "") == "".join(THOUGHTS)
    assert acc.finish_reason == "length" and acc.odd == []


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_fast_paths_agree_with_the_full_parse(name):
    chat, lines = STREAMS[name]
    for keep_text in (False, True):
        full = by_line(StreamAccumulator(chat=chat, keep_text=keep_text), lines)
        fast = by_read(StreamAccumulator(chat=chat, keep_text=keep_text), lines)
        assert figures(fast) == figures(full)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_chunks_take_their_fast_path(field):
    """The first reasoning chunk is the reasoning template, the first answer chunk the answer's:
    every later chunk of either kind is counted without a JSON decode."""
    lines = chat_stream(field)
    role, first_thought = lines[0], lines[1]
    acc = StreamAccumulator(chat=True, keep_text=True)
    acc.feed_lines([bytearray(role), bytearray(first_thought)], 0.0)
    with mock.patch.object(StreamAccumulator, "_feed_data", side_effect=AssertionError("parsed in full")):
        for raw in lines[2 : 1 + N]:
            acc.feed_lines([bytearray(raw), bytearray()], 1.0)
    acc.feed_lines([bytearray(lines[1 + N]), bytearray()], 2.0)  # the first answer chunk: learned
    with mock.patch.object(StreamAccumulator, "_feed_data", side_effect=AssertionError("parsed in full")):
        acc.feed_lines([bytearray(lines[2 + N]), bytearray()], 3.0)
    assert acc.reasoning_chunks == N and len(acc.chunk_times) == N + 2
    assert acc.answer_and_reasoning() == ("".join(ANSWERS[:2]), "".join(THOUGHTS))


def test_tagged_reasoning_takes_the_fast_path_until_the_closing_tag():
    lines = tagged_stream()
    acc = StreamAccumulator(keep_text=True)
    acc.feed_lines([bytearray(lines[0]), bytearray()], 0.0)
    with mock.patch.object(StreamAccumulator, "_feed_data", side_effect=AssertionError("parsed in full")):
        for i, raw in enumerate(lines[1 : N - 1], start=1):
            acc.feed_lines([bytearray(raw), bytearray()], float(i))
    by_read(acc, lines[N - 1 :])  # the </think> chunk is parsed in full, then the answer's template
    assert acc.reasoning_chunks == N and len(acc.chunk_times) == N + M
    assert acc.t_first_content == 1.0  # by_read restarts its clock: the </think> chunk at 0, then the answer
    assert acc.answer_and_reasoning()[0] == "".join(ANSWERS)


def test_a_chunk_of_both_kinds_is_one_chunk_and_the_first_answer():
    """vLLM's delta at the end of the thinking may carry the last reasoning and the first answer
    text together: one token chunk, the answer's first."""
    lines = [
        line(chat_chunk({"reasoning": " t0"})),
        line(chat_chunk({"reasoning": " t1", "content": " a0"})),
        line(chat_chunk({"content": " a1"}, "length")),
        line("[DONE]"),
    ]
    acc = by_line(StreamAccumulator(chat=True, keep_text=True), lines)
    assert len(acc.chunk_times) == 3 and acc.t_first_content == 1.0
    assert acc.reasoning_tokens() == (2, True)  # one reasoning chunk, one of both kinds
    assert acc.answer_and_reasoning() == (" a0 a1", " t0 t1")


def test_reasoning_tokens_from_per_chunk_usage():
    """With usage on every chunk (continuous_usage_stats) the reasoning chunks' own tokens count."""
    lines = []
    for i, (delta, tokens) in enumerate(
        [({"reasoning": " t0 t1"}, 2), ({"reasoning": " t2"}, 3), ({"content": " a"}, 4)]
    ):
        usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": 1 + tokens}
        lines.append(line(chat_chunk(delta, "length" if i == 2 else None, usage=usage)))
    acc = by_line(StreamAccumulator(chat=True), [*lines, line("[DONE]")])
    assert acc.tokens_per_chunk() == [2, 1, 1]
    assert acc.reasoning_tokens() == (3, True)


def test_a_stream_without_reasoning_says_none():
    lines = [line(text_chunk(" a")), line(text_chunk(" b", "length")), line("[DONE]")]
    acc = by_read(StreamAccumulator(keep_text=True), lines)
    assert acc.reasoning_tokens() == (None, False) and acc.t_first_reasoning is None
    assert acc.answer_and_reasoning() == (" a b", "")
    assert acc.t_first_content == 0.0


def test_all_reasoning_never_answered():
    """Cut by max_tokens while thinking: no answer time, all tokens reasoning."""
    lines = [
        line(chat_chunk({"reasoning_content": t}, "length" if i == N - 1 else None))
        for i, t in enumerate(THOUGHTS)
    ]
    acc = by_read(StreamAccumulator(chat=True), [*lines, line("[DONE]")])
    assert acc.t_first_content is None and len(acc.chunk_times) == N
    assert acc.reasoning_tokens() == (N, True)


# --- bad reasoning streams: counted and named, never a traceback ---------------------------------
def test_reasoning_after_the_answer_is_named():
    lines = [
        line(chat_chunk({"reasoning": " t0"})),
        line(chat_chunk({"content": " a0"})),
        line(chat_chunk({"reasoning": " t1"})),
        line(chat_chunk({"content": " a1"}, "length")),
        line("[DONE]"),
    ]
    for feed in (by_line, by_read):
        acc = feed(StreamAccumulator(chat=True, keep_text=True), lines)
        assert acc.odd == ["reasoning_after_answer"] and len(acc.chunk_times) == 4
        assert acc.answer_and_reasoning() == (" a0 a1", " t0 t1")


def test_a_reasoning_count_that_is_not_a_count_is_named_and_counted():
    lines = chat_stream("reasoning", {"completion_tokens_details": {"reasoning_tokens": "many"}})
    acc = by_line(StreamAccumulator(chat=True), lines)
    assert acc.reasoning_tokens() == (N, True) and acc.odd == ["reasoning_tokens_not_a_count"]


def test_a_reasoning_field_that_is_not_text_is_malformed():
    with pytest.raises(MalformedStream, match="delta.reasoning is not a string"):
        by_line(StreamAccumulator(chat=True), [line(chat_chunk({"reasoning": {"x": 1}}))])


def test_responses_error_event_fails_the_stream_with_its_message():
    lines = responses_stream()[:12] + responses_event("error", 99, code="server_error", message="engine died")
    with pytest.raises(StreamErrorEvent, match="error: server_error: engine died"):
        by_line(ResponsesAccumulator(), lines)
    failed = responses_event("response.failed", 5, response={"error": {"code": "x", "message": "bad"}})
    with pytest.raises(StreamErrorEvent, match="response.failed: x: bad"):
        by_line(ResponsesAccumulator(), failed)


def test_responses_unknown_event_is_named_not_fatal():
    lines = responses_stream()
    lines[12:12] = responses_event("response.audio.delta", 50, delta="AAAA")
    acc = by_line(ResponsesAccumulator(), lines)
    assert acc.done and len(acc.chunk_times) == N + M
    assert acc.odd == ["unknown_event:response.audio.delta"]


def test_responses_usage_and_status():
    acc = by_line(ResponsesAccumulator(), responses_stream(reasoning_tokens=None, status="completed"))
    assert acc.finish_reason == "stop"
    assert acc.completion_tokens == N + M and acc.prompt_tokens == 7 and acc.cached_tokens == 2
    assert acc.reasoning_tokens() == (N, True)  # no count from the server: counted
    acc = by_line(ResponsesAccumulator(), responses_stream())
    assert acc.finish_reason == "length" and acc.reasoning_tokens() == (N, False)


@pytest.mark.parametrize(
    "data, message",
    [
        ('{"sequence_number": 1}', "event without a type"),
        ('{"type": "response.output_text.delta", "delta": 5}', "delta is not a string"),
        ('{"type": "response.completed", "response": 3}', "without a response object"),
        ('{"type": "response.completed", "response": {"usage": {"output_tokens": -1}}}', "not a count"),
        ('{"type": "response.completed", "response": {"usage": []}}', "usage is not an object"),
    ],
)
def test_responses_malformed_events(data, message):
    with pytest.raises(MalformedStream, match=message):
        by_line(ResponsesAccumulator(), [line(data)])


def test_the_endpoint_picks_its_accumulator():
    assert isinstance(accumulator_for("responses"), ResponsesAccumulator)
    assert accumulator_for("chat").chat and not accumulator_for("completions").chat


def test_the_default_table_of_a_reasoning_run_fits_100_columns():
    """A reasoning run's table: its two columns and every mark, within 100 columns."""
    from llmload.analysis.run.sweep_rows import SweepRow
    from llmload.output.table import render

    reasoning = {"tokens": 123456, "share": 0.667, "requests": 99, "counted": 0, "unanswered": 0,
                 "ttfo_p50_ms": 123456.7, "think_p50_ms": 1.0, "odd": {}}  # fmt: skip
    row = SweepRow(0, 10000, 123456.7, 1234.5, 1234567, 1234.56, 12345.6, 100, 12, reasoning=reasoning,
                   partial=True, estimated=True, saturated=True)  # fmt: skip
    table = render([row]).split("\n\n")[0].splitlines()
    assert "think_%" in table[0] and "ttfo_p50_ms" in table[0]
    assert max(len(line) for line in table[:2]) <= 100
