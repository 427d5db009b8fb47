"""Drawn lengths end to end on the simulator (its truth log): normal(128, 32) inputs and
uniform(16, 64) outputs over 200 requests, each request served exactly its own drawn lengths
(input within a token), the sent mix the asked one (mean within 2 %, KS does not reject at 1 %)
and the rung's output summary (table note, JSON) the truth log's,
the same seed the same lengths, two processes together the one process's requests, a
scenario string the same requests as its YAML, and outputs drawn from a ShareGPT file's replies
each one of the replies' lengths by the simulator's tokenizer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fixtures.length_stats import KS_1PCT, ks_statistic, truncated_normal_cdf, uniform_cdf

from llmload.analysis.run.postprocess import load_run
from llmload.core.config import parse_config
from llmload.core.files.records import RequestRecord, read_records
from llmload.core.workload.lengths import Lengths
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.sim.tokens import BOS_TOKENS, count_tokens
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

REQUESTS = 200
REPLY_WORDS = ("the", "of", "and", "to", "in", "is", "for", "on", "that", "by", "government,", "information.")
LADDER = (
    "rungs: [4]\nrequests_per_user: 50\nwarmup_requests: 0\nseed: 11\n"
    "prompt_tokens: {dist: normal, mean: 128, std: 32, min: 16, max: 512}\n"
    "max_tokens: {dist: uniform, min: 16, max: 64}\n"
)


def mixed_run(tmp_path: Path, *args: str) -> tuple[list[RequestRecord], dict, SweepRun]:
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "ladder.yaml"
    config.write_text(LADDER)
    run = run_sweep(
        run_dir=tmp_path,
        endpoint="completions",
        locust_args=["--ladder", str(config), *args],
        sim={"base_ms": 1},
        timeout=180,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    truth, _ = load_truth(run.truth_log)
    return records, truth, run


def test_each_request_is_served_its_drawn_lengths_and_the_mix_is_the_asked_one(tmp_path):
    records, truth, run = mixed_run(tmp_path / "a")
    assert len(records) == REQUESTS and all(r.outcome == "ok" for r in records)
    config = parse_config({"prompt_tokens": 1, "seed": 11}, "t")  # the draws are the config's own
    asked_in = parse_config(
        {"prompt_tokens": {"dist": "normal", "mean": 128, "std": 32, "min": 16, "max": 512}}, "t"
    ).prompt_tokens
    asked_out = parse_config({"max_tokens": {"dist": "uniform", "min": 16, "max": 64}}, "t").max_tokens
    assert isinstance(asked_in, Lengths) and isinstance(asked_out, Lengths)
    # requests 0..49 of each of the 4 users share the process's one sequence of indices
    expected = sorted(
        (asked_in.length(config.seed, "input", i), asked_out.length(config.seed, "output", i))
        for i in range(REQUESTS)
    )
    assert sorted((r.prompt_tokens_asked, r.max_tokens) for r in records) == expected
    for r in records:
        served = truth[r.request_id]
        assert abs(served["prompt_tokens"] - r.prompt_tokens_asked) <= 1, (served, r)
        assert served["completion_tokens"] == r.output_tokens == r.max_tokens
        assert r.prompt_tokens == served["prompt_tokens"]
    sent_in = [r.prompt_tokens for r in records]
    sent_out = [r.output_tokens for r in records]
    assert abs(sum(sent_in) / REQUESTS - 128) / 128 < 0.02
    assert abs(sum(sent_out) / REQUESTS - 40) / 40 < 0.02
    assert math.sqrt(REQUESTS) * ks_statistic(sent_in, truncated_normal_cdf(128, 32, 16, 512)) < KS_1PCT
    assert math.sqrt(REQUESTS) * ks_statistic(sent_out, uniform_cdf(16, 64)) < KS_1PCT
    assert_the_rung_reports_the_truth(run, records, truth)
    again, _, _ = mixed_run(tmp_path / "b")
    assert sorted((r.prompt_tokens_asked, r.max_tokens) for r in again) == expected


def linear_percentile(values: list[int], q: float) -> float:
    """The q-quantile by linear interpolation between the two nearest ranks (vLLM's, numpy's
    default: the project's one percentile), written out here."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def assert_the_rung_reports_the_truth(run: SweepRun, records: list[RequestRecord], truth: dict) -> None:
    """The rung's output summary (table note and JSON) against the simulator's truth log: the
    asked mix is the records' max_tokens, the sent mix the tokens the server generated, none off."""
    result = load_run(run.prefix)
    (row,) = result.rows
    served = [truth[r.request_id]["completion_tokens"] for r in records]
    asked = [r.max_tokens for r in records]
    out = row.output_tokens
    assert out["mean"] == pytest.approx(sum(served) / REQUESTS) and out["asked"] == pytest.approx(
        sum(asked) / REQUESTS
    )
    assert (out["p50"], out["p99"]) == pytest.approx(
        (linear_percentile(served, 0.5), linear_percentile(served, 0.99))
    )
    assert (out["min"], out["max"]) == (min(served), max(served))
    assert (out["asked_p50"], out["asked_p99"]) == pytest.approx(
        (linear_percentile(asked, 0.5), linear_percentile(asked, 0.99))
    )
    assert out["off"] == 0 and out["client_counted"] == 0
    assert row.input_tokens["off"] == 0
    table = render_run(result)
    assert (
        f"output tokens asked mean {out['asked']:.1f} p50 {out['asked_p50']:g} p99 {out['asked_p99']:g}, "
        f"sent by usage.completion_tokens: rung01 c4 mean {out['mean']:.1f} "
        f"p50 {out['p50']:g} p99 {out['p99']:g}"
    ) in table
    assert json.loads(render_run(result, "json"))[0]["output_tokens"] == out


def test_two_processes_together_send_exactly_the_single_process_sequence(tmp_path):
    one, _, _ = mixed_run(tmp_path / "one")
    two, _, _ = mixed_run(tmp_path / "two", "--processes", "2")
    assert len({r.worker for r in two}) == 2
    assert sorted((r.prompt_tokens_asked, r.max_tokens) for r in two) == sorted(
        (r.prompt_tokens_asked, r.max_tokens) for r in one
    )


def test_a_scenario_string_gives_the_requests_of_its_yaml():
    scenario = parse_config({"scenario": "U(16,64)/(16,64)", "seed": 3}, "t")
    spelled = parse_config(
        {
            "prompt_tokens": {"dist": "uniform", "min": 16, "max": 64},
            "max_tokens": {"dist": "uniform", "min": 16, "max": 64},
            "seed": 3,
        },
        "t",
    )
    assert (scenario.prompt_tokens, scenario.max_tokens) == (spelled.prompt_tokens, spelled.max_tokens)


def test_outputs_drawn_from_a_sharegpt_file_s_replies(tmp_path):
    """`max_tokens: {dist: empirical, replies: true}`: every request asks one of the replies'
    lengths as the simulator's own tokenizer counts the reply text, and is served exactly that."""
    words = REPLY_WORDS
    replies = [" ".join(words[(i * 7 + k) % len(words)] for k in range(8 + 13 * i)) for i in range(6)]
    convs = [
        {"conversations": [{"from": "human", "value": f"Question {i}?"}, {"from": "gpt", "value": r}]}
        for i, r in enumerate(replies)
    ]
    (tmp_path / "chats.json").write_text(json.dumps(convs))
    config = tmp_path / "replies.yaml"
    config.write_text(
        "rungs: [3]\nrequests_per_user: 8\nwarmup_requests: 0\nseed: 2\nprompt_file: chats.json\n"
        "max_tokens: {dist: empirical, replies: true}\n"
    )
    run = run_sweep(
        run_dir=tmp_path / "run", locust_args=["--ladder", str(config)], sim={"base_ms": 1}, timeout=120
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    truth, _ = load_truth(run.truth_log)
    lengths = {count_tokens(r) - BOS_TOKENS for r in replies}
    assert len(records) == 24 and len(lengths) == 6
    assert {r.max_tokens for r in records} <= lengths and len({r.max_tokens for r in records}) > 2
    for r in records:
        assert truth[r.request_id]["completion_tokens"] == r.output_tokens == r.max_tokens
    (row,) = load_run(run.prefix).rows
    assert row.output_tokens["off"] == 0
    assert "output tokens asked mean" in render_run(load_run(run.prefix))
