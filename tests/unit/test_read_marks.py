"""Several messages taken by one read (llmload.loadgen.sse.StreamAccumulator.feed_read): only the
read's last message is timed by its stamp; the chunks before it, and t_first among them, are
marked with how late that stamp may be for them."""

from __future__ import annotations

from llmload.loadgen.sse import EXACT_SLACK_S, StreamAccumulator
from llmload.loadgen.stage_protocol import start_spread


def chunk(text: str, finish: str | None = None) -> bytes:
    reason = "null" if finish is None else f'"{finish}"'
    return b'data: {"choices":[{"index":0,"text":"%s","finish_reason":%s}]}' % (
        text.encode(),
        reason.encode(),
    )


DONE = b"data: [DONE]"


def test_one_message_per_read_is_never_marked() -> None:
    acc = StreamAccumulator()
    for i, t in enumerate((0.1, 0.2, 0.3)):
        acc.feed_read([chunk(f"w{i}"), b""], t, 0.05, True)
    assert acc.uncertain == {} and acc.ttft_uncertain is None


def test_a_read_of_three_chunks_marks_the_first_two_and_ttft() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b"", chunk("c"), b""], 0.3, 0.02, True)
    assert acc.chunk_times == [0.3, 0.3, 0.3]
    assert acc.uncertain == {0: 0.02, 1: 0.02}
    assert acc.ttft_uncertain == 0.02


def test_a_read_ending_with_done_marks_its_last_chunk_too() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b""], 0.1, 0.02, True)
    assert acc.feed_read([chunk("b", "length"), b"", DONE, b""], 0.2, 0.01, True)
    assert acc.uncertain == {1: 0.01} and acc.ttft_uncertain is None


def test_a_read_ending_inside_a_line_marks_all_its_chunks() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b""], 0.2, 0.01, False)
    assert acc.uncertain == {0: 0.01, 1: 0.01}


def test_slack_within_the_exact_bound_marks_nothing() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b""], 0.2, EXACT_SLACK_S, True)
    assert acc.uncertain == {} and acc.ttft_uncertain is None


def test_start_spread_is_the_first_sends_after_the_go_in_ms() -> None:
    assert start_spread(100.0, [100.004, 100.001, 100.010]) == {
        "users": 3,
        "first_ms": 1.0,
        "p50_ms": 4.0,
        "last_ms": 10.0,
    }
    assert start_spread(None, [1.0]) is None and start_spread(1.0, []) is None
