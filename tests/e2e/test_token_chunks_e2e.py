"""Every token chunk is counted, the empty-text last one too, against the simulator's truth log.

vLLM sends a stream's last token with empty text and the finish_reason when that token's bytes
end inside a character (an emoji); usage counts it. The simulator's `empty_last_text` sends
every stream's last chunk that way, and its truth log says which chunks carried tokens. With
one token a chunk, each request must then have one token chunk per output token, one ITL value
per token after the first (as vLLM's own benchmark), and no "per chunk" label on its ITL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

MAX_TOKENS = 16


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_an_empty_text_last_token_is_a_token_chunk(tmp_path: Path, endpoint: str) -> None:
    config = tmp_path / "ladder.yaml"
    config.write_text(f"rungs: [1, 2]\nrequests_per_user: 3\nwarmup_requests: 0\nmax_tokens: {MAX_TOKENS}\n")
    sweep = run_sweep(
        run_dir=tmp_path,
        endpoint=endpoint,
        locust_args=["--ladder", str(config)],
        sim={"accept_len": 1, "base_ms": 5, "per_seq_ms": 1, "empty_last_text": True},
        timeout=120,
    )
    assert sweep.returncode == 0, sweep.log.read_text()[-3000:]
    truth, _ = load_truth(sweep.truth_log)
    records, skipped = read_records(sweep.records)
    measured = [r for r in records if r.phase == "measure"]
    assert not skipped and len(measured) == 9 and all(r.ok for r in measured)
    for rec in measured:
        served = truth[rec.request_id]
        assert sum(served["chunk_tokens"]) == MAX_TOKENS == rec.output_tokens
        assert rec.chunks == len(served["chunk_times"]) == MAX_TOKENS, "the empty last chunk counted"
        assert len(itl_ms(rec)) == MAX_TOKENS - 1
    for rung in tally_rungs(measured):
        assert not rung.metrics().itl_per_chunk, "every chunk was one token: no 'per chunk' label"
