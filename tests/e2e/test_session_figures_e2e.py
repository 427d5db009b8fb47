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
from llmload.analysis.sessions.intervals import length, outside, union
from llmload.core.files.records import read_records
from llmload.core.stats import mean, percentile
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

# a turn is ~25 one-token steps of ~4 ms (~0.1 s); with 0.3 s of thinking between turns a
# session of 4 turns lasts ~1.3 s: 1 % is 13 ms, several times the client's lag behind the server
SIM = {"accept_len": 1, "base_ms": 4, "per_seq_ms": 0.2}
LATE_S = 0.060  # a turn is sent after its wait at most this much later (tests/e2e/test_agent_traces_e2e.py)
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


# Weka agentic traces (trace replay, llmload.core.workload.conversations): conversations whose turn 1
# spawns a sub-agent of two requests, the next turn waiting for it; every wait before a turn is the
# trace's recorded one (`tool_wait_s`), so the sessions' time off the model is those waits; replies
# of 25-30 tokens (~0.1 s each) keep the client's own ms per request under 2 % of the model's time
def weka_request(t: float, kind: str, tokens_in: int, out: int) -> dict:
    return {"t": t, "type": kind, "model": "m", "in": tokens_in, "out": out, "hash_ids": [], "api_time": 0.1}


def weka(i: int) -> dict:
    sub = [weka_request(0.0, "n", 40, 25), weka_request(0.25, "n", 50, 25)]
    spawn = {"t": 0.3, "type": "subagent", "agent_id": "agent_1", "duration_ms": 500, "requests": sub}
    last = weka_request(1.0 + 0.05 * i, "s", 150, 30)
    return {"id": f"w{i}", "block_size": 64, "requests": [weka_request(0.0, "s", 100, 30), spawn, last]}


def test_fanned_out_sessions_time_on_the_model_and_on_tools_is_the_simulators(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(weka(i)) + "\n" for i in range(6)))
    ladder = tmp_path / "trace.yaml"
    ladder.write_text(
        f"mode: trace\ntrace_file: {trace}\nendpoint: completions\nmax_concurrency: 12\nwarmup_requests: 0\n"
    )
    run = run_sweep(run_dir=tmp_path, locust_args=["--ladder", str(ladder)], sim=SIM, timeout=120)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    truth = [t for t in load_truth(run.truth_log)[0].values() if t["session"] is not None]
    trees: dict[str, list[dict]] = {}
    for served in truth:  # grouped by the simulator's own X-Session-Id
        trees.setdefault(top_level(served["session"]), []).append(served)
    (figures,) = load_run(run.prefix).sessions.values()
    assert (figures.sessions, figures.finished, figures.sub_agents_max, figures.turns_max) == (6, 6, 1, 2)
    makespans = [max(t["closed"] for t in tree) - min(t["received"] for t in tree) for tree in trees.values()]
    assert figures.makespan_s is not None
    for q in (50.0, 90.0, 99.0):
        assert figures.makespan_s[f"p{q:g}"] == pytest.approx(percentile(makespans, q), rel=0.01)
    # the truth's time off the model: the gaps between a tree's requests, each a recorded wait (a
    # tool's: `tool_wait_s`; or the sub-agent's spawn, 0.3 - 0.1 s after turn 1: not a tool's) plus
    # the client's lag in sending the next (at most LATE_S)
    busy = sum(length(union([(t["received"], t["closed"]) for t in tree])) for tree in trees.values())
    gaps = sum(makespans) - busy
    total = figures.makespan_s["mean"] * figures.finished
    assert figures.model_share == pytest.approx(busy / sum(makespans), rel=0.02)
    waits = sum(r.tool_wait_s or 0.0 for r in records if r.phase == "measure")
    assert figures.tool_share * total == pytest.approx(waits, rel=1e-6)  # no wait overlaps a request here
    spawns = 0.2 * len(trees)
    assert waits + spawns <= gaps <= waits + spawns + 3 * len(trees) * LATE_S  # 3 gaps a tree


# agent sessions (sessions.agent): tool calls answered after a constant tool latency until a final
# answer or the turn limit, turn 1's tool call fanning out 4 sub-agents of at most 2 turns
AGENTS = """\
endpoint: chat
rungs: [1, 2]
max_tokens: 200
warmup_requests: 0
tools: weather
parallel_tool_calls: false
sessions: {agent: true, turns: 4, per_user: 3, user_tokens: 30, tool_latency_s: 0.2, fan_out: 4,
  fan_out_turn: 1, sub_agent_turns: 2}
"""
TOOL_S = 0.2


def test_agent_sessions_figures_are_the_simulators(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(AGENTS)
    run = run_sweep(
        run_dir=tmp_path / "run",
        locust_args=["--ladder", str(path)],
        sim={**SIM, "auto_tool_share": 0.7},
        timeout=180,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records = [r for r in read_records(run.records)[0] if r.phase == "measure"]
    truth = load_truth(run.truth_log)[0]
    assert all(r.ok for r in records) and {r.tool_wait_s for r in records} <= {None, TOOL_S}
    result = load_run(run.prefix)
    for rung, figures in result.sessions.items():
        mine = [r for r in records if r.rung == rung]
        trees: dict[str, list[dict]] = {}
        for rec in mine:  # the session as the simulator received it (X-Session-Id)
            trees.setdefault(top_level(truth[rec.request_id]["session"]), []).append(truth[rec.request_id])
        # every session ended (a final answer, or its turn limit): none cut
        assert (
            (figures.sessions, figures.finished)
            == (len(trees), len(trees))
            == (3 * (rung + 1), 3 * (rung + 1))
        )
        makespans = [
            max(t["closed"] for t in tree) - min(t["received"] for t in tree) for tree in trees.values()
        ]
        assert figures.makespan_s is not None
        for q in (50.0, 90.0, 99.0):
            assert figures.makespan_s[f"p{q:g}"] == pytest.approx(percentile(makespans, q), rel=0.01)
        # turns, tool calls and sub-agents per session as the simulator counts them
        turns = [sum(t["session"] == name for t in tree) for name, tree in trees.items()]
        calls = [sum(len(t["tool_calls"] or []) for t in tree) for tree in trees.values()]
        subs = [len({t["session"] for t in tree if "/" in t["session"]}) for tree in trees.values()]
        assert (figures.turns_mean, figures.turns_max) == (pytest.approx(mean(turns)), max(turns))
        assert (figures.tool_calls_mean, figures.tool_calls_max) == (pytest.approx(mean(calls)), max(calls))
        assert figures.sub_agents_max == max(subs) and set(subs) <= {0, 4}
        # the time on tools: each turn's tool latency, placed before the turn the simulator received,
        # outside the requests the simulator served; the truth's gaps hold the waits and the lag
        waits = {r.request_id: r.tool_wait_s for r in mine if r.tool_wait_s}
        total = figures.makespan_s["mean"] * figures.finished
        busy = [union([(t["received"], t["closed"]) for t in tree]) for tree in trees.values()]
        tool = sum(
            outside([(t["received"] - waits[t["id"]], t["received"]) for t in tree if t["id"] in waits], b)
            for tree, b in zip(trees.values(), busy, strict=True)
        )
        assert figures.tool_share * total == pytest.approx(tool, rel=0.02, abs=0.005)
        assert figures.model_share * total == pytest.approx(sum(map(length, busy)), rel=0.02)
        gaps = sum(makespans) - sum(map(length, busy))
        assert tool <= gaps
