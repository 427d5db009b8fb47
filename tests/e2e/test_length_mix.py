"""Drawn lengths end to end on the simulator (its truth log): normal(128, 32) inputs and
uniform(16, 64) outputs over 200 requests, each request served exactly its own drawn lengths
(input within a token), the sent mix the asked one (mean within 2 %, KS does not reject at 1 %),
the same seed the same lengths, two processes together the one process's requests, and a
scenario string the same requests as its YAML."""

from __future__ import annotations

import math
from pathlib import Path

from fixtures.length_stats import KS_1PCT, ks_statistic, truncated_normal_cdf, uniform_cdf

from llmload.cli.sweep_run import run_sweep
from llmload.core.config import parse_config
from llmload.core.lengths import Lengths
from llmload.core.records import RequestRecord, read_records
from llmload.sim.truth import load_truth

REQUESTS = 200
LADDER = (
    "rungs: [4]\nrequests_per_user: 50\nwarmup_requests: 0\nseed: 11\n"
    "prompt_tokens: {dist: normal, mean: 128, std: 32, min: 16, max: 512}\n"
    "max_tokens: {dist: uniform, min: 16, max: 64}\n"
)


def mixed_run(tmp_path: Path, *args: str) -> tuple[list[RequestRecord], dict]:
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
    return records, truth


def test_each_request_is_served_its_drawn_lengths_and_the_mix_is_the_asked_one(tmp_path):
    records, truth = mixed_run(tmp_path / "a")
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
    again, _ = mixed_run(tmp_path / "b")
    assert sorted((r.prompt_tokens_asked, r.max_tokens) for r in again) == expected


def test_two_processes_together_send_exactly_the_single_process_sequence(tmp_path):
    one, _ = mixed_run(tmp_path / "one")
    two, _ = mixed_run(tmp_path / "two", "--processes", "2")
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
