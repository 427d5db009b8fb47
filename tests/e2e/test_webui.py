"""The web UI's Tokens tab, its CSV download and the llmload start-form fields, over HTTP against a
real `locust` web UI process and a real simulator (loopback, free ports).

The tab is checked two ways: against the simulator's ground truth (requests, tokens, users) and,
figure for figure, against `scripts/sweep_table.py` on the same run (the acceptance criterion:
same numbers, same rounding)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import urllib.error
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from fixtures.runs import run_records
from fixtures.webui import (
    LocustWebUI,
    post_processed,
    server_view_cells,
    sweep_table,
    tab_as_post_processed,
    tab_rows,
    template_args,
)

from llmload.analysis.run.locust_csv import cross_check
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core.files.records import RequestRecord, read_records
from llmload.core.files.run_files import RunFiles
from llmload.core.names import REQUEST_TYPE, rung_name
from llmload.loadgen.webui import live_sweep
from llmload.loadgen.webui.live_sweep import LiveSweep
from llmload.output.toolkit.cells import fmt_num
from llmload.runner.progress import Progress
from llmload.runner.sweep_run import LOCUSTFILES
from llmload.servers.process import LOOPBACK, free_port
from llmload.sim.truth import load_truth

API_KEY = "sk-webui-test"
NO_WORKER = "llmload: no worker is connected to this master"
POINT_FIELDS = ("t", "rung", "users", "agg_tok_s", "per_req_tok_s", "requests", "tokens")  # docs/web-ui.md


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
    server = server_view_cells(ui.prefix)
    assert shown == [
        tab_as_post_processed(r) | v for r, v in zip(post_processed(ui.prefix), server, strict=True)
    ]
    # the CSV download is the post-processor's CSV
    csv_lines = ui.get("/llmload/sweep.csv").decode().splitlines()
    assert csv_lines == sweep_table(ui.prefix, "--format", "csv").splitlines()
    # the outputs of a headless run: run file, and Locust's CSVs agreeing with the records
    assert cross_check(ui.prefix, tally_rungs(records)) == []
    check_charts(ui, rows, records)
    # Locust's own table counts real requests only (no latency pseudo-entries in its Aggregated row)
    entries = ui.stats()["stats"]
    assert {e["method"] for e in entries if e["name"] != "Aggregated"} == {REQUEST_TYPE}
    assert [e["num_requests"] for e in entries if e["name"] == "Aggregated"] == [len(records)]
    # the terminal progress line, read from the same files, ends on the last rung's figures
    last = rows[-1]
    line = Progress(ui.prefix, io.StringIO()).poll()
    assert line is not None and line.startswith(f"{last['rung']} ({len(rows)}/{len(rows)})  ")
    assert line.endswith(f"agg {last['agg_tok_s']} tok/s  per-request {last['per_req_tok_s']} tok/s  done")


def check_charts(ui: LocustWebUI, rows: list[dict[str, str]], records: list[RequestRecord]) -> None:
    """/llmload/charts.json: the sweep curve is the tab's figures as numbers, and each point of the
    time series is the post-processor's row on the rung's records received until then (the
    records file is written in the order the master received them)."""
    data = json.loads(ui.get("/llmload/charts.json"))
    curve = [
        (p["rung"], str(p["users"]), fmt_num(p["agg_tok_s"]), fmt_num(p["per_req_tok_s"]), str(p["tokens"]))
        for p in data["sweep"]
    ]
    assert curve == [(r["rung"], r["users"], r["agg_tok_s"], r["per_req_tok_s"], r["tokens"]) for r in rows]
    assert [p["state"] for p in data["sweep"]] == [r["state"] for r in rows]
    measured = [r for r in records if r.phase == "measure"]
    for point in data["history"]:
        received = [r for r in measured if rung_name(r.rung, r.users) == point["rung"]][: point["requests"]]
        (rung,) = tally_rungs(received)
        row = rung.row()
        assert point["t"] == max(r.t_end for r in received)
        assert (point["agg_tok_s"], point["per_req_tok_s"], point["tokens"]) == (
            row.agg_tok_s,
            row.per_req_tok_s,
            row.tokens,
        )
    # every rung has points, the last of each is its final figures, and time runs forward
    last = {p["rung"]: p for p in data["history"]}
    assert [last[p["rung"]]["requests"] for p in data["sweep"]] == [p["requests"] for p in data["sweep"]]
    times = [p["t"] for p in data["history"]]
    assert times == sorted(times)
    # the page asks for the points it does not have yet; a bad `since` is one line, 400
    assert data["history_length"] == len(data["history"])
    assert json.loads(ui.get(f"/llmload/charts.json?since={len(times)}"))["history"] == []
    try:
        ui.get("/llmload/charts.json?since=-1")
        raise AssertionError("since=-1 was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400 and e.read().decode().count("\n") == 1
    assert b"<svg" in ui.get("/llmload/charts")


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
        # the form shows every option's help as written (no unexpanded argparse "%(default)s")
        assert all("%(" not in (f["help_text"] or "") for f in fields.values())
        assert {"key": "tokens", "title": "Tokens"} in args["extended_tabs"]
        assert [f["href"] for f in args["extended_csv_files"]] == [
            "./llmload/sweep.csv",
            "./llmload/charts",
        ]
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
        assert any(r["srv_running"] != "-" for r in live)  # the server's view while the rung ran
        # the sweep curve grew rung by rung, the running rung's point marked as such
        curves = [[(p["rung"], p["state"]) for p in c["sweep"]] for c in ui.chart_polls]
        assert [("rung01 c1", "running")] in curves
        assert [("rung01 c1", "done"), ("rung02 c2", "running")] in curves
        check_tab_against_truth_and_post_processor(ui, rows, sim)
        # the simulator's /metrics was scraped inside each 2 s rung: the server's view is there
        assert all(r["srv_running"] != "-" for r in rows), rows
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


def test_start_without_workers_stops_at_once(tmp_path, sim_start):
    """A start with no worker connected (a script's POST /swarm, or the form in the 2 s before
    Locust's page sees a worker drop) answers success while Locust's master spawns nobody: the
    ladder used to wait 60 s for its users, say its first rung started, and give up ~15 minutes
    later. It now stops at once with one line naming the cause, before the preflight and any
    rung; the master keeps serving, and once a worker connects the next start runs."""
    sim = sim_start(base_ms=5, per_seq_ms=1)
    port = str(free_port())
    master = ("--master", "--expect-workers", "1", "--master-bind-port", port)
    form = dict(host=sim.url, rungs="2", requests_per_user="1", max_tokens="8", warmup_requests="0")
    with LocustWebUI(tmp_path, sim.url, master) as ui:
        for attempt in (1, 2):  # each start is a new run, refused the same way
            assert ui.worker_count() == 0
            started = ui.swarm(**form)
            assert started["success"], started  # Locust's answer to a shape's start
            deadline = time.monotonic() + 10
            while ui.log.read_text(errors="replace").count(NO_WORKER) < attempt:
                assert time.monotonic() < deadline, f"no refusal in 10 s; log:\n{ui.process.log_tail(40)}"
                time.sleep(0.2)
            assert ui.stats()["state"] in ("ready", "stopped")  # the page offers a new start
            assert b"window.templateArgs" in ui.get("/")
        log = ui.log.read_text(errors="replace")
        assert log.count(NO_WORKER) == 2, log
        assert "rungs [" not in log and "rung01" not in log, log  # no preflight, no rung
        info = json.loads(Path(f"{ui.prefix}_run.json").read_text())
        assert info["stages"] == [] and [e["kind"] for e in info["errors"]] == ["no_workers"]
        assert info["errors"][0]["message"].startswith(NO_WORKER.removeprefix("llmload: "))
        # start the workers, then start the run: it runs
        worker_cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES["completions"]), "--worker"]
        worker_cmd += ["--master-host", LOOPBACK, "--master-port", port]
        with (tmp_path / "worker.log").open("wb") as wlog:
            worker = subprocess.Popen(worker_cmd, stdout=wlog, stderr=subprocess.STDOUT)
        try:
            assert ui.start(**form)["success"]  # waits for the worker
            rows = tab_rows(ui.wait_stopped(60)[-1])
            assert [(r["users"], r["requests"]) for r in rows] == [("2", "2")]
        finally:
            worker.kill()
            worker.wait(timeout=30)


def test_page_polls_never_see_the_passing_stop_states(tmp_path, sim_start):
    """Locust's page polls `/stats/requests` only while the last state it saw was spawning or
    running, so one "cleanup" answer as a run ends would leave it showing that for good. Polled
    every 5 ms through three runs' ends, the answers go from running to stopped and nothing
    between (before the fix, "cleanup" was seen at the end of every run: the answer is cached
    for 2 s and the shape's ticks fall in step with the polls)."""
    sim = sim_start(base_ms=5, per_seq_ms=1)
    for run in range(3):
        run_dir = tmp_path / f"run{run}"
        run_dir.mkdir()
        with LocustWebUI(run_dir, sim.url) as ui:
            started = ui.start(host=sim.url, rungs="1,2", requests_per_user="2", max_tokens="8")
            assert started["success"], started
            states = [ui.stats()["state"]]
            deadline = time.monotonic() + 60
            while states[-1] != "stopped" and time.monotonic() < deadline:
                time.sleep(0.005)
                states.append(ui.stats()["state"])
        assert states[-1] == "stopped", f"run {run} did not stop in 60 s"
        assert set(states) <= {"ready", "spawning", "running", "stopped"}, f"run {run}: {set(states)}"


def test_tallies_equal_the_post_processor_on_failures_and_estimates(tmp_path):
    """Running tallies give the post-processor's rows exactly, also for failed requests, client-
    counted tokens and a repeated concurrency (hand-built records; the warm-up is left out)."""
    records = run_records()
    live = LiveSweep()
    run = SimpleNamespace(progress=[], current=None, files=RunFiles(tmp_path / "run"))  # no scrapes
    for rec in records:
        live.add(run, rec)
    rungs = tally_rungs(records)
    assert sorted(live.rungs) == [r.index for r in rungs]
    for rung, cells in zip(rungs, live.table(active=False), strict=True):
        assert live.rungs[rung.index].row() == rung.row()
        latencies = rung.metrics(percentiles=(50.0, 99.0)).latencies
        assert cells["ttft_p99_ms"] == fmt_num(latencies["ttft"].percentiles[99.0])
        assert cells["tpot_p50_ms"] == fmt_num(latencies["tpot"].median)
        assert cells["state"] == "stopped" and cells["now_tok_s"] == ""
    assert live.rungs[1].row().failures_by_kind == {"http_500": 1}


def test_chart_series_follow_the_records(monkeypatch):
    """The charts' time series: a point per change of a rung's tally, each the post-processor's row
    on that rung's records so far; `add` samples at most every SAMPLE_S seconds, reading always
    brings the newest figures; a new run starts a new series (hand-built records, no processes)."""
    clock = SimpleNamespace(now=100.0)
    monkeypatch.setattr(live_sweep.time, "time", lambda: clock.now)
    records = run_records()
    live = LiveSweep()
    run = SimpleNamespace(progress=[], current=None)
    for n, rec in enumerate(records, start=1):
        live.add(run, rec)
        data = live.charts(active=False, since=len(live.history) - 1 if live.history else 0)
        received = [r for r in records[:n] if r.phase == "measure" and r.rung == rec.rung]
        if rec.phase == "warmup":
            assert data["history"] == []
            continue
        (point,) = data["history"][-1:]
        row = tally_rungs(received)[0].row()
        assert sorted(point) == sorted(POINT_FIELDS)
        assert [point[k] for k in POINT_FIELDS] == [
            max(r.t_end for r in received),
            rung_name(row.rung, row.conc),
            row.conc,
            row.agg_tok_s,
            row.per_req_tok_s,
            row.requests,
            row.tokens,
        ]
    assert len(live.history) == len(records) - 1  # every measured record was read after it came
    curve = [p["agg_tok_s"] for p in live.charts(False)["sweep"]]
    assert curve == [g.row().agg_tok_s for g in tally_rungs(records)]
    # without reads, records arriving within SAMPLE_S of the last sample add no point
    live.follow(SimpleNamespace(progress=[], current=None))
    assert (live.runs_seen, live.history) == (2, [])
    for rec in records[1:4]:
        live.add(live.run, rec)
        clock.now += live_sweep.SAMPLE_S / 4
    assert [p["requests"] for p in live.history] == [1]
    assert [p["requests"] for p in live.charts(False, since=1)["history"]] == [2]  # rung 0 unchanged
