"""Several messages taken by one read (llmload.loadgen.stream.sse.StreamAccumulator.feed_read): the
read's stamp times its last message, or the stream's last token when the closing messages written
with it (usage, [DONE]) came in the read; the chunks before the timed one, and t_first among them,
are marked with how late that stamp may be for them: by the stream's previous read when a token
chunk came before it, by the polls' bound when the read's only token chunk is the timed one's
message or is cut by a line the read ended in."""

from __future__ import annotations

import pytest

from llmload.analysis.run.uncertainty import Uncertainty, request_bounds
from llmload.core.files.records import RequestRecord
from llmload.loadgen.run.stage_protocol import start_spread
from llmload.loadgen.stream.sse import EXACT_SLACK_S, StreamAccumulator


def chunk(text: str, finish: str | None = None) -> bytes:
    reason = "null" if finish is None else f'"{finish}"'
    return b'data: {"choices":[{"index":0,"text":"%s","finish_reason":%s}]}' % (
        text.encode(),
        reason.encode(),
    )


DONE = b"data: [DONE]"
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}'


def test_one_message_per_read_is_never_marked() -> None:
    acc = StreamAccumulator()
    for i, t in enumerate((0.1, 0.2, 0.3)):
        acc.feed_read([chunk(f"w{i}"), b""], t, 0.05, 0.05, True)
    assert acc.uncertain == {} and acc.ttft_uncertain is None


def test_a_read_of_three_chunks_marks_the_first_two_and_ttft() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b"", chunk("c"), b""], 0.3, 0.02, 0.03, True)
    assert acc.chunk_times == [0.3, 0.3, 0.3]
    assert acc.uncertain == {0: 0.03, 1: 0.03}
    assert acc.ttft_uncertain == 0.03


def test_a_last_token_read_with_the_closing_messages_is_timed_by_them() -> None:
    """The server writes its usage and [DONE] with its last token: the read's stamp is that
    token's, however long since the stream's previous read (no mark)."""
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b""], 0.1, 0.02, 0.02, True)
    assert acc.feed_read([chunk("b", "length"), b"", USAGE % 2, b"", DONE, b""], 0.2, 0.01, 0.1, True)
    assert acc.uncertain == {} and acc.ttft_uncertain is None and acc.output_tokens(2) == (2, False)


def test_a_token_before_the_last_in_the_closing_read_is_bounded_by_the_previous_read() -> None:
    """Two token chunks (two steps) and the closing messages in one read: the last token is timed
    by the closing messages, the one before it only by the stream's previous read."""
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b""], 0.1, 0.0, 0.1, True)
    lines = [chunk("b"), b"", chunk("c", "length"), b"", USAGE % 3, b"", DONE, b""]
    assert acc.feed_read(lines, 0.2, 0.0001, 0.05, True)
    assert acc.uncertain == {1: 0.05} and acc.ttft_uncertain is None


def test_a_closing_message_that_usage_proves_a_token_is_the_timed_last_token() -> None:
    """vLLM's last token whose bytes end inside a character: an empty closing choice that usage
    counts. It is the stream's last token, written a step after the text chunk before it."""
    acc = StreamAccumulator()
    lines = [chunk("a"), b"", chunk("", "length"), b"", USAGE % 2, b"", DONE, b""]
    assert acc.feed_read(lines, 0.2, 0.0001, 0.05, True)
    assert acc.chunk_times == [0.2, 0.2] and acc.uncertain == {0: 0.05} and acc.ttft_uncertain == 0.05


def test_a_closing_chunk_that_is_no_token_closes_with_the_last_token() -> None:
    """llama.cpp: the last token, then a closing choice with the finish_reason and usage (not a
    token by usage): one instant, the token is timed by the read."""
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b""], 0.1, 0.0, 0.1, True)
    closing = b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
    closing += b'"usage":{"completion_tokens":2}}'
    assert acc.feed_read([chunk("b"), b"", closing, b"", DONE, b""], 0.2, 0.0001, 0.1, True)
    assert acc.chunk_times == [0.1, 0.2] and acc.uncertain == {}


def test_a_closing_choice_whose_usage_is_still_to_come_leaves_the_read_to_the_old_bound() -> None:
    """An empty closing choice without usage may still be a token (usage decides, in a later
    read): the stream has not provably ended, so the token before it is bounded as before."""
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b""], 0.1, 0.0, 0.1, True)
    acc.feed_read([chunk("b"), b"", chunk("", "length"), b""], 0.2, 0.0001, 0.1, True)
    assert acc.uncertain == {1: 0.1}
    assert acc.feed_read([USAGE % 3, b"", DONE, b""], 0.3, 0.0001, 0.1, True)
    assert acc.chunk_times == [0.1, 0.2, 0.2] and acc.uncertain == {1: 0.1}  # the closing token: its own read


def test_a_chat_reply_of_one_token_read_whole_marks_ttft_by_the_polls() -> None:
    """The role delta was written before the token (at admission): t_first is the role delta's,
    bounded by the polls, while the token itself is timed by the closing messages."""
    acc = StreamAccumulator(chat=True)
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
    last = b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}'
    assert acc.feed_read([role, b"", last, b"", USAGE % 1, b"", DONE, b""], 0.2, 0.003, 0.2, True)
    assert acc.uncertain == {} and acc.ttft_uncertain == 0.003


def test_a_read_ending_inside_a_line_marks_all_its_chunks() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b""], 0.2, 0.01, 0.01, False)
    assert acc.uncertain == {0: 0.01, 1: 0.01}


def test_slack_within_the_exact_bound_marks_nothing() -> None:
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b""], 0.2, 0.0, EXACT_SLACK_S, True)
    assert acc.uncertain == {} and acc.ttft_uncertain is None
    acc.feed_read([chunk("c"), b"", chunk("d"), b""], 0.3, EXACT_SLACK_S, EXACT_SLACK_S, True)
    assert acc.uncertain == {}


def test_two_token_chunks_delivered_at_once_are_bounded_by_the_previous_read() -> None:
    """A poll that waited returned both (the polls' bound: nothing late), but they were written
    at two steps: the kernel delivered them together, so only the previous read bounds the first."""
    acc = StreamAccumulator()
    acc.feed_read([chunk("a"), b"", chunk("b"), b""], 0.2, 0.0001, 0.04, True)
    assert acc.uncertain == {0: 0.04} and acc.ttft_uncertain == 0.04


def test_start_spread_is_the_first_sends_after_the_go_in_ms() -> None:
    assert start_spread(100.0, [100.004, 100.001, 100.010]) == {
        "users": 3,
        "first_ms": 1.0,
        "p50_ms": 4.0,
        "last_ms": 10.0,
    }
    assert start_spread(None, [1.0]) is None and start_spread(1.0, []) is None


def _record(**marks: object) -> RequestRecord:
    base = dict(request_id="r", rung=0, users=1, phase="measure", endpoint="completions", stream=True)
    times = [0.1, 0.12, 0.14, 0.16, 0.18]
    return RequestRecord(
        **base,  # type: ignore[arg-type]
        max_tokens=5,
        t_start=1000.0,
        t_end=1000.18,
        t_first=1000.1,
        output_tokens=5,
        chunks=5,
        chunk_times=times,
        **marks,  # type: ignore[arg-type]
    )


def test_the_bounds_of_one_request_follow_their_definitions() -> None:
    rec = _record(uncertain_chunks=[0, 3], uncertain_ms=[4.0, 2.0], ttft_uncertain_ms=4.0)
    ttft, gaps, tpot = request_bounds(rec)
    assert ttft == 4.0
    assert gaps == [4.0, 2.0, 2.0]  # gap 1 touches chunk 0; gaps 3 and 4 touch chunk 3
    assert tpot == 4.0 / 4  # t_first's mark over output tokens - 1 (the last chunk is exact)


def test_a_rung_reports_its_uncertain_values_and_flags_a_late_p99() -> None:
    tally = Uncertainty()
    for _ in range(99):
        tally.add(_record(), True, True)
    tally.add(_record(uncertain_chunks=[0], uncertain_ms=[30.0], ttft_uncertain_ms=30.0), True, True)
    summary = tally.summary()
    assert summary is not None
    assert summary["ttft"]["values"] == 100 and summary["ttft"]["uncertain"] == 1
    assert summary["ttft"]["max_ms"] == 30.0
    assert summary["ttft"]["p99_ms"] == pytest.approx(0.01 * 30.0)  # 1 in 100: between 0 and 30
    assert summary["itl"]["values"] == 400 and summary["itl"]["uncertain"] == 1
    assert summary["late"] is False
    for _ in range(5):
        tally.add(_record(uncertain_chunks=[0], uncertain_ms=[30.0], ttft_uncertain_ms=30.0), True, True)
    assert tally.summary()["late"] is True  # type: ignore[index]
    assert Uncertainty().summary() is None
