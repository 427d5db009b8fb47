"""The SSE parser on the stream shapes OpenAI-compatible servers send.

Each stream below is a minimal one in a server's documented shape; the real llama.cpp server's
own streams are checked live in tests/real/test_llama_server.py, the simulator's (both usage
styles) in tests/e2e/test_sim.py.
"""

import json

import pytest

from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent
from llmload.loadgen.stream.sse import StreamAccumulator


def sse(*events: dict | str) -> list[bytes]:
    """The lines of an SSE stream: one `data:` line and one blank line per event."""
    lines = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        lines += [f"data: {data}\n".encode(), b"\n"]
    return lines


def text_chunk(text: str, finish: str | None = None, **extra: object) -> dict:
    return {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        **extra,
    }


def feed(lines: list[bytes], chat: bool = False) -> StreamAccumulator:
    acc = StreamAccumulator(chat=chat)
    for i, line in enumerate(lines):
        if acc.feed(line, float(i)):
            break
    return acc


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}

# vLLM: finish_reason on the last token chunk; usage (with include_usage) in its own chunk with
# an empty `choices` list
VLLM = sse(
    text_chunk(" Paris"),
    text_chunk("."),
    text_chunk("\n", "length"),
    {"choices": [], "usage": USAGE},
    "[DONE]",
)
# llama.cpp llama-server: a closing chunk with empty text, finish_reason, usage and timings, whose
# `choices` is NOT empty; sent with or without stream_options
LLAMA_SERVER = sse(
    text_chunk(" Paris"),
    text_chunk("."),
    text_chunk("\n"),
    text_chunk("", "length", usage=USAGE, timings={"predicted_n": 3}),
    "[DONE]",
)
# a server that sends no usage at all
NO_USAGE = sse(text_chunk(" Paris"), text_chunk("."), text_chunk("", "length"), "[DONE]")


def test_vllm_usage_in_separate_chunk():
    acc = feed(VLLM)
    assert acc.done
    assert acc.completion_tokens == 3
    assert acc.prompt_tokens == 5
    assert len(acc.chunk_times) == 3  # three token chunks; the usage chunk has no choices
    assert acc.finish_reason == "length"


def test_llamacpp_usage_on_last_choice_chunk_is_read():
    acc = feed(LLAMA_SERVER)
    assert acc.done
    assert acc.completion_tokens == 3
    # the closing chunk (text "" + finish_reason + usage) is not a token chunk
    assert len(acc.chunk_times) == 3
    assert acc.finish_reason == "length"


def test_no_usage_stream_counts_chunks():
    acc = feed(NO_USAGE)
    assert acc.completion_tokens is None
    assert len(acc.chunk_times) > 0


def test_first_choice_vs_first_content_and_role_chunk_in_chat():
    acc = StreamAccumulator(chat=True)
    acc.feed(b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n', 0.1)
    acc.feed(b'data: {"choices":[{"index":0,"delta":{"content":" a b"},"finish_reason":null}]}\n', 0.3)
    acc.feed(b'data: {"choices":[{"index":0,"delta":{"content":" c"},"finish_reason":"length"}]}\n', 0.4)
    acc.feed(b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}\n', 0.41)
    assert acc.feed(b"data: [DONE]\n", 0.42)
    assert acc.t_first == 0.1  # vLLM's TTFT point: the role-only chunk
    assert acc.t_first_content == 0.3
    assert acc.chunk_times == [0.3, 0.4]  # role chunk carries no token
    assert acc.t_last == 0.4
    assert acc.completion_tokens == 3


def test_continuous_usage_gives_tokens_per_chunk():
    acc = StreamAccumulator()
    acc.feed(b'data: {"choices":[{"text":" a b c"}],"usage":{"completion_tokens":3}}\n', 0.1)
    acc.feed(b'data: {"choices":[{"text":" d"}],"usage":{"completion_tokens":4}}\n', 0.2)
    last = b'data: {"choices":[{"text":" e f","finish_reason":"length"}],"usage":{"completion_tokens":6}}\n'
    acc.feed(last, 0.3)
    assert acc.tokens_per_chunk() == [3, 1, 2]


def test_empty_text_token_chunk_counts_as_token():
    acc = StreamAccumulator()
    acc.feed(b'data: {"choices":[{"text":"","finish_reason":null}]}\n', 0.1)
    acc.feed(b'data: {"choices":[{"text":"x","finish_reason":"length"}]}\n', 0.2)
    assert len(acc.chunk_times) == 2
    assert acc.t_first_content == 0.2


def test_malformed_and_error_events():
    with pytest.raises(MalformedStream):
        StreamAccumulator().feed(b'data: {"choices": [\n', 0.0)
    with pytest.raises(StreamErrorEvent):
        StreamAccumulator().feed(b'data: {"error": {"message": "overloaded"}}\n', 0.0)
    with pytest.raises(StreamErrorEvent, match="^an empty error object$"):  # never an empty message
        StreamAccumulator().feed(b'data: {"choices": [], "error": ""}\n', 0.0)


def test_non_data_lines_are_ignored():
    acc = StreamAccumulator()
    for line in (b"\n", b": keep-alive\n", b"event: message\n", b"id: 3\n"):
        assert not acc.feed(line, 0.0)
    assert acc.chunk_times == []


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices": [{"text": "a", "finish_reason": null}], "x": NaN}\n',  # orjson refuses NaN
        b'data: {"choices": [{"text": "a", "finish_reason": null}], "x": 123456789012345678901234567890}\n',
        b'data: {"choices": [{"text": "\\ud800", "finish_reason": null}]}\n',  # a lone surrogate
        b'data:{"choices": [{"text": "a", "finish_reason": null}]}\n',
        b'data:   {"choices": [{"text": "a", "finish_reason": null}]}  \r\n',
        b'data: {"choices": [{"text": "a", "finish_reason": null}]}\x0c\n',  # whitespace to strip, not JSON's
    ],
)
def test_json_that_the_fast_decoder_refuses_is_read_as_json_reads_it(line):
    acc = StreamAccumulator()
    assert not acc.feed(line, 0.1) and acc.chunk_times == [0.1]


@pytest.mark.parametrize("line", [b"data: [DONE]\n", b"data:[DONE]\r\n", b"data:  [DONE] \n"])
def test_done_with_any_whitespace(line):
    acc = StreamAccumulator()
    assert acc.feed(line, 0.0) and acc.done


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"data: [1, 2]\n", "data line is not a JSON object: b'[1, 2]'"),
        (b"data:  {oops \r\n", "data line is not JSON: b'{oops'"),
        (b'data: {"choices": 3}\n', "choices is not a list of objects: b'{\"choices\": 3}'"),
        (b'data: {"usage": [1]}\n', "usage is not an object: b'{\"usage\": [1]}'"),
    ],
)
def test_malformed_lines_are_named_without_their_whitespace(line, message):
    with pytest.raises(MalformedStream) as err:
        StreamAccumulator().feed_lines([bytearray(line.rstrip(b"\n"))], 0.0)
    assert str(err.value) == message


# vLLM when the last token's bytes end inside a character (an emoji): that token's chunk has
# empty text and the finish_reason; usage (3 tokens) proves it a token
VLLM_EMPTY_LAST = sse(
    text_chunk(" Paris"),
    text_chunk("."),
    text_chunk("", "length"),
    {"choices": [], "usage": USAGE},
    "[DONE]",
)


def test_vllm_empty_text_last_chunk_is_a_token_by_the_final_usage():
    acc = feed(VLLM_EMPTY_LAST)
    assert acc.completion_tokens == 3
    assert acc.chunk_times == [0.0, 2.0, 4.0], "every token chunk, the empty last one too"
    assert acc.t_last == 4.0


CLOSING = b'data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"completion_tokens":%s}}\n'


def test_vllm_empty_text_last_chunk_with_per_chunk_usage_carries_its_tokens():
    acc = StreamAccumulator()
    acc.feed(b'data: {"choices":[{"text":" a"}],"usage":{"completion_tokens":1}}\n', 0.1)
    acc.feed(b'data: {"choices":[{"text":" b c"}],"usage":{"completion_tokens":3}}\n', 0.2)
    acc.feed(CLOSING % b"4", 0.3)
    assert acc.chunk_times == [0.1, 0.2, 0.3]
    assert acc.tokens_per_chunk() == [1, 2, 1]


def test_a_closing_chunk_that_adds_no_token_stays_out():
    # llama.cpp: usage on the closing chunk equals the token chunks already seen
    assert len(feed(LLAMA_SERVER).chunk_times) == 3
    # per-chunk usage that did not grow on the closing chunk
    acc = StreamAccumulator()
    acc.feed(b'data: {"choices":[{"text":" a"}],"usage":{"completion_tokens":1}}\n', 0.1)
    acc.feed(CLOSING % b"1", 0.2)
    assert acc.chunk_times == [0.1] and acc.tokens_per_chunk() == [1]
    # no usage at all: nothing proves it, so it is not counted
    assert len(feed(NO_USAGE).chunk_times) == 2


def test_the_kept_texts_follow_the_counted_chunks():
    acc = StreamAccumulator(keep_text=True)
    for i, line in enumerate(VLLM_EMPTY_LAST):
        acc.feed(line, float(i))
    assert acc.texts == [" Paris", ".", ""]
