"""The sweep end to end against a real llama.cpp server with a real model (SmolLM2-135M).

A real `locust` process runs the ladder 1, 2, 4; the truth here is the server's own counter
`llamacpp:tokens_predicted_total`, which must rise by exactly the tokens the sweep counted.
"""

from __future__ import annotations

import pytest
from fixtures.real_runs import sent_tokens

from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.loadgen.run.precision_stop import MIN_PER_USER
from llmload.loadgen.transport.server_pages import scrape_metrics
from llmload.runner.sweep_run import run_sweep

pytestmark = pytest.mark.real

MAX_TOKENS = 32
PREDICTED = "llamacpp:tokens_predicted_total"


@pytest.fixture(scope="module")
def real_sweep(llama_server, tmp_path_factory):
    """Held rungs (the default), each capped at 20 s: on a loaded machine the one-thread server's
    rate moves enough that +-5 % took the 120 s cap at c1 and c2 (CI, 2026-12-07)."""
    before = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    folder = tmp_path_factory.mktemp("real-sweep")
    ladder = folder / "ladder.yaml"
    ladder.write_text(f"rungs: [1, 2, 4]\nmax_tokens: {MAX_TOKENS}\nprecision_max_s: 20\n")
    run = run_sweep(
        host=llama_server.url,
        run_dir=folder / "run",
        locust_args=["--ladder", str(ladder), "--scrape-interval", "0"],
        timeout=300,
    )
    after = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    assert run.returncode == 0, run.log.read_text()[-3000:]
    return run, after - before


def test_every_request_decodes_exactly_max_tokens(real_sweep):
    run, _ = real_sweep
    records, skipped = read_records(run.records)
    assert not skipped
    measured = [r for r in records if r.phase == "measure"]
    assert len(measured) >= MIN_PER_USER * (1 + 2 + 4)  # held rungs (the default): until +-5 % or a cap
    for rec in records:
        assert rec.ok, (rec.outcome, rec.error)
        assert rec.output_tokens == MAX_TOKENS  # ignore_eos honoured
        assert not rec.tokens_estimated  # usage read from llama.cpp's last content chunk
        assert rec.finish_reason == "length"
        assert rec.chunks == MAX_TOKENS  # its closing `text: ""` chunk is not a token
        assert rec.t_start < rec.t_first <= rec.t_end  # TTFT and E2EL positive and ordered


def test_tokens_counted_equal_the_servers_counter(real_sweep):
    run, predicted_delta = real_sweep
    assert sent_tokens(run.records) == predicted_delta  # warm-up and the per-chunk usage probe included


def test_sweep_table_on_the_real_model(real_sweep):
    run, _ = real_sweep
    result = load_run(run.prefix, with_metrics=True)
    assert [row.conc for row in result.rows] == [1, 2, 4]
    assert [row.tokens for row in result.rows] == [MAX_TOKENS * row.requests for row in result.rows]
    assert all(row.requests >= MIN_PER_USER * row.conc for row in result.rows)
    assert all(row.failures == 0 and row.agg_tok_s > 0 for row in result.rows)
    assert result.warnings == []  # Locust's CSVs agree with the records


def test_chat_endpoint_on_the_real_server(llama_server, tmp_path):
    """llama.cpp's chat stream differs: a role-only first delta (content null), usage only on a
    separate `choices: []` chunk when include_usage is asked."""
    before = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    run = run_sweep(
        host=llama_server.url,
        run_dir=tmp_path,
        endpoint="chat",
        locust_args=["--rungs", "1,2", "--requests-per-user", "1", "--max-tokens", str(MAX_TOKENS)]
        + ["--scrape-interval", "0"],
        timeout=300,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    assert sent_tokens(run.records) == scrape_metrics(llama_server.metrics_url)[PREDICTED] - before
    for rec in records:
        assert rec.ok and rec.output_tokens == MAX_TOKENS and not rec.tokens_estimated
        assert rec.t_start < rec.t_first <= rec.t_first_content <= rec.t_end
