"""The figures per session of a real sweep against the simulator, held to its truth log: each
rung's session makespan percentiles against the ones computed from what the simulator saw (per
session, its first request `received` to its last `closed`, when the stream's closing messages
were written; sessions grouped by their top-level id), within 1 %, and the model's share of the
sessions' time; the valid share of the structured replies per rung against the simulator's own
account of the replies it spoiled (`--invalid-share`) (the valid share of tool calls:
tests/e2e/test_structured_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.analysis.run.postprocess import load_run
from llmload.analysis.sessions.figures import top_level
from llmload.core.files.records import read_records
from llmload.core.stats import percentile
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

# a turn is ~25 one-token steps of ~4 ms (~0.1 s); with 0.3 s of thinking between turns a
# session of 4 turns lasts ~1.3 s: 1 % is 13 ms, several times the client's lag behind the server
SIM = {"accept_len": 1, "base_ms": 4, "per_seq_ms": 0.2}
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "score": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["title", "score"],
}
LADDER = """\
endpoint: chat
rungs: [1, 3]
max_tokens: 400
warmup_requests: 0
response_format: json_schema
response_schema: schema.json
sessions:
  turns: 4
  per_user: 3
  user_tokens: 32
  think_time_s: 0.3
"""


def sweep(tmp: Path, ladder: str, **sim: object):
    (tmp / "schema.json").write_text(json.dumps(SCHEMA))
    path = tmp / "ladder.yaml"
    path.write_text(ladder)
    run = run_sweep(
        run_dir=tmp / "run",
        endpoint="chat",
        locust_args=["--ladder", str(path)],
        sim={**SIM, **sim},
        timeout=180,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, skipped = read_records(run.records)
    assert not skipped and records and all(r.ok for r in records)
    assert run.truth_log is not None
    return run, [r for r in records if r.phase == "measure"], load_truth(run.truth_log)[0]


@pytest.fixture(scope="module")
def session_run(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("sessions"), LADDER, invalid_share=0.3)


def truth_makespans(records, truth) -> dict[int, list[float]]:
    """Each rung's session makespans as the simulator saw them: per top-level session, its first
    request received to its last closed (the session of each request: its record's)."""
    spans: dict[tuple[int, str], list[float]] = {}
    for rec in records:
        served = truth[rec.request_id]
        assert rec.session is not None
        spans.setdefault((rec.rung, top_level(rec.session)), []).extend(
            [served["received"], served["closed"]]
        )
    out: dict[int, list[float]] = {}
    for (rung, _), times in spans.items():
        out.setdefault(rung, []).append(max(times) - min(times))
    return out


def test_the_makespan_percentiles_per_rung_are_the_simulators(session_run):
    run, records, truth = session_run
    result = load_run(run.prefix)
    expected = truth_makespans(records, truth)
    assert sorted(result.sessions) == sorted(expected) == [0, 1]
    for rung, figures in result.sessions.items():
        sessions = 3 * (1 if rung == 0 else 3)
        assert (figures.sessions, figures.finished, figures.failed, figures.unended) == (
            sessions,
            sessions,
            0,
            0,
        )
        assert figures.turns_mean == figures.turns_max == 4
        assert figures.makespan_s is not None
        for q in (50.0, 90.0, 99.0):
            truth_q = percentile(expected[rung], q)
            assert figures.makespan_s[f"p{q:g}"] == pytest.approx(truth_q, rel=0.01)
        # the model's share: the turns' time of the session, the rest thinking (3 x 0.3 s)
        busy = sum(
            truth[r.request_id]["closed"] - truth[r.request_id]["received"] for r in records if r.rung == rung
        )
        assert figures.model_share == pytest.approx(busy / sum(expected[rung]), rel=0.02)
        assert figures.sub_agents_max is None
    text = render_run(result)
    assert "sessions, by rung (" in text and "makespan_p99_s" in text


def test_the_valid_share_of_structured_replies_per_rung_is_the_simulators(session_run):
    run, records, truth = session_run
    result = load_run(run.prefix)
    for row in result.rows:
        sent_valid = [truth[r.request_id]["valid"] for r in records if r.rung == row.rung]
        assert row.structured is not None and row.structured["checked"] == len(sent_valid)
        assert row.structured["valid_share"] == sum(sent_valid) / len(sent_valid)
    assert {truth[r.request_id]["valid"] for r in records} == {True, False}  # both kinds were sent
    assert "valid_%" in render_run(result)
