"""The figures per session (llmload.analysis.sessions) from hand-made records whose figures are
worked out by hand in each test: makespans, turns, tool calls, sub-agents, the model / tool / other
shares, the sessions cut apart (failed, unended); and where the user reads them: the session
table beside the per-turn table, the json rows, the csv columns, the HTML report; the valid share
of tool calls beside tok/s."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.runs import make_record

from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import RungTally
from llmload.analysis.sessions.figures import SessionEnds, session_figures, top_level
from llmload.analysis.sessions.intervals import length, outside, union
from llmload.core.config import SessionConfig, parse_config
from llmload.core.files.run_files import RunFiles
from llmload.loadgen.webui.live_sweep import LiveSweep
from llmload.output.html_report import render_html
from llmload.output.run_table import render_run
from llmload.output.table import render


def turn(session: str, n: int, start: float, end: float, **kw):
    rid = f"{session}#{n}-{start}"
    return make_record(start, end, 8, 0.1, session=session, turn=n, endpoint="chat", request_id=rid, **kw)


def test_intervals_union_and_the_time_outside_others():
    assert union([(3.0, 4.0), (0.0, 1.0), (0.5, 2.0), (2.0, 2.5), (5.0, 5.0)]) == [(0.0, 2.5), (3.0, 4.0)]
    assert length(union([(0.0, 1.0), (0.5, 2.0)])) == 2.0
    covered = [(1.0, 2.0), (3.0, 4.0)]
    assert outside([(0.0, 5.0)], covered) == 3.0  # 5 s less the 2 s covered
    assert outside([(1.5, 3.5), (1.2, 1.4)], covered) == pytest.approx(1.0)  # 2.0-3.0 alone is outside
    assert outside([], covered) == 0.0 and outside([(0.0, 1.0)], []) == 1.0


def test_top_level_ids():
    assert top_level("a") == "a" and top_level("a/2") == "a" and top_level("a/2/1") == "a"


# rung 0 (ends: 3 turns): session a, three turns 0-1, 3-4, 5-7 (2 tool calls in turn 2);
# session b, three turns 10-12, 12-13 and 14-15, its sub-agent b/1's three 11.5-12, 12.2-12.8, 13-13.5:
# makespan 5, model time 10-13.5 and 14-15;
# session c: its second turn failed (cut: failed); session d: 2 of 3 turns (cut: unended)
RUNG0 = [
    turn("a", 1, 0.0, 1.0),
    turn("a", 2, 3.0, 4.0, tool_calls=2, tool_calls_invalid=1),
    turn("a", 3, 5.0, 7.0, tool_wait_s=1.5),
    turn("b", 1, 10.0, 12.0, tool_calls=1),
    turn("b/1", 1, 11.5, 12.0),
    turn("b/1", 2, 12.2, 12.8),
    turn("b/1", 3, 13.0, 13.5),
    turn("b", 2, 12.0, 13.0, tool_wait_s=0.5),
    turn("b", 3, 14.0, 15.0),
    turn("c", 1, 20.0, 21.0),
    turn("c", 2, 22.0, 23.0, outcome="timeout"),
    turn("d", 1, 30.0, 31.0),
    turn("d", 2, 32.0, 33.0, tool_calls=1),
]


def test_a_rungs_sessions_by_hand():
    (figures,) = session_figures(RUNG0, SessionEnds(turns=3)).values()
    assert (figures.sessions, figures.finished, figures.failed, figures.unended) == (4, 2, 1, 1)
    # makespans 7 (a) and 5 (b): numpy-style percentiles between them
    assert figures.makespan_s == {
        "mean": 6.0,
        "p50": 6.0,
        "p90": pytest.approx(6.8),
        "p99": pytest.approx(6.98),
    }
    assert (figures.turns_mean, figures.turns_max) == (3.0, 3)
    assert (figures.tool_calls_mean, figures.tool_calls_max) == (1.5, 2)  # d's call: a cut session's
    assert (figures.sub_agents_mean, figures.sub_agents_max) == (0.5, 1)
    # model time: a 1 + 1 + 2 = 4 of 7; b 10-13.5 and 14-15 = 4.5 of 5; tool waits: a's turn 3
    # waited 1.5 s (3.5-5: 1 s of it after turn 2's end), b's turn 2 0.5 s (11.5-12: model time)
    assert figures.model_share == pytest.approx(8.5 / 12) and figures.tool_share == pytest.approx(1.0 / 12)
    assert figures.other_share == pytest.approx(2.5 / 12)


def test_what_ends_a_session():
    # without the turn limit (a records file alone) a session whose last turn completed ended
    (unknown,) = session_figures(RUNG0, SessionEnds()).values()
    assert (unknown.finished, unknown.failed, unknown.unended) == (3, 1, 0)
    # a failed attempt retried: the last attempt of the turn counts
    retried = [turn("e", 1, 0.0, 1.0, outcome="http_500"), turn("e", 1, 1.5, 2.0)]
    (figures,) = session_figures(retried, SessionEnds(turns=1)).values()
    assert figures.finished == 1 and figures.makespan_s is not None and figures.makespan_s["p50"] == 2.0
    # a sub-agent cut cuts its tree
    cut = [turn("g", 1, 0.0, 1.0), turn("g/1", 1, 0.0, 0.5, outcome="timeout")]
    assert session_figures(cut, SessionEnds(turns=1))[0].failed == 1
    assert SessionEnds.of(SessionConfig(turns=4)) == SessionEnds(turns=4)
    # agent sessions: a reply without a tool call is a final answer; a tool call asks for more
    agent = SessionEnds.of(SessionConfig(turns=5, agent=True, sub_agent_turns=2))
    assert agent.ended(turn("f", 2, 0.0, 1.0)) and not agent.ended(turn("f", 2, 0.0, 1.0, tool_calls=1))
    assert agent.ended(turn("f", 5, 0.0, 1.0, tool_calls=1))  # the turn limit
    assert agent.ended(turn("f/1", 2, 0.0, 1.0, tool_calls=1))  # a sub-agent's own limit
    assert not agent.ended(turn("f/1", 1, 0.0, 1.0, tool_calls=1))
    assert SessionEnds.of(None) == SessionEnds()


def test_figures_per_rung_and_only_measured_session_records():
    records = [
        *RUNG0,
        turn("z", 1, 0.0, 9.0, phase="warmup", rung=-1),
        make_record(0.0, 1.0, 8, 0.1),  # not a session's
        turn("h", 1, 40.0, 41.5, rung=1, users=2),
    ]
    figures = session_figures(records, SessionEnds(turns=1))
    assert sorted(figures) == [0, 1] and figures[1].users == 2 and figures[1].makespan_s["p99"] == 1.5


def write_run(tmp: Path, records, turns: int) -> Path:
    prefix = tmp / "run"
    Path(f"{prefix}_records.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    Path(f"{prefix}_run.json").write_text(
        json.dumps({"stages": [], "config": {"endpoint": "chat", "sessions": {"turns": turns}}})
    )
    return prefix


def test_the_table_json_csv_and_html_show_the_figures(tmp_path):
    result = load_run(write_run(tmp_path, RUNG0, 3), with_metrics=True)
    text = render_run(result)
    turns_at, sessions_at = text.index("sessions, by rung and turn"), text.index("sessions, by rung (")
    assert turns_at < sessions_at  # beside the per-turn table, after it
    header, _, line = text[sessions_at:].splitlines()[1:4]
    assert header.split() == [
        "rung", "sessions", "finished", "failed", "unended", "makespan_p50_s", "makespan_p90_s",
        "makespan_p99_s", "turns", "turns_max", "tool_calls", "tool_calls_max",
        "sub_agents", "sub_agents_max", "model_%", "tool_%", "other_%",
    ]  # fmt: skip
    assert line.split() == [
        "rung01", "c1", "4", "2", "1", "1", "6.00", "6.80", "6.98", "3.0", "3", "1.5", "2", "0.5", "1",
        "70.8", "8.3", "20.8",
    ]  # fmt: skip
    (row,) = json.loads(render_run(result, "json"))
    assert row["sessions"]["makespan_s"]["p90"] == pytest.approx(6.8) and row["sessions"]["unended"] == 1
    (flat,) = csv.DictReader(io.StringIO(render_run(result, "csv")))
    assert flat["session_makespan_p99_s"] == "6.98" and flat["sessions_failed"] == "1"
    assert flat["session_model_%"] == "70.8"
    page = render_html(result, {}, None, None)
    assert "<h2>Sessions</h2>" in page and "makespan_p50_s" in page


def test_the_tokens_tab_shows_them_as_the_table_does(tmp_path):
    config = parse_config({"endpoint": "chat", "stream": True, "sessions": {"turns": 3}}, "ladder.yaml")
    run = SimpleNamespace(progress=[], current=None, files=RunFiles(tmp_path / "run"), config=config)
    live = LiveSweep()
    for rec in RUNG0:
        live.add(run, rec)
    (cells,) = live.table(active=False)
    shown = ("sessions_finished", "session_makespan_p50_s", "session_makespan_p99_s", "calls_valid_pct")
    assert [cells[k] for k in shown] == ["2", "6.00", "6.98", "75.0"]  # 4 calls, 1 invalid
    assert cells["valid_pct"] == "-"  # no answer checked against a schema


def test_runs_without_sessions_or_fan_out_show_no_such_columns(tmp_path):
    plain = load_run(write_run(tmp_path, [make_record(0.0, 1.0, 8, 0.1)], 3))
    assert plain.sessions == {} and "sessions" not in render_run(plain, "table")
    assert "sessions" not in json.loads(render_run(plain, "json"))[0]
    alone = [r for r in RUNG0 if r.session != "b/1"]
    text = render_run(load_run(write_run(tmp_path, alone, 3)))
    assert "makespan_p50_s" in text and "sub_agents" not in text


def test_the_valid_share_of_tool_calls_beside_tok_s():
    tally = RungTally(0, 1)
    tally.add(turn("a", 1, 0.0, 1.0, tool_calls=3, tool_calls_invalid=1))
    tally.add(turn("a", 2, 1.0, 2.0, tool_calls=1, tool_calls_invalid=0))
    tally.add(turn("a", 3, 2.0, 3.0))
    row = tally.row()
    assert row.tool_calls == {"requests": 2, "calls": 4, "parallel": 1, "invalid": 1, "valid_share": 0.75}
    header, line = render([row]).splitlines()[:2]
    assert header.split()[:4] == ["conc", "agg_tok/s", "per_req_tok/s", "calls_valid_%"]
    assert line.split()[3] == "75.0"
    assert "calls_valid_%: tool calls whose arguments are a JSON object" in render([row])
    assert json.loads(render([row], "json"))[0]["tool_calls"]["valid_share"] == 0.75
    (flat,) = csv.DictReader(io.StringIO(render([row], "csv")))
    assert flat["calls_valid_%"] == "75.0"
    plain = RungTally(0, 1)
    plain.add(turn("a", 1, 0.0, 1.0))
    assert plain.row().tool_calls is None and "calls_valid_%" not in render([plain.row()])
