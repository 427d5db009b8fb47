"""Server metrics: the family table, per-rung windows on a hand-built scrape file, and a real
locust run against the simulator whose counters must equal the client's tokens and its truth log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.analysis.budget import CostModel, budget_rows, run_points
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.server_metrics import (
    Sample,
    ServerRungMetrics,
    detect_family,
    load_server_metrics,
    metrics_path,
    quantity,
    rung_server_metrics,
    token_warnings,
)
from llmload.analysis.run.window import span_window
from llmload.core.files.records import read_records
from llmload.core.prometheus_text import parse_prometheus
from llmload.core.run_environment import read_environment
from llmload.runner.sweep_run import run_sweep
from llmload.servers.process import free_port
from llmload.sim.truth import load_truth

FIXTURE = REPO / "tests" / "fixtures" / "report_run" / "run"

# excerpts of real /metrics pages (llama.cpp: captured from llama-server with --metrics)
PAGES = {
    "llamacpp": """# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 611
llamacpp:spec_decode_num_drafts_total 10
llamacpp:spec_decode_num_accepted_tokens_total 25
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
""",
    "sglang": """sglang:generation_tokens_total{model_name="m"} 7.5e+06
sglang:num_running_reqs{dp_rank="0",model_name="m"} 3
sglang:num_running_reqs{dp_rank="1",model_name="m"} 5
sglang:num_queue_reqs{model_name="m"} 2
sglang:token_usage{model_name="m"} 0.28
sglang:spec_accept_length{dp_rank="0",model_name="m"} 2.5
sglang:spec_accept_length{dp_rank="1",model_name="m"} 3.5
""",
    "tgi": """tgi_request_generated_tokens_sum 1234
tgi_request_generated_tokens_count 10
tgi_batch_current_size 7
tgi_queue_size 0
""",
    "vllm": """vllm:generation_tokens_total{model_name="m"} 900
vllm:num_requests_running{model_name="m"} 4
vllm:num_requests_waiting{model_name="m"} 0
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
""",
}
EXPECTED = {
    "llamacpp": {
        "generation_tokens": 611,
        "spec_drafts": 10,
        "spec_accepted": 25,
        "running": 2,
        "waiting": 1,
    },
    "sglang": {
        "generation_tokens": 7.5e6,
        "running": 8,
        "waiting": 2,
        "kv_usage": 0.28,
        "accept_len_gauge": 3.0,
    },
    "tgi": {"generation_tokens": 1234, "running": 7, "waiting": 0},
    "vllm": {"generation_tokens": 900, "running": 4, "waiting": 0, "kv_usage": 0.5},  # older kv name
}


@pytest.mark.parametrize("family", sorted(PAGES))
def test_each_family_maps_to_the_common_quantities(family):
    samples = parse_prometheus(PAGES[family])
    assert detect_family(samples) == family
    got = {
        q: v
        for q in ("generation_tokens", "spec_drafts", "spec_accepted", "running", "waiting", "kv_usage")
        + ("accept_len_gauge",)
        if (v := quantity(samples, family, q)) is not None
    }
    assert got == EXPECTED[family]


def test_fixture_rungs_golden():
    """The hand-built scrape file: every counter bracket and gauge mean was set by hand."""
    result = load_run(FIXTURE)
    server = load_server_metrics(FIXTURE, result.iter_records())
    assert server is not None and server.family == "vllm"
    by_rung = {m.rung: m for m in server.rungs}
    assert [(m.generation_tokens, m.client_tokens, m.accept_len) for m in server.rungs] == [
        (999, 999, 3.0),
        (256, 256, 4.0),
        # its steady window 1011-1014 (4 in flight), bracketed by the scrapes at 1009.8 and 1016:
        # the client's tokens that arrived between them (the requests ending at 1014 and 1015)
        (545, 512, pytest.approx(1 + (1260 - 858) / (540 - 397))),
        (170, 170, 2.0),
    ]
    assert (by_rung[1].running, by_rung[1].waiting, by_rung[1].kv_usage) == (4.0, 0.0, pytest.approx(0.1))
    assert by_rung[1].samples == 1 and not any(m.overlap for m in server.rungs)
    assert by_rung[1].generation_tok_s == pytest.approx(545 / (1016 - 1010))  # the bracket in the span
    assert server.run_generation_tokens == 2233
    assert server.warnings == []


def _sample(t: float, tokens: float) -> Sample:
    return Sample(t, {"generation_tokens": tokens})


def test_a_bracket_covering_another_stage_is_flagged_not_warned():
    # one scrape every 5 s: each rung's bracket also covers part of the other rung
    samples = [_sample(0.0, 0), _sample(5.0, 100), _sample(10.0, 250)]
    windows = [span_window(0, 1, 1.0, 6.0), span_window(1, 2, 7.0, 9.0)]
    metrics = rung_server_metrics(samples, windows, {})
    assert [(m.generation_tokens, m.overlap) for m in metrics] == [(250, True), (150, True)]
    assert token_warnings(metrics) == []
    # a scrape in the idle gap between the rungs separates them
    samples.insert(2, _sample(6.5, 120))
    metrics = rung_server_metrics(samples, windows, {})
    assert [(m.generation_tokens, m.overlap) for m in metrics] == [(120, False), (130, False)]


def test_server_counting_fewer_tokens_than_the_client_is_warned():
    m = ServerRungMetrics(0, 4, 3, 900.0, 1024, None, None, None, None, False)
    assert token_warnings([m]) == ["rung01 c4: server generated 900 tokens but the client received 1024"]
    more = ServerRungMetrics(0, 4, 3, 2048.0, 1024, None, None, None, None, False)
    assert "another client" in token_warnings([more])[0]
    assert token_warnings([more], failed_rungs=[0]) == []  # failed requests: tokens generated, not delivered


def test_a_restarted_server_gives_no_delta():
    samples = [_sample(0.0, 500), _sample(10.0, 20)]
    assert rung_server_metrics(samples, [span_window(0, 1, 1.0, 9.0)], {})[0].generation_tokens is None


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory):
    """A real locust run against the simulator (accept_len 4.5, fast steps), scraping every 0.2 s."""
    run = run_sweep(
        run_dir=tmp_path_factory.mktemp("scraped"),
        locust_args=["--rungs", "1,4", "--max-tokens", "256", "--scrape-interval", "0.2"],
        sim={"base_ms": 5, "per_seq_ms": 1, "accept_len": 4.5},
        timeout=120,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run


def test_server_tokens_equal_client_tokens_and_truth(scraped_run):
    records, _ = read_records(scraped_run.records)
    server = load_server_metrics(scraped_run.prefix, records)
    assert server is not None and server.family == "vllm"
    truth, _ = load_truth(scraped_run.truth_log)
    true_tokens = sum(t["completion_tokens"] for t in truth.values())
    client_tokens = sum(r.output_tokens for r in records)  # warm-up included
    calibration, _ = read_records(Path(f"{scraped_run.prefix}_calibration.jsonl"))  # before the ladder
    assert [r.phase for r in calibration] == ["calibration"]  # the per-chunk usage probe
    assert server.run_generation_tokens == client_tokens
    assert client_tokens + sum(r.output_tokens for r in calibration) == true_tokens
    assert [m.rung for m in server.rungs] == [-1, 0, 1]
    lines = (json.loads(ln) for ln in Path(scraped_run.truth_log).read_text().splitlines())
    steps = [s for s in lines if s["type"] == "step"]
    for m in server.rungs:
        assert not m.overlap
        if m.rung < 1:  # the warm-up and c1 (one request: its whole span), bracketed by boundary scrapes
            assert m.generation_tokens == m.client_tokens
            continue
        # c4's steady window is bracketed by the periodic scrapes inside the rung: the server's tokens
        # are the truth's steps that ended between them, the client's those that arrived between
        # them, within one step's tokens (a step's tokens reach the client after the scrape)
        inside = [s["tokens"] for s in steps if m.bracket[0] < s["t_end"] <= m.bracket[1]]
        one_step = max(s["tokens"] for s in steps)
        assert abs(m.generation_tokens - sum(inside)) <= one_step
        assert abs(m.generation_tokens - m.client_tokens) <= one_step
    assert server.warnings == []
    lines = [json.loads(ln) for ln in metrics_path(scraped_run.prefix).read_text().splitlines()]
    assert all("samples" in ln for ln in lines)
    assert [ln["t"] for ln in lines] == sorted(ln["t"] for ln in lines)


def test_accept_len_from_counters_matches_the_configured_one(scraped_run):
    result = load_run(scraped_run.prefix)
    server = load_server_metrics(scraped_run.prefix, result.iter_records())
    for m in server.measured:
        assert m.accept_len == pytest.approx(4.5, rel=0.05)


def test_budget_uses_the_scraped_accept_len(scraped_run):
    """The budget's step time from the sweep and the scraped accept length agrees with the
    simulator's own step durations (truth log) at the same batch size."""
    points = run_points(str(scraped_run.prefix))
    assert all(p.accept_len == pytest.approx(4.5, rel=0.05) for p in points)
    rows = budget_rows(points, CostModel(constant_ms=0.5), None, 10.0)
    lines = map(json.loads, Path(scraped_run.truth_log).read_text().splitlines())
    truth_steps = [s for s in lines if s["type"] == "step"]
    for row in rows:
        steps = [(s["t_end"] - s["t_start"]) * 1000 for s in truth_steps if s["batch"] == row.conc]
        assert row.step_ms == pytest.approx(sum(steps) / len(steps), rel=0.10)


def test_environment_recorded_at_run_time(scraped_run):
    env = read_environment(scraped_run.prefix)
    assert env is not None
    assert env["packages"]["locust"].startswith("2.")
    assert env["cpu_count"] >= 1 and env["cpu_model"]
    assert env["target"].startswith("http://127.0.0.1:")
    assert env["server_version"] is None  # the simulator exposes no version endpoint


def test_unanswered_metrics_url_leaves_no_file_and_the_run_succeeds(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    run = run_sweep(
        run_dir=tmp_path,
        locust_args=["--rungs", "1", "--max-tokens", "8", "--warmup-requests", "0", "--metrics-url", url],
        sim={"base_ms": 2, "per_seq_ms": 1, "accept_len": 1},
        timeout=120,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    assert not metrics_path(run.prefix).exists()
    assert f"--metrics-url {url} does not answer" in run.log.read_text()
    assert read_environment(run.prefix) is not None
