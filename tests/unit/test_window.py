"""The rung's one window (llmload.analysis.run.window) against hand-drawn timelines: the held
interval of a sweep line, the floor of 95 %, sessions, open-loop stages, and the tokens counted by
the time they arrived."""

from __future__ import annotations

import pytest
from fixtures.runs import make_record

from llmload.analysis.run.rung_tally import tally_records
from llmload.analysis.run.window import (
    NOT_HELD,
    STEADY,
    WHOLE,
    TokenTimeline,
    held_floor,
    held_interval,
    record_windows,
    rung_window,
)


def test_the_floor_is_95_percent_of_the_users_rounded_up():
    assert [held_floor(c) for c in (1, 2, 8, 19, 20, 21, 40)] == [1, 2, 8, 19, 19, 20, 38]


def test_the_held_interval_runs_from_the_floor_reached_to_its_last_instant():
    # three users: in flight 1 at 0, 2 at 1, 3 at 2; one ends at 5 (2 left), back to 3 at 5.5
    # (a user's next request), the last 3-in-flight instant ends at 7; the rest drains to 9
    starts, ends = [0.0, 1.0, 2.0, 5.5], [5.0, 7.0, 9.0, 8.0]
    assert held_interval(starts, ends, 3) == (2.0, 7.0)
    assert held_interval(starts, ends, 4) is None
    # at one instant an end comes before a start: a user sending its next request as its last
    # one ends does not make 3 out of 2
    assert held_interval([0.0, 0.0, 1.0], [1.0, 2.0, 2.0], 3) is None


def test_a_rung_that_never_held_keeps_its_span_and_open_loop_stages_theirs():
    w = rung_window(0, 4, [0.0, 1.0, 2.0], [3.0, 4.0, 5.0])
    assert (w.start, w.end, w.rule, w.ramp_s, w.drain_s) == (0.0, 5.0, NOT_HELD, 0.0, 0.0)
    held = rung_window(0, 2, [0.0, 1.0], [3.0, 4.0])
    assert (held.start, held.end, held.rule, held.ramp_s, held.drain_s) == (1.0, 3.0, STEADY, 1.0, 1.0)
    rate = [make_record(float(i), i + 3.0, 10, 0.1, users=2, rate=1.0) for i in range(3)]
    (w,) = record_windows(rate).values()
    assert (w.start, w.end, w.rule) == (0.0, 5.0, WHOLE)


def test_sessions_hold_their_place_while_their_user_thinks():
    # two users, two turns each with 1 s of thinking between: requests are 2 in flight only
    # from 0.5 to 1.0, sessions from 0.5 to 2.5
    turns = [
        make_record(0.0, 1.0, 10, 0.1, users=2, session="a", turn=1),
        make_record(2.0, 3.0, 10, 0.1, users=2, session="a", turn=2),
        make_record(0.5, 1.5, 10, 0.1, users=2, session="b", turn=1),
        make_record(2.5, 3.5, 10, 0.1, users=2, session="b", turn=2),
    ]
    (w,) = record_windows(turns).values()
    assert (w.start, w.end, w.rule) == (0.5, 3.0, STEADY)


def test_tokens_are_counted_where_their_chunks_arrived():
    # users of 2: 0-4 s with 4 chunks at 1, 2, 3, 4 s; 1-3 s with 2 chunks (3 and 5 tokens)
    a = make_record(0.0, 4.0, 4, 1.0, users=2, chunk_times=[1.0, 2.0, 3.0, 4.0])
    b = make_record(1.0, 3.0, 8, 1.0, users=2, chunk_times=[1.0, 2.0], chunk_tokens=[3, 5])
    tally = tally_records(0, 2, [a, b])
    assert (tally.window.start, tally.window.end) == (1.0, 3.0)
    # each chunk's tokens spread over the gap since its request's previous chunk, a first chunk's
    # at its time: a's first token arrived at the opening instant (by 1 s: before), its second
    # and third over 1-3 s, its fourth over 3-4 s (the drain); b's 3 at 2 s and its 5 over 2-3 s
    assert tally.window_tokens() == pytest.approx((1.0, 2.0 + 8.0, 1.0))
    row = tally.row()
    assert row.agg_tok_s == pytest.approx(10.0 / 2.0)
    assert tally.metrics().achieved_concurrency == pytest.approx(2.0)
    timeline = TokenTimeline()
    timeline.add(a)
    other = TokenTimeline()
    other.add(b)
    timeline.merge(other)
    assert timeline.split(1.0, 3.0) == pytest.approx((1.0, 10.0, 1.0))
    assert timeline.between(3.5, 10.0) == pytest.approx(0.5)  # half of a's last gap
    assert timeline.between(2.5, 3.0) == pytest.approx(0.5 + 2.5)  # halves of a's and b's last gaps


def test_latencies_are_those_of_the_requests_that_overlap_the_window():
    # three users: all in flight from 1.5 to 2.5; the fourth request (sent at 4, in the drain)
    # and its TTFT of 900 ms are left out, the opening wave's (sent before 1.5) are in
    records = [
        make_record(0.0, 3.0, 10, 0.1, users=3),
        make_record(1.0, 6.0, 10, 0.3, users=3),
        make_record(1.5, 2.5, 10, 0.2, users=3),
        make_record(4.0, 5.0, 10, 0.9, users=3),
    ]
    tally = tally_records(0, 3, records)
    assert (tally.window.start, tally.window.end) == (1.5, 2.5)
    assert tally.row().ttft_p50_ms == pytest.approx(200.0)
    assert tally.metrics().latencies["ttft"].count == 3
