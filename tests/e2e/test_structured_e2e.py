"""Requests that carry tools and a response_format, through a real sweep against the simulator:
what the server was sent (its truth log: a tool call or JSON for every request), replies that stop
on their own without failing token reconciliation, and the valid share per rung against the
simulator's own account of which replies it sent invalid (`--invalid-share`, drawn from its seed),
and so the valid share of the tool calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.output.table import render
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SIM = {"base_ms": 2, "per_seq_ms": 0.2}
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "score": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["title", "score"],
}


def sweep(tmp: Path, ladder: str, **sim: object):
    (tmp / "schema.json").write_text(json.dumps(SCHEMA))
    path = tmp / "ladder.yaml"
    path.write_text(ladder)
    run = run_sweep(run_dir=tmp / "run", locust_args=["--ladder", str(path)], sim={**SIM, **sim}, timeout=120)
    assert run.returncode == 0, run.log.read_text()[-3000:]  # replies stop early: not a reconciliation error
    records, skipped = read_records(run.records)
    assert not skipped and records and all(r.ok for r in records)
    assert run.truth_log is not None
    return run, [r for r in records if r.phase == "measure"], load_truth(run.truth_log)[0]


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_the_valid_share_per_rung_is_the_simulators(tmp_path, endpoint):
    ladder = (
        f"endpoint: {endpoint}\nrungs: [1, 4]\nrequests_per_user: 8\nmax_tokens: 400\nunique_prompts: true\n"
        "warmup_requests: 0\nresponse_format: json_schema\nresponse_schema: schema.json\n"
    )
    run, records, truth = sweep(tmp_path, ladder, invalid_share=0.3)
    for rec in records:
        served = truth[rec.request_id]
        assert served["structured"] == "json" and served["finish_reason"] == "stop"
        assert rec.structured and rec.reply_valid is served["valid"]  # request by request
    rows = load_run(run.prefix).rows
    for row in rows:
        mine = [truth[r.request_id]["valid"] for r in records if r.rung == row.rung]
        assert row.structured is not None and row.structured["checked"] == len(mine)
        assert row.structured["valid_share"] == sum(mine) / len(mine)
        assert row.structured["stopped"] == len(mine)  # every JSON answer ended before max_tokens
    shares = [truth[r.request_id]["valid"] for r in records]
    assert 0.4 <= sum(shares) / len(shares) <= 0.95  # the configured 30 % invalid, drawn
    assert "valid_%" in render(rows)


def test_tools_are_sent_and_answered_with_tool_calls(tmp_path):
    ladder = (
        "endpoint: chat\nrungs: [2]\nrequests_per_user: 8\nmax_tokens: 400\nwarmup_requests: 0\n"
        "unique_prompts: true\ntools: weather\ntool_choice: required\nparallel_tool_calls: false\n"
    )
    run, records, truth = sweep(tmp_path, ladder, invalid_share=0.5)
    for rec in records:
        served = truth[rec.request_id]
        assert served["structured"] == "tool_calls" and len(served["tool_calls"]) == 1
        assert served["tool_calls"][0]["name"] in ("get_weather", "get_forecast")
        assert rec.output_tokens == served["completion_tokens"] < 400 and rec.finish_reason == "tool_calls"
        assert rec.structured and rec.reply_valid is None  # no response_format: no answer to check
        # the client's reading of the calls (llmload.loadgen.stream) against what was sent
        assert rec.chunks == len(served["chunk_times"]) and rec.tool_calls == 1
        assert rec.tool_calls_invalid == (0 if served["valid"] else 1)
    # both kinds were sent: 16 draws at 50 %, all alike 3 times in 100,000 runs (8 at 40 % failed CI once)
    assert {truth[r.request_id]["valid"] for r in records} == {True, False}
    (row,) = load_run(run.prefix).rows
    assert row.structured is not None and row.structured["stopped"] == len(records)
    assert f"stopped before max_tokens: rung01 c2 {len(records)} of {len(records)}" in render([row])
    # the valid share of the calls beside tok/s: of one call a reply, those the simulator sent valid
    sent_valid = sum(truth[r.request_id]["valid"] for r in records)
    assert row.tool_calls is not None and row.tool_calls["calls"] == len(records)
    assert row.tool_calls["valid_share"] == sent_valid / len(records)
    assert "calls_valid_%" in render([row])
