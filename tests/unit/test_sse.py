"""The SSE parser against responses captured from real servers (shared/reference/shapes)."""

import pytest
from fixtures.paths import REPO

from llmload.loadgen.sse import MalformedStream, StreamAccumulator, StreamErrorEvent

# copies of shared/reference/shapes: responses captured from real servers on loopback
SHAPES = REPO / "tests" / "fixtures" / "shapes"


def feed_file(name: str, chat: bool = False) -> StreamAccumulator:
    acc = StreamAccumulator(chat=chat)
    for i, line in enumerate((SHAPES / name).read_bytes().splitlines(keepends=True)):
        if acc.feed(line, float(i)):
            break
    return acc


def test_vllm_usage_in_separate_chunk():
    acc = feed_file("vllm_completion_stream_include_usage.sse")
    assert acc.done
    assert acc.completion_tokens == 3
    assert acc.prompt_tokens == 5
    assert len(acc.chunk_times) == 3  # three token chunks; the usage chunk has no choices
    assert acc.finish_reason == "length"


def test_llamacpp_usage_on_last_choice_chunk_is_read():
    acc = feed_file("llama-server_completion_stream_include_usage.sse")
    assert acc.done
    assert acc.completion_tokens == 5
    # the closing chunk (text "" + finish_reason + usage) is not a token chunk
    assert len(acc.chunk_times) == 5
    assert acc.finish_reason == "length"


def test_llamacpp_usage_without_include_usage_is_read():
    acc = feed_file("llama-server_completion_stream.sse")
    assert acc.completion_tokens is not None
    assert acc.completion_tokens == len(acc.chunk_times)


def test_no_usage_stream_counts_chunks():
    acc = feed_file("llama-cpp-python_completion_stream_include_usage.sse")
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


def test_non_data_lines_are_ignored():
    acc = StreamAccumulator()
    for line in (b"\n", b": keep-alive\n", b"event: message\n", b"id: 3\n"):
        assert not acc.feed(line, 0.0)
    assert acc.chunk_times == []
