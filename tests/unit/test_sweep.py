"""Sweep rows, their formatting and the sweep_table script, against hand-computed figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO
from fixtures.runs import FIXTURES, make_record, run_records

from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.files.records import read_records, write_records
from llmload.output.table import render

SCRIPT = REPO / "scripts" / "sweep_table.py"


def rows_of(records, **kw):
    return sweep_rows(tally_rungs(records), **kw)


def test_warmup_excluded_and_rungs_kept_apart_by_index():
    rows = rows_of(run_records())
    assert [(r.rung, r.conc) for r in rows] == [(0, 1), (1, 4), (2, 4)]


def test_rung_with_a_failure():
    row = rows_of(run_records())[1]
    # the steady window: 4 in flight (the failed request counts) from 1011 to 1014 (the first end)
    assert row.wall_s == pytest.approx(3.0)
    assert row.window["ramp_s"] == pytest.approx(1.0) and row.window["drain_s"] == pytest.approx(6.0)
    assert row.tokens == 768  # 3 x 256; the failure's 37 tokens are not in it
    # no chunk times: a request's tokens arrive at its end; only 1010-1014's end is in the window
    assert row.agg_tok_s == pytest.approx(256 / 3)
    assert (row.window["ramp_tokens"], row.window["tokens"], row.window["drain_tokens"]) == (0, 256, 512)
    # per request, every one overlapping the window: 256/4 = 64, 256/8 = 32, 256/4 = 64 -> mean 160/3
    assert row.per_req_tok_s == pytest.approx(53.333333)
    assert row.ttft_p50_ms == pytest.approx(400.0)
    assert (row.requests, row.failures, row.partial_tokens) == (4, 1, 37)
    assert row.failures_by_kind == {"http_500": 1}
    assert not row.estimated and not row.partial


def test_estimated_and_partial_flags():
    rows = rows_of(run_records(), requests_per_user=1)
    assert [r.estimated for r in rows] == [False, False, True]
    # rung 2 has 2 of the 4 * 1 expected requests
    assert [r.partial for r in rows] == [False, False, True]
    assert [r.partial for r in rows_of(run_records(), partial_rungs={0})] == [True, False, False]
    assert rows[2].agg_tok_s == pytest.approx(42.5)  # 170 tokens / 4 s
    assert rows[2].per_req_tok_s == pytest.approx(35.0)  # mean(100/2, 70/3.5)


def seed_records():
    """The seed's conc 1 and conc 10 rungs: 256 tokens in 1.8866 s; ten requests of 4.8 s, one of
    them starting 0.159 s late, so the ten are in flight from 10.159 to 14.8 s: wall = 4.641 s, in
    which nine requests ended (no chunk times: their tokens arrive at their end)."""
    one = [make_record(0.0, 1.8866, 256, 0.2)]
    ten = [make_record(10.0, 14.8, 256, 0.3, rung=1, users=10) for _ in range(9)]
    ten.append(make_record(10.159, 14.959, 256, 0.3, rung=1, users=10))
    return one + ten


def test_plain_table_reproduces_the_seed_layout():
    out = render(rows_of(seed_records()), "table").splitlines()
    assert out == [
        "conc  agg_tok/s  per_req_tok/s  tokens  wall_s  ttft_p50_ms  failures",
        "   1      135.7          135.7     256    1.89        200.0         0",
        "  10      496.4           53.3    2560    4.64        300.0         0",
    ]  # no note: 496.4 is 3.8 % off the whole span's 516.2 (2560 tokens in 4.959 s), under 5 %
    assert round(9 * 256 / 4.641, 1) == 496.4


def test_plain_table_marks_estimated_and_partial_figures():
    out = render(rows_of(run_records(), requests_per_user=1), "table").splitlines()
    assert out[:4] == [
        "conc  agg_tok/s  per_req_tok/s  tokens  wall_s  ttft_p50_ms  failures",
        "  1      128.0          128.0     256     2.00        500.0         0",
        "  4       85.3           53.3     768     3.00        400.0         1",
        "  4!      42.5*          35.0*    170*    4.00        200.0         0",
    ]
    notes = "\n".join(out[4:])
    assert "* the server sent no usage on some requests" in notes
    assert "! rung did not finish (partial): rung03 c4" in notes
    assert "rung02 c4: 1 of 4 requests failed (http_500 x1); their 37 partial tokens" in notes


def test_wide_columns_only_behind_the_option():
    narrow = render(rows_of(run_records()), "table").splitlines()[0].split()
    wide = render(rows_of(run_records()), "table", wide=True).splitlines()[0].split()
    assert narrow == ["conc", "agg_tok/s", "per_req_tok/s", "tokens", "wall_s", "ttft_p50_ms", "failures"]
    assert wide == [*narrow, "rung", "requests", "partial_tokens", "failure_kinds"]


def test_markdown_csv_and_json():
    rows = rows_of(run_records())
    md = render(rows, "markdown").splitlines()
    assert md[0].replace(" ", "") == "|conc|agg_tok/s|per_req_tok/s|tokens|wall_s|ttft_p50_ms|failures|"
    assert md[3].replace(" ", "") == "|4|85.3|53.3|768|3.00|400.0|1|"
    lines = render(rows, "csv").splitlines()
    header = (
        "conc,agg_tok/s,per_req_tok/s,tokens,wall_s,ttft_p50_ms,failures,cache_%,±%,estimated,partial,saturated,"
        "server_running,server_waiting,server_kv_usage,server_accept_len,server_cache_share"
    )
    assert lines[0] == header
    assert lines[3] == "4,42.5,35.0,170,4.00,200.0,0,-,-,True,False,False,,,,,"
    data = json.loads(render(rows, "json"))
    assert data[1]["per_req_tok_s"] == pytest.approx(160 / 3, rel=1e-12)  # full precision
    assert data[1]["failures_by_kind"] == {"http_500": 1}


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


@pytest.fixture
def run_prefix(tmp_path: Path) -> Path:
    prefix = tmp_path / "x"
    write_records(Path(f"{prefix}_records.jsonl"), run_records())
    for suffix in ("_stats.csv", "_failures.csv"):
        shutil.copy(FIXTURES / f"run{suffix}", f"{prefix}{suffix}")
    return prefix


def test_script_prints_the_table_and_no_warning_when_csv_agrees(run_prefix: Path):
    res = run_script(str(run_prefix))
    assert res.returncode == 0, res.stderr
    row = "   4      85.3           53.3     768     3.00        400.0         1"
    assert res.stdout.splitlines()[2] == row
    assert "warning" not in res.stdout + res.stderr


def test_script_notes_unreadable_lines_and_lost_records(run_prefix: Path):
    path = Path(f"{run_prefix}_records.jsonl")
    lines = path.read_text().splitlines()
    del lines[2]  # a rung02 record lost: Locust counted 4 requests
    path.write_text("\n".join(lines) + '\n{"request_id": "half-writ')
    res = run_script(str(run_prefix), "--metrics")
    assert res.returncode == 0, res.stderr
    assert "warning: " + str(path) + ": skipped 1 unreadable lines: 8" in res.stdout
    assert "rung02 c4: requests: records 3, Locust 4" in res.stdout
    assert "ttfo" in res.stdout  # the latency table (time to the first answer token)


def test_script_missing_records_file(tmp_path: Path):
    res = run_script(str(tmp_path / "nope"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"llmload table: error: {tmp_path / 'nope'}_records.jsonl: no such records file"
    ]


def test_script_json_keeps_stdout_parseable(run_prefix: Path):
    Path(f"{run_prefix}_stats.csv").write_text("")
    res = run_script(str(run_prefix), "--format", "json", "--slo-ttft-ms", "300")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data[1]["metrics"]["good_requests"] == 1  # only the 200 ms TTFT is <= 300 ms
    assert "empty file" in res.stderr


def test_streaming_load_run_gives_the_rows_and_metrics_of_the_held_records(run_prefix: Path):
    """One pass over the file (tallies, records dropped) gives every field of the rows and metrics
    that the held records give (`tally_rungs`)."""
    result = load_run(run_prefix, with_metrics=True)
    assert result.records is None  # nothing held
    rungs = tally_rungs(read_records(Path(f"{run_prefix}_records.jsonl"))[0])
    assert result.rows == sweep_rows(rungs)
    assert result.metrics is not None
    assert [m.as_dict() for m in result.metrics] == [r.metrics().as_dict() for r in rungs]
    assert [r.request_id for r in result.iter_records()] == [r.request_id for r in run_records()]


@pytest.mark.parametrize(
    "flags",
    [[("accept_len", "x" * 5000)], [("k" * 3000, "1")], [("seed", "1"), ("seed", "2" * 900)]],
    ids=["long value", "long key", "repeated long"],
)
def test_a_long_sim_flag_is_quoted_short(flags):
    from llmload.core.config import ConfigError
    from llmload.runner.sweep_input import sim_args

    with pytest.raises(ConfigError) as refused:
        sim_args(flags)
    assert len(str(refused.value)) <= 300 and "\n" not in str(refused.value)


def test_a_sim_file_gives_the_settings_of_sim_flags(tmp_path):
    """`--sim-file` (llmload twin's twin_sim.yaml): each KEY: VALUE is `--sim KEY=VALUE`, checked
    by the simulator's parser; a key also given with --sim, a file that is not a mapping of plain
    values, or a value the simulator refuses is one line naming the flag."""
    import argparse

    from llmload.core.config import ConfigError
    from llmload.runner.sweep_input import check_input, sim_file_flags

    good = tmp_path / "twin_sim.yaml"
    good.write_text("base_ms: 10.5\nper_seq_ms: 3\nignore_eos_unsupported: true\n")
    assert sim_file_flags(good) == [
        ("base_ms", "10.5"),
        ("per_seq_ms", "3"),
        ("ignore_eos_unsupported", "true"),
    ]

    def check(sim_file, sim=()):
        args = argparse.Namespace(host=None, sim=list(sim), sim_file=sim_file, ladder="")
        return check_input(args, tmp_path / "run", [])

    assert check(good) == ["--base-ms", "10.5", "--per-seq-ms", "3", "--ignore-eos-unsupported"]
    with pytest.raises(ConfigError, match="base_ms given twice"):
        check(good, [("base_ms", "2")])
    for text, why in (("- 1\n", "expected a mapping"), ("base_ms: [1]\n", "expected a number"),
                      ("base_ms: -1\n", "base_ms"), ("a: [\n", "cannot read")):  # fmt: skip
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=why) as refused:
            check(bad)
        assert "\n" not in str(refused.value) and str(refused.value).startswith("--sim")
    with pytest.raises(ConfigError, match="^--sim-file .*: cannot read"):
        check(tmp_path / "missing.yaml")


def test_the_server_side_notes_fire_only_when_the_server_queued_filled_or_had_seen_the_prompts():
    """A healthy run (nothing waiting, KV far from full, the cache within the shared prefix) gets
    no note; each condition gets one that says what to do."""
    from llmload.analysis.run.sweep_rows import SweepRow
    from llmload.output.table import server_notes

    def row(rung: int, server: dict | None, over: int | None = 0) -> SweepRow:
        cache = {"requests": 4, "cached_tokens": 10, "prompt_tokens": 100, "share": 0.1, "over_shared": over}
        return SweepRow(rung, 4, 1.0, 1.0, 4, 1.0, 1.0, 4, 0, cache=cache, server=server)

    healthy = {"running": 4.0, "waiting": 0.2, "kv_usage": 0.3}
    assert server_notes([row(0, healthy), row(1, None, over=None)]) == []
    notes = server_notes([row(0, {**healthy, "waiting": 2.5, "kv_usage": 0.95}, over=3)])
    assert len(notes) == 3
    assert "rung01 c4: 3 of 4 requests" in notes[0] and "rerun with another seed" in notes[0]
    assert "rung01 c4: 2.5 waiting on average" in notes[1] and "--max-num-seqs" in notes[1]
    assert "rung01 c4: 95 %" in notes[2] and "--gpu-memory-utilization" in notes[2]


def test_a_held_rung_shows_its_interval_beside_agg_tok_s():
    """Twenty 1-second requests back to back (slices of 2 s, longer than a request): the table
    gains the `±%` column after agg_tok/s; rungs of requests that all start together have none."""
    held = [
        make_record(1000.0 + i, 1001.0 + i, 100, 0.1, chunk_times=[0.1 + 0.009 * k for k in range(100)])
        for i in range(20)
    ]
    header, row = render(rows_of(held), "table").splitlines()[:2]
    assert header.split()[:4] == ["conc", "agg_tok/s", "±%", "per_req_tok/s"]
    assert row.split()[1:3] == ["100.0", "0.0"]  # 100 tokens in every second
    assert "±%" not in render(rows_of(seed_records()), "table")
