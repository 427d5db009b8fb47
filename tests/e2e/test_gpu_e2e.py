"""GPU telemetry (issue 43 item 5) end to end: `llmload sweep --gpu-metrics` against the simulator's
DCGM-shaped page, whose power model the simulator integrates exactly and writes in its truth log.

- Tokens per joule per rung within 2 % of the truth: the truth's output tokens of the rung's
  requests over the energy the truth log gives for the rung's wall time (idle draw throughout,
  plus each step's draw above idle for the part of the step inside it), two simulated GPUs.
- One window per rung (issue 50 item 3): on a GPU of known, constant power, the json names each
  rung's `window` once; the GPU's energy is that power over it, the server's counters are read at
  scrapes that bracket it, and the server's generated tokens per second over it match the
  client's agg tok/s within one scrape interval's tokens.
- An exporter that is down: the run completes, prints its table and exactly one note, exit 0.
- A mixed exporter (issue 53 item 4): eight GPUs, the last without the energy counter: every
  rung's power within 1 % of the truth log's, GPU 7's energy from its power, and the note names it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO
from fixtures.runs import held_span

from llmload.analysis.run.postprocess import load_run
from llmload.servers.process import free_port
from llmload.sim.truth import load_truth

TOLERANCE = 0.02  # the bar


def _sweep(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmload", "sweep", "--run-dir", str(run_dir), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def _truth_energy(lines: list[dict], steps: list[dict], start: float, end: float) -> float:
    """Joules the simulated GPUs used in [start, end], from the truth log alone."""
    power = next(line for line in lines if line["type"] == "power")
    idle = power["gpus"] * power["idle_w"]
    energy = idle * (end - start)
    for s in steps:
        inside = min(end, s["t_end"]) - max(start, s["t_start"])
        if inside > 0:
            energy += inside * (s["gpu_w"] - idle)
    return energy


def _sim_gpu_sweep(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Rungs 1 and 4 of 4 requests per user, 64 tokens, against the simulator's GPU page."""
    proc = _sweep(
        run_dir,
        "--gpu-metrics", "/gpu/metrics",
        "--rungs", "1,4",
        "--max-tokens", "64",
        "--requests-per-user", "4",
        *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_tokens_per_joule_match_the_simulators_power_model(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _sim_gpu_sweep(run_dir, "--sim", "gpus=2")
    assert "GPU metrics" not in proc.stdout, proc.stdout  # quiet when right
    result = load_run(run_dir / "run", with_metrics=True)
    assert result.gpu is not None and result.gpu.note is None
    truth_path = run_dir / "sim_truth.jsonl"
    requests, steps = load_truth(truth_path)
    lines = [json.loads(line) for line in truth_path.read_text().splitlines() if line.strip()]
    measured = {r.rung: [] for r in result.rows}
    for rec in result.iter_records():
        if rec.rung in measured:
            measured[rec.rung].append(rec)
    for row in result.rows:
        g = result.gpu.rungs[row.rung]
        recs = measured[row.rung]  # the window: the rung's wall time, first start to last end
        start, end = min(r.t_start for r in recs), max(r.t_end for r in recs)
        true_tokens = sum(requests[r.request_id]["completion_tokens"] for r in recs)
        true_energy = _truth_energy(lines, steps, start, end)
        assert g.gpus == 2 and g.energy_from == "counter"
        assert row.tokens == true_tokens
        assert g.energy_j is not None and g.tok_per_j is not None
        assert abs(g.energy_j / true_energy - 1) < TOLERANCE, (row.rung, g.energy_j, true_energy)
        assert abs(g.tok_per_j / (true_tokens / true_energy) - 1) < TOLERANCE, (row.rung, g)
        assert g.power_w is not None and g.power_w > 2 * 60.0  # above two idle GPUs: steps ran
        assert g.tok_per_j == pytest.approx(row.agg_tok_s / g.power_w)  # one window for both
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(run_dir / "run"), "--metrics"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert table.returncode == 0 and "tok/J" in table.stdout, table.stdout + table.stderr
    report = subprocess.run(
        [sys.executable, "-m", "llmload", "report", str(run_dir / "run"), "--out", str(tmp_path / "report")],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    page = next((tmp_path / "report").glob("*.html")).read_text()
    assert "GPU power and energy" in page and "tok/J" in page


def test_the_gpu_and_the_servers_counters_share_the_rungs_one_window(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    power = ("--sim", "idle_w=100", "--sim", "busy_w=0", "--sim", "seq_w=0")  # 100 W, busy or idle
    _sim_gpu_sweep(run_dir, "--sim", "gpus=1", *power, "--scrape-interval", str(SCRAPE_S))
    rows = _json_rows(run_dir)
    requests, steps = load_truth(run_dir / "sim_truth.jsonl")
    records = list(load_run(run_dir / "run").iter_records())
    for row in rows:
        window, server, gpu = row["window"], row["server"], row["gpu"]
        assert set(window) == WINDOW_KEYS and "window" not in server and "window" not in gpu
        assert window["seconds"] == pytest.approx(row["wall_s"]) and window["seconds"] > 0
        mine = [r for r in records if r.rung == row["rung"] and r.phase == "measure"]
        held = held_span([(r.t_start, r.t_end) for r in mine], math.ceil(0.95 * row["conc"]))
        assert window["rule"] == "steady" and (window["start"], window["end"]) == held
        # the GPU: its known power over the window
        assert gpu["energy_from"] == "counter"
        assert gpu["energy_j"] == pytest.approx(100.0 * window["seconds"], rel=0.01), (row["rung"], gpu)
        assert gpu["power_w"] == pytest.approx(100.0, rel=0.01)
        # the server's counter: read at scrapes that bracket the same window; c1's is its whole span,
        # bracketed at the rung's boundaries: all its tokens; c4's steady part is bracketed by the
        # periodic scrapes inside the rung: the tokens the truth's steps made between them
        first, last = server["bracket"]
        assert first <= window["start"] and last >= window["end"]
        made = sum(s["tokens"] for s in steps if first < s["t_end"] <= last)
        if window["ramp_s"] == window["drain_s"] == 0.0:
            truth = sum(requests[r.request_id]["completion_tokens"] for r in mine)
            assert server["generation_tokens"] == truth == row["tokens"] == made
        else:
            assert abs(server["generation_tokens"] - made) <= max(s["tokens"] for s in steps)
        resolution = row["agg_tok_s"] * SCRAPE_S / window["seconds"]  # one scrape interval's tokens, per s
        off = abs(server["generation_tok_s"] - row["agg_tok_s"])
        assert off <= 2 * resolution, (row["rung"], server, row)  # the bracket: up to a scrape interval wider


SCRAPE_S = 0.5
WINDOW_KEYS = {
    "start", "end", "seconds", "rule", "ramp_s", "drain_s", "tokens", "ramp_tokens", "drain_tokens",
}  # fmt: skip


def _json_rows(run_dir: Path) -> list[dict]:
    """`llmload table --format json` of the run."""
    table = subprocess.run(
        [sys.executable, "-m", "llmload", "table", str(run_dir / "run"), "--format", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(table.stdout)


def test_a_gpu_without_the_energy_counter_is_counted_from_its_power(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # GPU 7's power gauge is read at the scrapes: 256 tokens a request so each rung has some 30 of them
    sim = ("--sim", "gpus=8", "--sim", "no_energy_gpus=1")
    proc = _sim_gpu_sweep(run_dir, *sim, "--scrape-interval", "0.25", "--max-tokens", "256")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("GPU metrics:")]
    assert len(notes) == 1 and "energy of GPU 7 from its power gauge" in notes[0], proc.stdout
    result = load_run(run_dir / "run", with_metrics=True)
    assert result.gpu is not None and result.gpu.note is None
    truth_path = run_dir / "sim_truth.jsonl"
    _, steps = load_truth(truth_path)
    lines = [json.loads(line) for line in truth_path.read_text().splitlines() if line.strip()]
    for row, tally in zip(result.rows, result.rungs, strict=True):
        g = result.gpu.rungs[row.rung]
        true_power = _truth_energy(lines, steps, tally.window.start, tally.window.end) / row.wall_s
        assert g.gpus == 8 and g.energy_from == "counter+power" and g.from_power == ["7"]
        assert g.power_w is not None and abs(g.power_w / true_power - 1) < 0.01, (row.rung, g, true_power)
    assert all(r["gpu"]["gpu_energy_from"]["7"] == "power" for r in _json_rows(run_dir))


def test_an_exporter_that_is_down_is_one_note_and_the_run_completes(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    proc = _sweep(tmp_path / "run", "--gpu-metrics", url, "--rungs", "1", "--max-tokens", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split()[0] == "conc" and lines[1].split()[0] == "1", proc.stdout
    notes = [line for line in lines if line.startswith("GPU metrics:")]
    assert len(notes) == 1, proc.stdout
    assert url in notes[0] and "did not answer" in notes[0] and "start the DCGM exporter" in notes[0]
    assert "Traceback" not in proc.stderr


def test_an_exporter_that_keeps_its_values_is_one_note(tmp_path: Path) -> None:
    """The simulator's page kept 2 s (dcgm-exporter's collect interval, scaled to its short rungs):
    its per-rung energy is off, and the run says so once, with what to do."""
    proc = _sim_gpu_sweep(tmp_path / "run", "--sim", "collect_ms=2000")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("GPU metrics:")]
    assert len(notes) == 1 and "kept its values" in notes[0] and "-c 1000" in notes[0], proc.stdout
