"""The generator's self-calibration (llmload.analysis.health): the health file every run writes, and the
saturation flag, checked on a deliberately saturated run and a light one. Whether the generator
really was late is judged against the simulator's truth log (when each chunk left the server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.analysis.health import (
    CPU_SATURATED_PCT,
    LAG_SATURATED_MS,
    SAMPLE_INTERVAL_S,
    health_path,
    read_health,
    rung_health,
    timing_errors,
)
from llmload.analysis.postprocess import load_run, render_run
from llmload.cli.sweep_run import SweepRun, run_sweep
from llmload.core.records import read_records
from llmload.core.stats import percentile
from llmload.sim.truth import load_truth

SCHEMA = {"t", "worker", "cpu", "rss", "lag_ms"}
BUSY_LOCUSTFILE = Path(__file__).resolve().parents[1] / "fixtures" / "busy_locustfile.py"


def sample(t: float, cpu: float, lag_ms: float, worker: str = "w1") -> dict:
    return {"t": t, "worker": worker, "cpu": cpu, "rss": 1, "lag_ms": lag_ms}


def test_rung_health_uses_the_samples_of_the_rung_window():
    samples = [
        sample(100.0 + i, cpu, lag) for i, (cpu, lag) in enumerate([(99, 80), (40, 1), (50, 2), (60, 3)])
    ]
    # window [100.5, 103.0]: the samples ending at 101, 102, 103 lie at least half in it
    health = rung_health(samples, 100.5, 103.0)
    assert health is not None and health.samples == 3
    assert health.cpu_pct == pytest.approx(50.0)
    assert health.lag_ms == pytest.approx(2.0) and health.lag_max_ms == pytest.approx(3.0)
    assert not health.saturated


def test_a_rung_shorter_than_a_sample_takes_the_sample_overlapping_it_most():
    samples = [sample(10.0, 20, 1), sample(11.0, 95, 30), sample(12.0, 10, 1)]
    health = rung_health(samples, 10.2, 10.4)
    assert health is not None and health.samples == 1 and health.saturated
    assert rung_health(samples, 50.0, 51.0) is None  # no sample near the rung


@pytest.mark.parametrize(
    ("cpu", "lag_ms", "saturated"),
    [
        (CPU_SATURATED_PCT + 5, 1.0, True),
        (30.0, LAG_SATURATED_MS * 2, True),
        (CPU_SATURATED_PCT - 5, LAG_SATURATED_MS / 2, False),
    ],
)
def test_saturation_thresholds(cpu, lag_ms, saturated):
    samples = [sample(1.0 + i, cpu, lag_ms) for i in range(3)]
    health = rung_health(samples, 0.0, 3.0)
    assert health is not None and health.saturated is saturated


def test_the_busiest_worker_decides():
    samples = [sample(2.0, 20, 1, "calm"), sample(2.0, 97, 2, "busy"), sample(3.0, 96, 2, "busy")]
    health = rung_health(samples, 1.0, 3.0)
    assert health is not None and health.worker == "busy" and health.saturated


def test_read_health_skips_broken_lines(tmp_path):
    path = tmp_path / "x_health.jsonl"
    path.write_text(
        json.dumps(sample(1.0, 5, 1)) + "\n{not json\n" + '{"t": 2}\n' + '{"t": 3, "worker": "w", '
    )
    assert read_health(path) == [sample(1.0, 5, 1)]
    assert read_health(tmp_path / "missing_health.jsonl") == []
    assert health_path("reports/x_records.jsonl") == Path("reports/x_health.jsonl")


def chunk_delays_ms(run: SweepRun) -> list[float]:
    truth, _ = load_truth(run.truth_log)
    records, _ = read_records(run.records)
    delays, _ = timing_errors(((r.request_id, r.t_start, r.chunk_times) for r in records if r.ok), truth)
    assert delays
    return [d * 1000.0 for d in delays]


def check_health_file(run: SweepRun) -> None:
    samples = read_health(f"{run.prefix}_health.jsonl")
    assert samples and all(set(s) == SCHEMA for s in samples)
    records, _ = read_records(run.records)
    assert {s["worker"] for s in samples} == {r.worker for r in records}
    # sampled all through the run, one sample per interval
    assert min(s["t"] for s in samples) <= min(r.t_start for r in records) + SAMPLE_INTERVAL_S
    assert max(s["t"] for s in samples) >= max(r.t_end for r in records) - SAMPLE_INTERVAL_S


def checked_sweep(tmp_path: Path, locust_args: list[str], sim: dict) -> SweepRun:
    """A run with no warm-up that must succeed and write a well-formed health file."""
    run = run_sweep(
        run_dir=tmp_path, locust_args=[*locust_args, "--warmup-requests", "0"], sim=sim, timeout=120
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    check_health_file(run)
    return run


def test_a_light_run_is_not_flagged(tmp_path):
    run = checked_sweep(
        tmp_path,
        ["--rungs", "1,4", "--requests-per-user", "2", "--max-tokens", "64"],
        {"accept_len": 1, "base_ms": 20, "per_seq_ms": 1},
    )
    result = load_run(run.prefix)
    assert all(row.generator is not None and not row.saturated for row in result.rows)
    assert "saturated" not in render_run(result)
    assert percentile(chunk_delays_ms(run), 50.0) < 5.0  # the truth agrees: the client kept up


def test_a_saturated_run_is_flagged(tmp_path):
    """256 streams in one process, a token every millisecond each, and a greenlet that holds the
    event loop 30 ms at a time (tests/fixtures/busy_locustfile.py): a generator that cannot keep
    up, on any machine."""
    run = checked_sweep(
        tmp_path,
        ["-f", str(BUSY_LOCUSTFILE), "--rungs", "256", "--rung-duration", "2", "--max-tokens", "128"],
        {"accept_len": 1, "base_ms": 1, "per_seq_ms": 0},
    )
    result = load_run(run.prefix)
    (row,) = result.rows
    assert row.saturated and row.generator["saturated"]
    table = render_run(result)
    assert "256^" in table and "load generator saturated on rung01 c256" in table and "--processes" in table
    assert "ms late (p99)" in table
    assert json.loads(render_run(result, "json"))[0]["saturated"] is True
    # the kernel agrees: messages were read late (arrival stamp -> read), although the recorded
    # times, being the kernel's stamps, are less off than the reads were
    records, _ = read_records(run.records)
    assert percentile([r.read_delay_ms for r in records if r.ok], 50.0) > 5.0
    assert row.generator["read_delay_p99_ms"] > 5.0
