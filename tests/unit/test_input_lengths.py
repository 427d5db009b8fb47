"""Input lengths as sent: the per-rung summary (mean, min, max, miss against the ask), the check
that fails a run beyond `input_tolerance`, and what the sweep table and its JSON say."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from llmload.analysis.run.reconcile import check_inputs, length_summary, tally
from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.config import ConfigError, parse_config
from llmload.core.files.records import RequestRecord
from llmload.output.table import render


def record(i: int, prompt_tokens: int, asked: int | None = 64) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        rung=0,
        users=2,
        phase="measure",
        endpoint="completions",
        stream=True,
        max_tokens=4,
        t_start=100.0 + i,
        t_end=101.0 + i,
        t_first=100.5 + i,
        prompt_tokens=prompt_tokens,
        output_tokens=4,
        finish_reason="length",
        chunks=4,
        prompt_tokens_asked=asked,
    )


def input_summary(sent: list[int], asked: list[int], off: int = 0) -> dict | None:
    return length_summary(Counter(sent), Counter(asked), off)


def test_summary_and_miss():
    assert input_summary([64, 64, 65, 63], [64] * 4) == {
        "asked": 64,
        "mean": 64.0,
        "min": 63,
        "max": 65,
        "p50": 64,
        "p99": pytest.approx(64.97),  # linear: h = 3 x 0.99, 64 + 0.97 x (65 - 64)
        "miss_pct": 0.0,
        "asked_p50": 64,
        "asked_p99": 64,
        "off": 0,
    }
    assert input_summary([77, 75], [64, 64])["miss_pct"] == pytest.approx(100 * 12 / 64)
    assert input_summary([10], [])["miss_pct"] is None
    assert input_summary([], [64]) is None


def test_drawn_lengths_are_summarised_against_each_request_s_own_ask():
    records = [record(0, 100, 100), record(1, 41, 40), record(2, 23, 20)]
    counts = tally(r.to_dict() for r in records)
    summary = counts.inputs.summary()
    assert summary["asked"] == pytest.approx(160 / 3) and summary["asked_p50"] == 40
    assert summary["off"] == 1  # 23 for 20; 41 for 40 is within a token
    table = render(sweep_rows(tally_rungs(records)))
    # p99 of 20 40 100: h = 2 x 0.99, 40 + 0.98 x 60; of 23 41 100: 41 + 0.98 x 59
    assert "input tokens asked mean 53.3 p50 40 p99 98.8, sent: rung01 c2 mean 54.7 p50 41 p99 98.82" in table
    assert "(1 off their ask by > 1)" in table


def test_check_fails_beyond_the_tolerance_only():
    assert check_inputs("rung01 c2", tally(r.to_dict() for r in [record(0, 65), record(1, 65)]), 0.02) is None
    missed = tally(r.to_dict() for r in [record(0, 76), record(1, 78)])
    message = check_inputs("rung01 c2", missed, 0.02)
    assert message == (
        "rung01 c2: input tokens mean 77.0 (min 76, max 78) missed prompt_tokens 64 by +20.3 % "
        "(input_tolerance 2 %)"
    )
    assert check_inputs("rung01 c2", missed, 0.25) is None
    assert (
        check_inputs("rung01 c2", tally(r.to_dict() for r in [record(0, 76, None)]), 0.02) is None
    )  # no ask


def test_table_notes_and_json():
    rows = sweep_rows(tally_rungs([record(0, 76), record(1, 78)]))
    assert rows[0].input_tokens["mean"] == 77.0
    table = render(rows)
    assert "input tokens (asked 64): rung01 c2 mean 77.0 min 76 max 78" in table
    assert "inputs missed the asked length by more than 2 %: rung01 c2 +20.3 %" in table
    assert json.loads(render(rows, "json"))[0]["input_tokens"]["miss_pct"] == pytest.approx(20.3125)
    exact = render(sweep_rows(tally_rungs([record(0, 64), record(1, 64)])))
    assert "input tokens" not in exact and "missed" not in exact  # sent as asked: no note (JSON has it)


def test_input_tolerance_key():
    assert parse_config({"input_tolerance": 0.1}, "f.yaml").input_tolerance == 0.1
    with pytest.raises(ConfigError, match="'input_tolerance' must be a number in"):
        parse_config({"input_tolerance": 2}, "f.yaml")


def test_a_rate_rung_shows_its_rate_in_place_of_its_client_slots():
    rated = [dataclasses.replace(record(i, 64), rate=2.5) for i in range(2)]
    rows = sweep_rows(tally_rungs(rated))
    assert rows[0].rate == 2.5
    assert render(rows).splitlines()[1].split()[0] == "2.5/s"
