"""The live end of a rung run to a stated precision (llmload.loadgen.run.precision_stop), the keys
that ask for it, and the table's note of what each rung reached."""

from __future__ import annotations

import random

import pytest
from fixtures.runs import make_record

from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.config import DEFAULT_PRECISION, ConfigError, SweepConfig, parse_config
from llmload.loadgen.run.messages import Stage
from llmload.loadgen.run.precision_stop import CHECK_S, MIN_PER_USER, PrecisionStop
from llmload.loadgen.run.stage_protocol import StageProgress
from llmload.output.run_table import precision_note


def running(config: SweepConfig, users: int = 4) -> StageProgress:
    stage = Stage(1, 0, users, 1, "m", config, start_at=1000.0, deadline=1000.0 + config.precision_max_s)
    return StageProgress(stage, 1000.0)


def held_rung(
    stop: PrecisionStop, users: int, rounds: int, jitter: float, seed: int = 0, t0: float = 1000.0
) -> None:
    """`users` users each sending `rounds` 100-token requests of about a second back to back from t0."""
    rng = random.Random(seed)
    for user in range(users):
        t = t0
        for _ in range(rounds):
            e2e = 1.0 + rng.uniform(-jitter, jitter)
            times = [0.05 + i * (e2e - 0.05) / 99 for i in range(100)]
            rec = make_record(t, t + e2e, 100, 0.05, users=users, chunk_times=times, request_id=f"{user}-{t}")
            stop(rec)
            t += e2e


def test_a_steady_rung_ends_once_its_interval_is_within_the_precision():
    config = parse_config({"rungs": [4], "precision": 2}, source="t")
    stop = PrecisionStop(config)
    progress = running(config)
    held_rung(stop, 4, 1, 0.02)  # one request per user: too few to judge
    assert stop.due(progress, 2000.0) is None
    held_rung(stop, 4, 30, 0.02, t0=1001.1)
    assert stop.due(progress, 2000.0 + CHECK_S) is None  # met once: it must hold again
    held_rung(stop, 4, 1, 0.02, seed=5, t0=1031.2)  # one more request a user
    line = stop.due(progress, 2000.0 + 2 * CHECK_S)
    assert line is not None and "it ends (precision +-2 %)" in line and "after 128 requests" in line
    assert stop.due(progress, 2000.0 + 3 * CHECK_S) is None  # once


def test_met_once_then_missed_starts_the_confirmation_over():
    config = parse_config({"rungs": [2], "precision": 2}, source="t")
    stop = PrecisionStop(config)
    progress = running(config, users=2)
    held_rung(stop, 2, 30, 0.02)
    assert stop.due(progress, 2000.0) is None and stop.met_at == {1: 60}
    held_rung(stop, 2, 10, 0.9, seed=9, t0=1031.0)  # a burst of noise: no longer within +-2 %
    assert stop.due(progress, 2000.0 + CHECK_S) is None and stop.met_at == {}


def test_a_noisy_rung_runs_on_until_its_cap_of_requests():
    config = parse_config({"rungs": [4], "precision": 0.1, "precision_max_requests": 100}, source="t")
    stop = PrecisionStop(config)
    held_rung(stop, 4, 10, 0.5, seed=1)
    progress = running(config)
    assert stop.due(progress, 2000.0) is None  # 40 requests: on
    held_rung(stop, 4, 20, 0.5, seed=2, t0=1016.0)
    line = stop.due(progress, 2000.0 + CHECK_S)
    assert line is not None and "capped at 120 requests (precision_max_requests): agg_tok_s +-" in line


def test_the_rule_waits_for_its_minimum_and_between_checks():
    config = parse_config({"rungs": [8], "precision": 50}, source="t")
    stop = PrecisionStop(config)
    held_rung(stop, 8, MIN_PER_USER - 1, 0.0)
    progress = running(config, users=8)
    assert stop.due(progress, 2000.0) is None
    held_rung(stop, 8, 15, 0.0, seed=3, t0=1000.0 + MIN_PER_USER)  # slices as long as a request
    assert stop.due(progress, 2000.0 + CHECK_S / 2) is None  # checked half a period ago
    assert stop.due(progress, 2000.0 + CHECK_S) is None  # met: to be confirmed
    held_rung(stop, 8, 1, 0.0, seed=4, t0=1000.0 + MIN_PER_USER + 15)
    assert stop.due(progress, 2000.0 + 2 * CHECK_S) is not None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"mode": "rate", "rungs": [1.0], "duration": 5}, "'precision' applies to concurrency rungs"),
        ({"duration": 5}, "its time cap is 'precision_max_s', not 'duration'"),
        ({"precision": 0}, "precision"),
        ({"requests_per_user": 3}, "'precision_max_requests', not 'requests_per_user'"),
    ],
)
def test_precision_is_refused_where_it_cannot_end_a_rung(keys, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"precision": 2, **keys}, source="ladder.yaml")


@pytest.mark.parametrize(
    ("keys", "held"),
    [
        ({}, DEFAULT_PRECISION),  # held concurrency by default
        ({"precision": 2}, 2.0),
        ({"requests_per_user": 1}, None),  # the seed's count-based rungs, as an option
        ({"duration": 30}, None),  # held until a time
        ({"mode": "rate", "rungs": [1.0], "requests_per_rung": 10}, None),  # rate keeps its own end
        ({"rungs": [4], "duration": 60, "soak": {}}, None),
        ({"mode": "trace", "trace_file": "t.jsonl"}, None),
        ({"mode": "capacity", "slo": {"ttft_ms": 500}}, None),
        ({"endpoint": "chat", "sessions": {"turns": 2}}, None),  # sessions end with their conversations
    ],
)
def test_a_rung_is_held_to_a_precision_unless_something_else_ends_it(keys, held):
    assert parse_config(keys, source="ladder.yaml").rung_precision == held


def test_the_table_s_note_names_the_rungs_short_of_it_and_is_quiet_when_all_reached_it():
    rows = [
        SweepRow(0, 4, 1300.0, 330.0, 6656, 5.0, 9.0, 52, 0, interval={"agg_tok_s_pct": 1.18}),
        SweepRow(1, 8, 2000.0, 250.0, 9000, 120.0, 9.0, 2000, 0, interval={"agg_tok_s_pct": 3.4}),
        SweepRow(2, 16, 2100.0, 130.0, 900, 1.0, 9.0, 16, 0),
    ]
    assert precision_note(rows, 2.0) == (
        "precision +-2 % not reached over the rung's window: rung02 c8 +-3.4 % in 2000 requests; "
        "rung03 c16 no interval in 16 requests (Locust's log says whether a cap ended it): raise "
        "precision_max_s or precision_max_requests, or ask a narrower --precision to run it longer"
    )
    assert precision_note(rows[:1], 2.0) is None  # the ±% column says what it reached
