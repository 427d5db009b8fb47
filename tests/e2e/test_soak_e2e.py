"""End to end: real `locust` processes run the shipped config/soak.yaml (scaled down to 5 s
windows and a 1-minute soak: twelve windows, as many as the 2-minute soak of 10 s windows this
test ran before, so the drift fits have the same count of points) against real simulator
processes, one steady and one whose step time grows by DEGRADE_PCT_PER_MIN % per minute. The
windows are checked against the simulator's truth log, and the verdict against what the
simulator was told to do: the steady run passes (exit code 0), the degrading one is flagged by
name (exit code 1).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml
from fixtures.paths import REPO

from llmload.analysis.soak.drift import fit_trend
from llmload.analysis.soak.verdict import soak_report
from llmload.runner.sweep_run import LOCUSTFILES, SweepRun, locust_command, run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.slow

DURATION_S = 60
WINDOW_S = 5
DEGRADE_PCT_PER_MIN = 30.0  # step time +30 % over the soak: tok/s falls ~23 %, about -1000 %/h
DRIFT_LIMIT_PCT_PER_H = 200.0
SIM = {"base_ms": 5, "per_seq_ms": 1}  # conc 8, 64 tokens: ~2500 tok/s, ~40 requests/s


def soak_yaml(path: Path) -> Path:
    """config/soak.yaml with the duration, window and thresholds scaled to a 1-minute simulator run."""
    raw = yaml.safe_load((REPO / "config" / "soak.yaml").read_text())
    raw.update(duration=DURATION_S, max_tokens=64, rungs=[8])
    raw["soak"].update(
        window_s=WINDOW_S,
        min_agg_tok_s=1000,  # both runs stay above it: only the drift tells them apart
        max_ttft_p99_ms=1000,
        max_tpot_p99_ms=50,
        max_failure_ratio=0.01,
        max_tok_s_drift_pct_per_h=DRIFT_LIMIT_PCT_PER_H,
        max_ttft_drift_pct_per_h=DRIFT_LIMIT_PCT_PER_H,
    )
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def soak_runs(tmp_path_factory) -> dict[str, SweepRun]:
    """The steady and the degrading soak, side by side (one core each is plenty at this load)."""
    base = tmp_path_factory.mktemp("soak")
    config = soak_yaml(base / "soak.yaml")
    sims = {"steady": SIM, "degrade": {**SIM, "degrade_pct_per_min": DEGRADE_PCT_PER_MIN}}
    with ThreadPoolExecutor(2) as pool:
        futures = {
            name: pool.submit(
                run_sweep,
                run_dir=base / name,
                locust_args=["--ladder", str(config)],
                sim=sim,
                timeout=DURATION_S + 120,
            )
            for name, sim in sims.items()
        }
        return {name: f.result() for name, f in futures.items()}


def truth_tok_s(run: SweepRun, t0: float, n: int) -> list[float]:
    """Per window, the tokens the server finished sending (last token written in the window) / W."""
    truth, _ = load_truth(run.truth_log)
    tokens = [0] * n
    for t in truth.values():
        if t["last_token"] is None:
            continue
        i = int((t["last_token"] - t0) // WINDOW_S)
        if 0 <= i < n:
            tokens[i] += t["completion_tokens"]
    return [x / WINDOW_S for x in tokens]


def check_windows_against_truth(run: SweepRun) -> None:
    report = soak_report(run.prefix)
    assert len(report.windows) == DURATION_S // WINDOW_S
    truth = truth_tok_s(run, report.t0, len(report.windows))
    measured = [w.agg_tok_s for w in report.windows]
    # a request ending within a few ms of a boundary may fall on the other side: 64 of ~12 500 tokens
    assert measured == pytest.approx(truth, rel=0.01)
    assert all(w.failures == 0 for w in report.windows)
    # the measured drift is the drift of the server's own windows
    true_trend = fit_trend([i + 0.5 for i in range(1, len(truth))], truth[1:])
    true_pct_per_h = 100 * true_trend.slope / true_trend.y_mean * 3600 / WINDOW_S
    assert report.drifts["tok_s"].pct_per_h == pytest.approx(true_pct_per_h, abs=30)


def test_steady_soak_passes_without_a_drift_alarm(soak_runs):
    run = soak_runs["steady"]
    assert run.returncode == 0, run.log.read_text()[-3000:]
    summary = json.loads(Path(f"{run.prefix}_soak.json").read_text())
    assert summary["status"] == "pass" and summary["breached"] == []
    assert summary["finished"] and summary["windows"] == DURATION_S // WINDOW_S
    tok = summary["drift"]["tok_s"]
    assert tok["ci_low"] < 0 < tok["ci_high"] or abs(tok["pct_per_h"]) < DRIFT_LIMIT_PCT_PER_H
    check_windows_against_truth(run)
    assert Path(f"{run.prefix}_soak.png").stat().st_size > 10_000


def test_degrading_soak_is_flagged_with_exit_code_1(soak_runs):
    run = soak_runs["degrade"]
    assert run.returncode == 1, run.log.read_text()[-3000:]
    summary = json.loads(Path(f"{run.prefix}_soak.json").read_text())
    assert summary["status"] == "breached"
    assert summary["breached"] == ["max_tok_s_drift_pct_per_h", "max_ttft_drift_pct_per_h"]
    assert summary["drift"]["tok_s"]["ci_high"] < -DRIFT_LIMIT_PCT_PER_H
    assert summary["drift"]["ttft"]["ci_low"] > DRIFT_LIMIT_PCT_PER_H
    log = run.log.read_text()
    assert "soak verdict BREACHED (exit code 1)" in log and "max_tok_s_drift_pct_per_h" in log
    failed = [
        c.get("name")
        for c in ET.parse(f"{run.prefix}_soak.xml").getroot().iter("testcase")
        if c.find("failure") is not None
    ]
    assert failed == summary["breached"]
    check_windows_against_truth(run)


# --- long-run safety --------------------------------------------------------------------------
MEMORY_REQUESTS = 20_000
MEMORY_USERS = 16


class LineCounter:
    """Counts the lines of a file that is still being appended to, reading only what is new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0
        self._offset = 0

    def update(self) -> int:
        if self.path.exists():
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
            self._offset += len(chunk)
            self.lines += chunk.count(b"\n")
        return self.lines


def test_generator_memory_stays_flat_over_20000_requests(tmp_path, sim_start):
    """The locust process's peak RSS in the last fifth of the requests is < 10 % above its peak in
    the first fifth (records are streamed to disk; Locust's per-entry stats are bounded)."""
    sim = sim_start(base_ms=1, per_seq_ms=0, accept_len=1)  # 4 tokens in ~4 ms
    prefix = tmp_path / "run"
    args = ["--rungs", str(MEMORY_USERS), "--requests-per-user", str(MEMORY_REQUESTS // MEMORY_USERS)]
    args += ["--max-tokens", "4", "--warmup-requests", "0"]
    cmd = locust_command(sim.url, prefix, LOCUSTFILES["completions"], args)
    counter = LineCounter(Path(f"{prefix}_records.jsonl"))
    samples: list[tuple[int, int]] = []  # (records written, RSS bytes)
    with (tmp_path / "locust.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            ps = psutil.Process(proc.pid)
            deadline = time.monotonic() + 400
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(psutil.NoSuchProcess):
                    samples.append((counter.update(), ps.memory_info().rss))
                time.sleep(0.1)  # keep-alive made the run fast: 0.5 s gave too few samples per fifth
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, (tmp_path / "locust.log").read_text()[-3000:]
    assert counter.update() == MEMORY_REQUESTS
    fifth = MEMORY_REQUESTS // 5
    first = [rss for n, rss in samples if 0 < n <= fifth]
    last = [rss for n, rss in samples if n >= MEMORY_REQUESTS - fifth]
    assert len(first) >= 5 and len(last) >= 5, samples
    growth = max(last) / max(first) - 1
    print(f"RSS peaks: first fifth {max(first) / 1e6:.1f} MB, last {max(last) / 1e6:.1f} MB ({growth:+.1%})")
    assert growth < 0.10
