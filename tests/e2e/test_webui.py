"""The web UI's Tokens tab, its CSV download and the llmload start-form fields, over HTTP against a
real `locust` web UI process and a real simulator (loopback, free ports).

The tab is checked two ways: against the simulator's ground truth (requests, tokens, users) and,
figure for figure, against `scripts/sweep_table.py` on the same run (the acceptance criterion:
same numbers, same rounding)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from fixtures.runs import run_records
from fixtures.webui import (
    LocustWebUI,
    post_processed,
    sweep_table,
    tab_as_post_processed,
    tab_rows,
    template_args,
)

from llmload.analysis.locust_csv import cross_check
from llmload.analysis.metrics import rung_metrics
from llmload.analysis.sweep_rows import group_rungs, sweep_row
from llmload.core.records import read_records
from llmload.loadgen.live_sweep import LiveSweep
from llmload.output.table import fmt_num
from llmload.sim.truth import load_truth

API_KEY = "sk-webui-test"


def check_tab_against_truth_and_post_processor(ui: LocustWebUI, rows: list[dict[str, str]], sim) -> None:
    truth, _ = load_truth(sim.truth_log)
    records, skipped = read_records(Path(f"{ui.prefix}_records.jsonl"))
    assert not skipped
    by_rung: Counter[int] = Counter()
    tokens: Counter[int] = Counter()
    for rec in records:
        if rec.phase == "measure":
            by_rung[rec.rung] += 1
            tokens[rec.rung] += truth[rec.request_id]["completion_tokens"]
    assert [int(r["requests"]) for r in rows] == [by_rung[i] for i in sorted(by_rung)]
    assert [int(r["tokens"]) for r in rows] == [tokens[i] for i in sorted(tokens)]
    assert all(r["failures"] == "0" and r["state"] == "done" and r["now_tok_s"] == "" for r in rows)
    # figure for figure what the post-processor prints for the same run
    shown = [{k: v for k, v in r.items() if k not in ("state", "now_tok_s")} for r in rows]
    assert shown == [tab_as_post_processed(r) for r in post_processed(ui.prefix)]
    # the CSV download is the post-processor's CSV
    csv_lines = ui.get("/llmload/analysis/sweep_rows.csv").decode().splitlines()
    assert csv_lines == sweep_table(ui.prefix, "--format", "csv").splitlines()
    # the outputs of a headless run: run file, and Locust's CSVs agreeing with the records
    assert cross_check(ui.prefix, group_rungs(records)) == []


def test_form_run_fills_the_tokens_tab(tmp_path, sim_start):
    """A ladder started from the form (time-based rungs, max tokens, model, streaming and the
    API key given as form fields, one connection per request) shows live progress, then the final
    table."""
    sim = sim_start(api_key=API_KEY, base_ms=5, per_seq_ms=1)
    with LocustWebUI(tmp_path, sim.url) as ui:
        args = template_args(ui)
        fields = args["extra_options"]
        for name in ("ladder", "rungs", "max_tokens", "model", "endpoint", "stream", "api_key", "connection"):
            assert name in fields, name
        assert fields["api_key"]["is_secret"] and not fields["model"]["is_secret"]
        assert {"key": "tokens", "title": "Tokens"} in args["extended_tabs"]
        assert args["extended_csv_files"][0]["href"] == "./llmload/analysis/sweep_rows.csv"
        started = ui.start(
            host=sim.url,
            ladder="config/sweep.yaml",
            rungs="1,2",
            rung_duration="2",
            requests_per_user="",
            warmup_requests="0",
            max_tokens="12",
            model="sim-model",
            endpoint="completions",
            stream="true",
            api_key=API_KEY,
            connection="close",
        )
        assert started["success"], started
        polls = ui.wait_stopped(60)
        live = [r for stats in polls for r in tab_rows(stats) if r["state"] == "running"]
        rows = tab_rows(polls[-1])
        assert [r["users"] for r in rows] == ["1", "2"]
        # while a rung ran, its row said so and carried a live rate
        assert {r["rung"] for r in live} == {"rung01 c1", "rung02 c2"}
        assert all(float(r["now_tok_s"]) > 0 for r in live)
        check_tab_against_truth_and_post_processor(ui, rows, sim)
    records, _ = read_records(Path(f"{ui.prefix}_records.jsonl"))
    assert {r.max_tokens for r in records} == {12} and all(r.stream for r in records)
    assert all(r.conn_reused is False and r.connect_ms is not None for r in records)  # connection: close


def test_distributed_master_shows_all_workers(tmp_path, sim_start):
    """With --processes 2 the master's tab aggregates the records of both workers."""
    sim = sim_start(base_ms=5, per_seq_ms=1)
    with LocustWebUI(tmp_path, sim.url, ("--processes", "2")) as ui:
        started = ui.start(
            host=sim.url, rungs="2,4", requests_per_user="2", max_tokens="8", warmup_requests="0"
        )
        assert started["success"], started
        rows = tab_rows(ui.wait_stopped(60)[-1])
        assert [(r["users"], r["requests"]) for r in rows] == [("2", "4"), ("4", "8")]
        check_tab_against_truth_and_post_processor(ui, rows, sim)
    records, _ = read_records(Path(f"{ui.prefix}_records.jsonl"))
    assert len({r.worker for r in records}) == 2


def test_tallies_equal_the_post_processor_on_failures_and_estimates():
    """Running tallies give the post-processor's rows exactly, also for failed requests, client-
    counted tokens and a repeated concurrency (hand-built records; the warm-up is left out)."""
    records = run_records()
    live = LiveSweep()
    run = SimpleNamespace(progress=[], current=None)
    for rec in records:
        live.add(run, rec.to_dict())
    rungs = group_rungs(records)
    assert sorted(live.rungs) == [r.index for r in rungs]
    for rung, cells in zip(rungs, live.table(active=False), strict=True):
        assert live.rungs[rung.index].row() == sweep_row(rung)
        latencies = rung_metrics(rung, percentiles=(50.0, 99.0)).latencies
        assert cells["ttft_p99_ms"] == fmt_num(latencies["ttft"].percentiles[99.0])
        assert cells["tpot_p50_ms"] == fmt_num(latencies["tpot"].median)
        assert cells["state"] == "stopped" and cells["now_tok_s"] == ""
    assert live.rungs[1].row().failures_by_kind == {"http_500": 1}
