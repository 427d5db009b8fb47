"""Output lengths asked vs sent, per rung, on hand-built records: the summary (mean, p50, p99 of
each request's `max_tokens` and of its output tokens, by whose count, the requests off their
ask), that it is the one summary of the input lengths too, that its `off` is exactly what token
reconciliation flags (so the summary and the check that fails the run agree, fuzzed), and what
the sweep table's note and its JSON say."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from fixtures.fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.analysis.run.reconcile import OFF_KINDS, LengthTally, Tally, check_rung, length_summary, tally
from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.config import ReconcileConfig
from llmload.core.files.records import RequestRecord
from llmload.output.table import render


def record(
    i: int,
    max_tokens: int,
    output_tokens: int | None = None,
    *,
    finish: str = "length",
    chunks: int | None = None,
    estimated: bool = False,
    rung: int = 0,
) -> RequestRecord:
    out = max_tokens if output_tokens is None else output_tokens
    return RequestRecord(
        request_id=f"r{rung}-{i}",
        rung=rung,
        users=4,
        phase="measure",
        endpoint="completions",
        stream=True,
        max_tokens=max_tokens,
        t_start=100.0 + i,
        t_end=101.0 + i,
        t_first=100.5 + i,
        prompt_tokens=10,
        output_tokens=out,
        finish_reason=finish,
        chunks=out if chunks is None else chunks,
        tokens_estimated=estimated,
    )


MIXED = [
    record(0, 16),  # exact
    record(1, 40),  # exact
    record(2, 64, 30, finish="stop"),  # stopped early
    record(3, 20, 21),  # over max_tokens
    record(4, 48, 40),  # length_short
    record(5, 32, estimated=True),  # no usage, finish "length": the client counts max_tokens
    record(6, 24, 9, finish="stop", estimated=True),  # no usage, stopped: the client counts chunks
]


def test_the_output_summary_of_drawn_lengths():
    (row,) = sweep_rows(tally_rungs(MIXED))
    out = row.output_tokens
    asked = sorted(r.max_tokens for r in MIXED)  # 16 20 24 32 40 48 64
    sent = sorted(r.output_tokens for r in MIXED)  # 9 16 21 30 32 40 40
    assert out == {
        "asked": sum(asked) / 7,
        "asked_p50": 32,
        "asked_p99": pytest.approx(63.04),  # h = 6 x 0.99 = 5.94: 48 + 0.94 x (64 - 48)
        "mean": sum(sent) / 7,
        "min": 9,
        "max": 40,
        "p50": 30,
        "p99": 40,
        "miss_pct": pytest.approx(100.0 * (sum(sent) - sum(asked)) / sum(asked)),
        "off": 4,  # stopped, over, short and the estimated stop
        "client_counted": 2,
    }
    counts = tally(r.to_dict() for r in MIXED)
    assert out["off"] == sum(counts.kinds.get(k, 0) for k in OFF_KINDS)
    assert check_rung("rung01 c4", counts, ReconcileConfig(), ignore_eos=True) is not None


def test_one_implementation_summarises_inputs_and_outputs():
    counts = tally(r.to_dict() for r in MIXED)
    assert counts.outputs.summary() == length_summary(counts.outputs.sent, counts.outputs.asked, 4)
    assert counts.inputs.summary()["mean"] == 10.0 and "client_counted" not in counts.inputs.summary()
    # a file read in two parts tallies as one
    first, second = tally(r.to_dict() for r in MIXED[:3]), tally(r.to_dict() for r in MIXED[3:])
    first.merge(second)
    assert first.outputs == counts.outputs and first.inputs == counts.inputs
    assert length_summary(Counter(), Counter([4])) is None


def test_the_table_note_and_json_of_drawn_outputs():
    records = [record(i, 16 + 8 * (i % 4)) for i in range(8)] + [
        record(i, 16 + 8 * (i % 4), rung=1) for i in range(8)
    ]
    records[3] = record(3, 40, 12, finish="stop")
    rows = sweep_rows(tally_rungs(records))
    table = render(rows)
    assert (
        # asked 16 16 24 24 32 32 40 40: p50 (24 + 32) / 2; rung01 sent 12 16 16 24 24 32 32 40: p99
        # h = 7 x 0.99 = 6.93, 32 + 0.93 x 8
        "output tokens asked mean 28.0 p50 28 p99 40, sent by usage.completion_tokens: "
        "rung01 c4 mean 24.5 p50 24 p99 39.44 (1 off their ask), rung02 c4 mean 28.0 p50 28 p99 40"
    ) in table
    data = json.loads(render(rows, "json"))
    assert [d["output_tokens"]["off"] for d in data] == [1, 0]
    assert data[0]["output_tokens"]["client_counted"] == 0 and data[0]["input_tokens"]["mean"] == 10.0


def test_fixed_outputs_served_exactly_need_no_note_and_others_say_whose_count():
    exact = sweep_rows(tally_rungs([record(i, 32) for i in range(4)]))
    assert "output tokens" not in render(exact)
    assert json.loads(render(exact, "json"))[0]["output_tokens"]["asked"] == 32
    short = [record(0, 32), record(1, 32, 20, finish="stop", estimated=True)]
    assert (
        "output tokens (asked 32) by usage.completion_tokens, or the client's count where there was "
        "none: rung01 c4 mean 26.0 min 20 max 32 (1 off their ask; 1 counted by the client: no usage)"
    ) in render(sweep_rows(tally_rungs(short)))


def test_each_rung_its_own_mix_when_the_asks_differ():
    records = [record(0, 16), record(1, 64)] + [record(i, 30 + i, rung=1) for i in range(3)]
    assert (
        # 16 64: p50 40, p99 16 + 0.99 x 48; 30 31 32: p99 h = 1.98, 31 + 0.98
        "output tokens asked, sent by usage.completion_tokens: rung01 c4 asked mean 40.0 p50 40 p99 63.52, "
        "sent mean 40.0 p50 40 p99 63.52, rung02 c4 asked mean 31.0 p50 31 p99 31.98, "
        "sent mean 31.0 p50 31 p99 31.98"
    ) in render(sweep_rows(tally_rungs(records)))


outputs = st.fixed_dictionaries(
    {
        "outcome": st.sampled_from(["ok", "ok", "ok", "http_500"]),
        "max_tokens": st.integers(1, 12),
        "output_tokens": st.integers(0, 14),
        "chunks": st.integers(0, 14),
        "finish_reason": st.sampled_from(["length", "stop", None]),
        "tokens_estimated": st.booleans(),
    }
)


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(outputs, max_size=12))
def test_off_is_what_reconciliation_flags_and_fails_the_run(recs):
    counts = tally(recs)
    ok = [r for r in recs if r["outcome"] == "ok"]
    off = counts.outputs.off
    assert off == sum(counts.kinds.get(k, 0) for k in OFF_KINDS)
    # as the client writes records (a count without usage is max_tokens on finish "length"),
    # off is every request whose output is not its max_tokens
    client_wrote = all(
        not (r["tokens_estimated"] and r["finish_reason"] == "length")
        or r["output_tokens"] == r["max_tokens"]
        for r in ok
    )
    if client_wrote:
        assert off == sum(r["output_tokens"] != r["max_tokens"] for r in ok)
    if off:  # with ignore_eos and the default ratios, an output off its ask fails the rung
        assert check_rung("rung01 c1", counts, ReconcileConfig(), ignore_eos=True) is not None
    summary = counts.outputs.summary(counted_by=True)
    assert (summary is None) == (not ok)
    if summary is not None:
        assert summary["off"] == off and summary["client_counted"] == sum(r["tokens_estimated"] for r in ok)
        assert summary["min"] <= summary["p50"] <= summary["p99"] <= summary["max"]


def test_a_length_tally_counts_off_beyond_its_slack():
    inputs = LengthTally(slack=1)
    for sent, asked in ((10, 10), (11, 10), (12, 10), (7, None)):
        inputs.add(sent, asked)
    assert (inputs.off, inputs.sent[7], sum(inputs.asked.values())) == (1, 1, 3)


def test_a_record_tallies_as_its_dict():
    """The ladder tallies the record it receives (`Tally.add_record`), a file's reader the line's
    dict (`Tally.add`): the same counts."""
    failed = RequestRecord("f", 0, 4, "measure", "completions", True, 16, 0.0, 1.0, outcome="timeout")
    by_record = Tally()
    for r in [*MIXED, failed]:
        by_record.add_record(r)
    assert by_record == tally(r.to_dict() for r in [*MIXED, failed])
