"""Soak reports from files: windows, levels, drift and its confidence interval, verdicts and exit
codes, JUnit/CSV/PNG outputs, and the Locust-stats trimming that keeps a long run's memory flat.

The records here are synthetic with values fixed by construction (tokens per window, latencies),
and the statistics are checked in tests/unit/test_drift.py.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fixtures.paths import REPO
from locust.stats import RequestStats

from llmload.analysis.soak.verdict import soak_report
from llmload.core import exit_codes
from llmload.core.config import ConfigError, load_config, parse_config
from llmload.core.files.records import RequestRecord, write_records
from llmload.loadgen.monitor.soak_monitor import HISTORY_MAX, KEEP_PER_SECOND_S, trim_stats

SCRIPT = REPO / "scripts" / "soak_report.py"
T0 = 1_700_000_000.0
W = 10.0
SOAK = {
    "window_s": W,
    "settle_windows": 1,
    "min_agg_tok_s": 150,
    "max_ttft_p99_ms": 500,
    "max_tpot_p99_ms": 50,
    "max_failure_ratio": 0.05,
    "max_tok_s_drift_pct_per_h": 50,
    "max_ttft_drift_pct_per_h": 50,
}


def rec(t_end: float, tokens: int = 100, ttft_ms: float = 100.0, e2e_s: float = 2.0, **kw) -> RequestRecord:
    t_start = t_end - e2e_s
    fields = {
        "request_id": f"r{t_end}",
        "rung": 0,
        "users": 4,
        "phase": "measure",
        "endpoint": "completions",
        "stream": True,
        "max_tokens": tokens,
        "t_start": t_start,
        "t_end": t_end,
        "t_first": t_start + ttft_ms / 1000.0,
        "output_tokens": tokens,
        **kw,
    }
    return RequestRecord(**fields)


def write_run(
    tmp_path: Path,
    records: list[RequestRecord],
    *,
    duration: float = 60.0,
    finished: bool = True,
    soak: dict | None = None,
) -> Path:
    prefix = tmp_path / "run"
    write_records(Path(f"{prefix}_records.jsonl"), records)
    config = {"rungs": [4], "duration": duration, "soak": soak or SOAK, "max_tokens": 100}
    stage = {"rung": 0, "users": 4, "name": "rung01 c4", "started": T0, "finished": None, "records": 0}
    info = {"config": config, "finished": finished, "records": f"{prefix}_records.jsonl", "stages": [stage]}
    Path(f"{prefix}_run.json").write_text(json.dumps(info))
    return prefix


def per_window(counts: list[int], tokens: int = 100, **kw) -> list[RequestRecord]:
    """counts[i] requests of `tokens` tokens ending evenly spread inside window i."""
    out = []
    for i, n in enumerate(counts):
        out += [rec(T0 + i * W + (j + 0.5) * W / n, tokens, **kw) for j in range(n)]
    return out


# --- windows and levels -------------------------------------------------------------------------
def test_windows_are_by_end_time_with_exact_tokens(tmp_path):
    records = per_window([20] * 6)
    records += [
        rec(T0 + 10.0, 40),  # exactly on a boundary: belongs to window 1
        rec(T0 + 25.0, 0, outcome="http_500"),  # a failure in window 2
        rec(T0 + 61.0, 100),  # drains after the deadline: the tail
        rec(T0 + 5.0, 100, phase="warmup", rung=-1),  # warm-up: never counted
    ]
    report = soak_report(write_run(tmp_path, records))
    assert len(report.windows) == 6
    rows = [w.row(report.t0) for w in report.windows]
    assert [r["tokens"] for r in rows] == [2000, 2040, 2000, 2000, 2000, 2000]
    assert [r["requests"] for r in rows] == [20, 21, 21, 20, 20, 20]
    assert rows[2]["failures"] == 1 and rows[1]["agg_tok_s"] == pytest.approx(204.0)
    assert report.tail_requests == 1
    assert report.level("agg_tok_s") == pytest.approx(12040 / 60)
    assert report.level("failure_ratio") == pytest.approx(1 / 122)
    assert rows[0]["ttft_p99_ms"] == pytest.approx(100.0)
    assert rows[0]["tpot_p50_ms"] == pytest.approx((2000 - 100) / 99)
    assert report.status == "pass" and report.exit_code == 0 and report.breached == []


def test_level_thresholds_name_what_was_breached(tmp_path):
    records = per_window([10] * 6, ttft_ms=800.0)  # 100 tok/s < 150 and TTFT p99 800 ms > 500
    report = soak_report(write_run(tmp_path, records))
    assert report.breached == ["min_agg_tok_s", "max_ttft_p99_ms"]
    assert report.status == "breached" and report.exit_code == 1


def test_generator_health_per_window(tmp_path):
    prefix = write_run(tmp_path, per_window([20] * 6))
    samples = [
        {"t": T0 + 1, "worker": "a", "cpu": 40.0, "rss": 100e6, "lag_ms": 2.0},
        {"t": T0 + 2, "worker": "a", "cpu": 60.0, "rss": 110e6, "lag_ms": 9.0},
        {"t": T0 + 3, "worker": "b", "cpu": 30.0, "rss": 50e6, "lag_ms": 1.0},
        {"t": T0 + 15, "worker": "a", "cpu": 10.0, "rss": 120e6, "lag_ms": 3.0},
    ]
    Path(f"{prefix}_health.jsonl").write_text("\n".join(map(json.dumps, samples)) + "\n{truncated")
    rows = [w.row(T0) for w in soak_report(prefix).windows]
    assert rows[0]["gen_cpu_pct"] == pytest.approx(50.0 + 30.0)  # per-process mean, summed
    assert rows[0]["gen_rss_mb"] == pytest.approx(110.0 + 50.0)  # per-process max, summed
    assert rows[0]["gen_lag_ms"] == 9.0
    assert rows[1]["gen_cpu_pct"] == 10.0 and rows[2]["gen_cpu_pct"] is None


# --- drift --------------------------------------------------------------------------------------
def test_steady_windows_with_noise_raise_no_alarm(tmp_path):
    report = soak_report(
        write_run(tmp_path, per_window([20, 21, 19, 20, 21, 19, 20, 20, 21, 19], 100), duration=100)
    )
    tok = report.drifts["tok_s"]
    assert tok.low < 0 < tok.high
    assert report.status == "pass"


def test_a_falling_throughput_and_growing_ttft_breach_the_drift_limits(tmp_path):
    # 10 s windows losing one request of 20 per window: -5 % of the first per 10 s, far beyond 50 %/h
    records = []
    for i, n in enumerate(range(20, 10, -1)):
        records += [rec(T0 + i * W + (j + 0.5) * W / n, 100, ttft_ms=100.0 + 20 * i) for j in range(n)]
    report = soak_report(write_run(tmp_path, records, duration=100, soak={**SOAK, "min_agg_tok_s": None}))
    assert report.breached == ["max_tok_s_drift_pct_per_h", "max_ttft_drift_pct_per_h"]
    assert report.drifts["tok_s"].high < -50 and report.drifts["ttft"].low > 50
    assert report.exit_code == 1


def test_a_drift_whose_interval_straddles_the_limit_is_inconclusive_not_breached(tmp_path):
    # tok/s point estimate beyond -limit but the noise makes the interval include it
    counts = [22, 17, 23, 16, 21, 19, 15, 21, 14, 20]
    soak = {**SOAK, "min_agg_tok_s": None, "max_tok_s_drift_pct_per_h": 1000}
    report = soak_report(write_run(tmp_path, per_window(counts), duration=100, soak=soak))
    tok = report.drifts["tok_s"]
    assert tok.low < -1000 < tok.high
    check = {c.name: c for c in report.checks}["max_tok_s_drift_pct_per_h"]
    assert check.status == "inconclusive" and report.exit_code == 0
    assert any("inconclusive" in w for w in report.warnings)


def test_too_few_windows_skip_the_drift_checks(tmp_path):
    report = soak_report(write_run(tmp_path, per_window([20] * 3), duration=30))
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["max_tok_s_drift_pct_per_h"] == statuses["max_ttft_drift_pct_per_h"] == "skipped"
    assert report.exit_code == 0


# --- runs that did not finish -------------------------------------------------------------------
def test_a_crashed_run_is_judged_up_to_its_last_request(tmp_path):
    prefix = write_run(tmp_path, per_window([20] * 4), duration=600, finished=False)
    with open(f"{prefix}_records.jsonl", "a") as fh:
        fh.write('{"request_id": "half-writ')  # killed mid-line
    report = soak_report(prefix)
    assert len(report.windows) == 3  # the 4th window is not over: its last request ended at 39.75 s
    assert report.tail_requests == 20
    assert report.status == "incomplete" and report.exit_code == exit_codes.INTERRUPTED
    assert any("skipped 1 unreadable" in w for w in report.warnings)


def test_a_breach_in_an_unfinished_run_is_still_a_breach(tmp_path):
    prefix = write_run(tmp_path, per_window([5] * 4), duration=600, finished=False)
    assert soak_report(prefix).exit_code == 1


def test_a_rate_mode_soak_is_judged_the_same_way(tmp_path):
    prefix = write_run(tmp_path, per_window([20] * 6))
    info = json.loads(Path(f"{prefix}_run.json").read_text())
    info["config"].update(mode="rate", rungs=[2.5])  # 2.5 requests/s for `duration`
    Path(f"{prefix}_run.json").write_text(json.dumps(info))
    report = soak_report(prefix)
    assert report.status == "pass" and report.level("agg_tok_s") == pytest.approx(200.0)


def test_no_full_window_could_not_run(tmp_path):
    report = soak_report(write_run(tmp_path, [rec(T0 + 3.0)], finished=False))
    assert report.status == "not_run" and report.exit_code == 2 and report.windows == []


def test_soak_config_errors_are_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"f.yaml: 'soak.max_failure_ratio' must be a number in \[0, 1\]"):
        parse_config({"rungs": [4], "duration": 60, "soak": {"max_failure_ratio": 2}}, "f.yaml")
    with pytest.raises(ConfigError, match=r"f.yaml: unknown key 'soak.windows'"):
        parse_config({"rungs": [4], "duration": 60, "soak": {"windows": 2}}, "f.yaml")
    with pytest.raises(ConfigError, match=r"'soak' needs one time-based rung"):
        parse_config({"rungs": [1, 4], "duration": 60, "soak": {}}, "f.yaml")
    shipped = load_config(REPO / "config" / "soak.yaml")
    assert shipped.soak is not None and shipped.rungs == (8,) and shipped.duration == 28800


# --- outputs and the script ---------------------------------------------------------------------
def soak_report_main(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_script_writes_json_junit_csv_png_and_exits_with_the_verdict(tmp_path):
    records = []
    for i, n in enumerate(range(20, 10, -1)):
        records += [rec(T0 + i * W + (j + 0.5) * W / n) for j in range(n)]
    prefix = write_run(tmp_path, records, duration=100, soak={**SOAK, "min_agg_tok_s": None})
    run = soak_report_main([str(prefix)])
    assert run.returncode == 1, run.stderr
    out = run.stdout
    assert "verdict: BREACHED (exit code 1)" in out and "max_tok_s_drift_pct_per_h" in out
    summary = json.loads(Path(f"{prefix}_soak.json").read_text())
    assert summary["status"] == "breached" and summary["breached"] == ["max_tok_s_drift_pct_per_h"]
    suite = ET.parse(f"{prefix}_soak.xml").getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {
        k for k, v in SOAK.items() if k.startswith(("min_", "max_")) and k != "min_agg_tok_s"
    }
    assert cases["max_tok_s_drift_pct_per_h"].find("failure") is not None
    assert cases["max_failure_ratio"].find("failure") is None
    assert suite.get("failures") == "1" and suite.get("tests") == str(len(cases))
    with open(f"{prefix}_soak_windows.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["tokens"]) for r in rows] == [n * 100 for n in range(20, 10, -1)]
    assert Path(f"{prefix}_soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_script_judges_with_another_config_and_reports_incomplete_runs_in_junit(tmp_path):
    prefix = write_run(tmp_path, per_window([20] * 4), duration=600, finished=False)
    strict = tmp_path / "strict.yaml"
    strict.write_text("rungs: [4]\nduration: 600\nsoak: {window_s: 10, min_agg_tok_s: 1000}\n")
    strict_run = soak_report_main([str(prefix), "--config", str(strict), "--format", "json", "--no-png"])
    assert strict_run.returncode == 1 and json.loads(strict_run.stdout)["breached"] == ["min_agg_tok_s"]
    assert soak_report_main([str(prefix), "--no-png"]).returncode == exit_codes.INTERRUPTED
    suite = ET.parse(f"{prefix}_soak.xml").getroot().find("testsuite")
    completed = [c for c in suite.findall("testcase") if c.get("name") == "run_completed"]
    assert completed and completed[0].find("error") is not None
    missing = soak_report_main([str(tmp_path / "nothing")])
    assert missing.returncode == 2 and "error" in missing.stderr


# --- Locust stats stay bounded ------------------------------------------------------------------
def test_trim_stats_bounds_per_second_counters_without_changing_current_rps():
    stats = RequestStats()
    entry = stats.get("rung01 c8", "POST")
    now = 100_000
    for second in range(now - 10_000, now + 1):  # ~3 hours of one key per second
        for e in (entry, stats.total):
            e.num_reqs_per_sec[second] += 5
            e.num_fail_per_sec[second] += 1
    entry.last_request_timestamp = stats.total.last_request_timestamp = now + 0.5
    entry.start_time = stats.total.start_time = now - 10_000
    before = (entry.current_rps, entry.current_fail_per_sec, stats.total.current_rps)
    stats.history.extend({"time": str(i)} for i in range(5_000))
    trim_stats(stats, now)
    assert len(entry.num_reqs_per_sec) == len(stats.total.num_fail_per_sec) == KEEP_PER_SECOND_S + 1
    assert (entry.current_rps, entry.current_fail_per_sec, stats.total.current_rps) == before
    assert len(stats.history) <= HISTORY_MAX
    times = [int(h["time"]) for h in stats.history]
    assert times[0] == 0 and times[-1] == 4_999 and times == sorted(times)
    assert not math.isnan(before[0]) and before[0] > 0
