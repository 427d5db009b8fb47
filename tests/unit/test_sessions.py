"""Multi-turn sessions (pure logic): the history each turn sends, the session loop, the SSE text
collector and cached_tokens, the session/trace config keys and the per-turn metrics."""

from __future__ import annotations

import re
from contextlib import nullcontext

import pytest
from fixtures.runs import make_record
from fixtures.sim_calibration import SIM_VOCAB

from llmload.analysis.run.health import loop_lag_ms
from llmload.analysis.run.production_traffic import (
    LATE_P99_MS,
    lateness_bar_ms,
    replay_warnings,
    turn_metrics,
)
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.config import ConfigError, SessionConfig, parse_config
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.workload.session_play import SessionPlayer
from llmload.loadgen.workload.sessions import Reply, Session
from llmload.sim.tokens import BOS_TOKENS, CHAT_TEMPLATE_TOKENS_PER_MESSAGE, chat_prompt


def test_each_turn_resends_the_history_as_answered():
    session = Session(SessionConfig(turns=3, user_tokens=5, system_tokens=7), 1, SIM_VOCAB, "r0u0s1")
    first = session.next_turn()
    assert first.number == 1 and [m["role"] for m in first.messages] == ["system", "user"]
    assert [len(m["content"].split()) for m in first.messages] == [7, 5]
    session.answered(Reply(" the reply"))
    second = session.next_turn()
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": " the reply"}  # unchanged
    assert second.messages[3]["role"] == "user" and second.messages[3] != first.messages[1]
    assert second.session == first.session
    assert len(first.messages) == 2  # a turn's messages are a copy, not the live history


def test_messages_are_one_token_words_of_the_calibration_and_sessions_differ():
    a = Session(SessionConfig(user_tokens=100, system_tokens=20), 0, SIM_VOCAB, "r0u0s1")
    messages = a.next_turn().messages
    assert all(m["content"][0] == " " for m in messages)  # every word after a space (calibrated form)
    assert all(w in SIM_VOCAB for m in messages for w in m["content"].split())
    # the simulator's count: BOS, then each message's template tokens and exactly its tokens
    assert chat_prompt(messages)[1] == BOS_TOKENS + 2 * CHAT_TEMPLATE_TOKENS_PER_MESSAGE + 20 + 100
    b = Session(SessionConfig(user_tokens=100), 0, SIM_VOCAB, "r0u0s2")
    assert b.next_turn().messages != a.history[1:2]


def test_think_times():
    assert Session(SessionConfig(think_time_s=0.5), 0, SIM_VOCAB, "a").think_time() == 0.5
    s = Session(SessionConfig(think_time_s=0.5, think_time="exponential"), 0, SIM_VOCAB, "a")
    draws = [s.think_time() for _ in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(0.5, rel=0.06)
    assert min(draws) < 0.05  # exponential, not constant


def test_play_sessions_counts_and_stops_a_session_at_a_failed_turn():
    sent = []

    def send(turn, on_reply):
        sent.append((turn.session, turn.number))
        if len(sent) != 6:  # the 6th request (session 2, turn 2) fails: no reply
            on_reply(Reply(f" reply {len(sent)}"))
        return 1

    def player(deadline):
        return SessionPlayer(
            SessionConfig(turns=4, per_user=3), 0, SIM_VOCAB, deadline, False, send, lambda: nullcontext(send)
        )

    assert player(None).play(2, 5) == 4 + 2 + 4
    sessions = list(dict.fromkeys(s for s, _ in sent))
    assert sessions == ["r2u5s1", "r2u5s2", "r2u5s3"]  # seeded: the rung, the user's slot, the number
    assert [n for s, n in sent if s == sessions[1]] == [1, 2]
    assert player(0.0).play(2, 5) == 0  # a deadline in the past starts nothing


def test_text_collector_keeps_the_reply_and_cached_tokens_are_read():
    chat = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":" hello"}}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"length"}]}',
        b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,'
        b'"prompt_tokens_details":{"cached_tokens":8}}}',
        b"data: [DONE]",
    ]
    plain, text = StreamAccumulator(chat=True), StreamAccumulator(chat=True, keep_text=True)
    for i, line in enumerate(chat):
        plain.feed(line, i * 0.1)
        text.feed(line, i * 0.1)
    assert text.text == " hello world" and plain.texts is None  # the ordinary path keeps no text
    assert text.chunk_times == plain.chunk_times and plain.cached_tokens == 8
    # llama.cpp: timings.cache_n on the final chunk that carries usage; vLLM's null details
    llama = StreamAccumulator()
    llama.feed(
        b'data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,'
        b'"completion_tokens":1},"timings":{"cache_n":4,"prompt_n":1}}',
        0.0,
    )
    assert llama.cached_tokens == 4
    vllm = StreamAccumulator()
    vllm.feed(b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens_details":null}}', 0.0)
    assert vllm.cached_tokens is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sessions": {"turns": 2}}, "'sessions' need 'endpoint: chat' (or 'responses') and 'stream: true'"),
        ({"endpoint": "chat", "stream": False, "sessions": {}}, "'sessions' need 'endpoint: chat'"),
        ({"endpoint": "chat", "sessions": {"think_time": "gauss"}}, "'sessions.think_time' must be one of"),
        (
            {"endpoint": "chat", "sessions": {"think_time_s": -1}},
            "'sessions.think_time_s' must be a number >= 0",
        ),
        (
            {"endpoint": "chat", "sessions": {"user_tokens": 0}},
            "'sessions.user_tokens' must be an integer >= 1",
        ),
        ({"endpoint": "chat", "sessions": [1]}, "'sessions' must be a mapping"),
        ({"endpoint": "chat", "mode": "rate", "duration": 1, "sessions": {}}, "run in 'mode: concurrency'"),
        ({"mode": "trace"}, "'mode: trace' and 'trace_file' go together"),
        ({"trace_file": "t.jsonl"}, "'mode: trace' and 'trace_file' go together"),
        ({"mode": "trace", "trace_file": "t", "prompt_file": "p"}, "takes its prompts from 'trace_file'"),
        ({"mode": "trace", "trace_file": "t", "speed": 0}, "'speed' must be a number > 0"),
        ({"mode": "trace", "trace_file": "t", "start_s": -1}, "'start_s' must be a number >= 0"),
        ({"mode": "trace", "trace_file": ""}, "'trace_file' must be a file path"),
    ],
)
def test_config_errors(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(raw, "c.yaml")


def test_config_round_trips_with_overrides():
    config = parse_config({"endpoint": "chat", "sessions": {"turns": 3, "system_tokens": 0}}, "c.yaml")
    assert config.sessions == SessionConfig(turns=3)
    assert config.with_overrides(max_tokens=5).sessions == SessionConfig(turns=3)


def test_turn_metrics_and_replay_lateness():
    recs = [
        make_record(0.0, 1.0, 8, 0.5, turn=1, session="s", prompt_tokens=100, cached_tokens=0),
        make_record(2.0, 3.0, 8, 0.1, turn=2, session="s", prompt_tokens=120, cached_tokens=96),
        make_record(4.0, 5.0, 8, 0.3, turn=2, session="t", prompt_tokens=140, cached_tokens=None),
        make_record(6.0, 7.0, 8, 0.2, turn=2, session="t", outcome="timeout"),
        make_record(8.0, 9.0, 8, 0.4, turn=1, session="u", rung=1, users=4),
    ]
    rows = turn_metrics(recs)
    assert [(r.rung, r.users, r.turn, r.requests) for r in rows] == [(0, 1, 1, 1), (0, 1, 2, 2), (1, 4, 1, 1)]
    assert rows[1].ttft_ms == pytest.approx(200.0) and rows[1].prompt_tokens == 130.0
    assert rows[1].cached_tokens == 96.0 and rows[1].cached_share == pytest.approx(96 / 120)
    on_time = [make_record(t, t + 1, 8, 0.1, trace_line=1, t_scheduled=t - 0.001) for t in range(100)]
    assert replay_warnings(tally_rungs(on_time), {}) == []
    late = on_time[:98] + [make_record(t, t + 1, 8, 0.1, trace_line=1, t_scheduled=t - 0.2) for t in (98, 99)]
    (warning,) = replay_warnings(tally_rungs(late), {})
    assert warning.startswith("rung01 c1: the generator fell behind the trace: p99 lateness 200.0 ms")
    assert "2 of 100 requests more than 100 ms late" in warning


def _replay_late_by(ms: float) -> list:
    """A rung (rung01 c1) of 100 trace requests, the last two sent `ms` late, the rest 1 ms."""
    return tally_rungs(
        [make_record(t, t + 1, 8, 0.1, trace_line=1, t_scheduled=t - 0.001) for t in range(98)]
        + [make_record(t, t + 1, 8, 0.1, trace_line=1, t_scheduled=t - ms / 1000) for t in (98, 99)]
    )


@pytest.mark.parametrize(
    ("late_ms", "lags", "bar"),
    [
        (4.0, {}, None),  # under LATE_P99_MS: on time
        (4.0, {0: 2.0}, None),  # a loop lag under LATE_P99_MS does not lower the bar
        (30.0, {0: 40.0}, None),  # over 5 ms but no later than the loop's own lag: quiet
        (30.0, {0: 12.5}, "12.5"),  # later than both: the bar is the loop's lag
        (30.0, {}, "5"),  # no health for the rung (no samples, an older run): 5 ms
        (30.0, {1: 40.0}, "5"),  # another rung's lag is not this one's
        (8.0, {0: 2.0}, "5"),  # a loop lag under LATE_P99_MS: the bar stays 5 ms
    ],
)
def test_replay_lateness_bar_is_the_loops_own_lag_at_least(late_ms, lags, bar):
    warnings = replay_warnings(_replay_late_by(late_ms), lags)
    if bar is None:
        assert warnings == []
        return
    (warning,) = warnings
    assert warning.startswith(
        f"rung01 c1: the generator fell behind the trace: p99 lateness {late_ms:.1f} ms > {bar} ms"
    )
    assert "raise max_concurrency" in warning and "more --processes" in warning


def test_lateness_bar():
    assert lateness_bar_ms(None) == LATE_P99_MS == 5.0
    assert lateness_bar_ms(1.5) == 5.0 and lateness_bar_ms(7.25) == 7.25


def test_loop_lag_of_the_rows_health():
    """What postprocess hands replay_warnings: the rows' lag_max_ms, rungs without it left out."""
    rows = [SweepRow(rung, 4, 1.0, 1.0, 4, 1.0, 1.0, 4, 0) for rung in range(3)]
    rows[0].generator = {"cpu_pct": 3.0, "lag_ms": 1.2, "lag_max_ms": 9.5}
    rows[1].generator = {"read_delay_p99_ms": 0.4}  # kernel stamps but no health samples
    assert loop_lag_ms(rows) == {0: 9.5}  # rows[2]: no generator figures at all
