"""The generator's self-calibration (llmload.analysis.run.health): the health file every run writes, and the
saturation flag, checked on a deliberately saturated run and a light one. Whether the generator
really was late is judged against the simulator's truth log (when each chunk left the server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmload.analysis.run.health import (
    CPU_SATURATED_PCT,
    IDLE_GENERATOR_PCT,
    LAG_SATURATED_MS,
    MACHINE_BUSY_PCT,
    SAMPLE_INTERVAL_S,
    STEAL_BUSY_PCT,
    health_path,
    read_health,
    rung_health,
    timing_errors,
)
from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import read_records
from llmload.core.stats import percentile
from llmload.output.run_table import render_run
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.sim.truth import load_truth

SCHEMA = {"t", "worker", "cpu", "rss", "lag_ms", "machine_cpu", "steal", "load1", "cores"}
BUSY_LOCUSTFILE = Path(__file__).resolve().parents[1] / "fixtures" / "busy_locustfile.py"


def sample(t: float, cpu: float, lag_ms: float, worker: str = "w1", **machine: float) -> dict:
    return {"t": t, "worker": worker, "cpu": cpu, "rss": 1, "lag_ms": lag_ms, **machine}


def machine(cpu: float, steal: float = 0.0) -> dict[str, float]:
    return {"machine_cpu": cpu, "steal": steal, "load1": 3.0, "cores": 2}


@pytest.mark.parametrize(
    ("cpu", "lag_ms", "figures", "saturated", "busy"),
    [
        # a late loop in a busy generator on a machine with CPU to spare: the generator's own problem
        (IDLE_GENERATOR_PCT + 10, LAG_SATURATED_MS * 2, machine(60.0), True, False),
        # a late loop in a nearly idle generator: held by something else (start-up work, a
        # moment's load), never called saturated: more processes would not cure it
        (30.0, LAG_SATURATED_MS * 2, machine(60.0), False, False),
        # a late loop, an idle generator, a machine with no idle core left: the machine's
        (5.0, LAG_SATURATED_MS * 2, machine(MACHINE_BUSY_PCT + 5), False, True),
        # ... or the hypervisor taking the CPU
        (5.0, LAG_SATURATED_MS * 2, machine(50.0, steal=STEAL_BUSY_PCT + 5), False, True),
        # a generator that is a large part of a busy machine: still its own load to spread
        (IDLE_GENERATOR_PCT + 20, LAG_SATURATED_MS * 2, machine(99.0), True, False),
        # a generator at full CPU is saturated, however busy the machine is too
        (CPU_SATURATED_PCT + 5, LAG_SATURATED_MS * 2, machine(99.0), True, False),
        # a busy machine and a loop on time: nothing to say
        (5.0, 1.0, machine(99.0), False, False),
        # a generator that wanted its whole core (CPU + run-queue wait) but got 40 % of it: its own
        # load, however full the machine (issue 40: the busy-loop fixture on a loaded machine)
        (40.0, LAG_SATURATED_MS * 4, machine(85.0) | {"wait": 55.0}, True, False),
        (40.0, LAG_SATURATED_MS * 4, machine(99.0) | {"wait": 55.0}, True, False),
        # issue 40's --processes 2 start: 9 % of a core, a late loop, the machine took the CPU
        (9.0, LAG_SATURATED_MS * 4, machine(85.0) | {"wait": 20.0}, False, False),
        (9.0, LAG_SATURATED_MS * 4, machine(95.0) | {"wait": 20.0}, False, True),
        # samples from before the machine's figures: a nearly idle generator is still not saturated
        (5.0, LAG_SATURATED_MS * 2, {}, False, False),
        (IDLE_GENERATOR_PCT + 10, LAG_SATURATED_MS * 2, {}, True, False),
    ],
)
def test_a_late_loop_is_told_from_a_busy_machine(cpu, lag_ms, figures, saturated, busy):
    samples = [sample(1.0 + i, cpu, lag_ms, **figures) for i in range(3)]
    health = rung_health(samples, 0.0, 3.0)
    assert health is not None
    assert (health.saturated, health.machine_busy) == (saturated, busy)
    assert health.as_dict()["machine_busy"] is busy
    assert ("machine_cpu_pct" in health.as_dict()) is bool(figures)
    assert ("wait_pct" in health.as_dict()) is ("wait" in figures)


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
        (IDLE_GENERATOR_PCT + 10, LAG_SATURATED_MS * 2, True),
        (IDLE_GENERATOR_PCT - 10, LAG_SATURATED_MS * 20, False),  # the --processes 2 start of issue 40
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
    assert samples and all(SCHEMA <= set(s) <= SCHEMA | {"wait"} for s in samples)  # wait: Linux
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


@pytest.mark.alone  # it saturates a generator on purpose: its neighbours' figures would move
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
    assert row.saturated and row.generator["saturated"], row.generator
    table = render_run(result)
    assert "256^" in table and "load generator saturated on rung01 c256" in table and "--processes" in table
    assert "the machine was busy" not in table and not row.machine_busy
    assert "ms late (p99)" in table
    assert json.loads(render_run(result, "json"))[0]["saturated"] is True
    # the kernel agrees: messages were read late (arrival stamp -> read), although the recorded
    # times, being the kernel's stamps, are less off than the reads were
    records, _ = read_records(run.records)
    assert percentile([r.read_delay_ms for r in records if r.ok], 50.0) > 5.0
    assert row.generator["read_delay_p99_ms"] > 5.0


# One per core, real-time: while it spins nothing else runs on its core; it spins 45 ms of every
# 50 (under the kernel's 95 % real-time cap), for at most 60 s.
BURNER = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
end = time.monotonic() + 60
while time.monotonic() < end:
    busy_until = time.perf_counter() + 0.045
    while time.perf_counter() < busy_until:
        pass
    time.sleep(0.005)
"""


@pytest.mark.alone  # real-time burners take every core: its neighbours' figures would move
def test_a_busy_machine_is_not_called_a_saturated_generator(tmp_path):
    """A light load (4 streams, a token every 20 ms) while real-time processes keep every core
    busy: the generator is late because it does not get the CPU, not because it uses it, and the
    table must say so instead of advising more processes."""
    burners = [
        subprocess.Popen([sys.executable, "-c", BURNER, str(cpu)], start_new_session=True)
        for cpu in sorted(os.sched_getaffinity(0))
    ]
    try:
        run = checked_sweep(
            tmp_path,
            ["--rungs", "4", "--rung-duration", "6", "--max-tokens", "32"],
            {"accept_len": 1, "base_ms": 20, "per_seq_ms": 0},
        )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    result = load_run(run.prefix)
    (row,) = result.rows
    g = row.generator
    assert g is not None and g["cpu_pct"] <= IDLE_GENERATOR_PCT, g
    assert g["machine_cpu_pct"] >= MACHINE_BUSY_PCT and g["lag_ms"] > LAG_SATURATED_MS, g
    assert row.machine_busy and not row.saturated, g
    table = render_run(result)
    assert "the machine was busy on rung01 c4" in table and "more --processes would not help" in table
    assert "load generator saturated" not in table and "4^" not in table
    data = json.loads(render_run(result, "json"))[0]
    assert data["machine_busy"] is True and data["saturated"] is False
