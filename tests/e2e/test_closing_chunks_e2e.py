"""Closing chunks counted: the simulator puts several tokens in a chunk (speculative decoding) and
sends the last one with empty text and the finish_reason (vLLM's shape when the last token ends
inside a character). The preflight finds that it honours `stream_options.continuous_usage_stats`,
so the run asks for usage on every chunk and counts the closing chunk by it: every record's chunks
and tokens per chunk equal the truth log's. The probe and nothing else is recorded before the
ladder (`run_calibration.jsonl`, phase "calibration"), so the records account for every request
the server counted."""

from __future__ import annotations

import pytest

from llmload.cli import sweep as sweep_command
from llmload.core.files.records import read_records
from llmload.loadgen.transport.server_pages import scrape_metrics
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


def test_multi_token_chunks_ending_in_an_empty_chunk_are_counted_as_the_truth(tmp_path, sim_start):
    sim = sim_start(base_ms=1, accept_len=3, empty_last_text=True)
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("rungs: [1, 3]\nrequests_per_user: 2\nmax_tokens: 40\n")
    argv = ["--host", sim.url, "--run-dir", str(tmp_path / "run"), "--ladder", str(ladder)]
    assert sweep_command.main(argv) == 0
    measured, _ = read_records(tmp_path / "run" / "run_records.jsonl")
    (probe,), _ = read_records(tmp_path / "run" / "run_calibration.jsonl")  # the per-chunk usage probe
    assert (probe.phase, probe.request_id, probe.output_tokens) == ("calibration", "calibration-0", 2)
    truth, _ = load_truth(sim.truth_log)
    assert len(measured) == 1 + 8  # the warm-up and the rungs
    for rec in measured:
        t = truth[rec.request_id]
        assert rec.chunks == len(t["chunk_times"]) and rec.chunk_tokens == t["chunk_tokens"]
        assert rec.output_tokens == t["completion_tokens"] == 40 and max(t["chunk_tokens"]) > 1
    served = scrape_metrics(sim.url + "/metrics")
    generated = sum(v for k, v in served.items() if k.startswith("vllm:generation_tokens_total"))
    assert generated == sum(r.output_tokens for r in [probe, *measured])  # the probe's tokens too
