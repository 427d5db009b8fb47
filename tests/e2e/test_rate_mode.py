"""Request-rate mode: the arrival schedule (pure functions) and a real `locust` run in rate mode
checked against the simulator's truth log (when each request really arrived)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.config import ConfigError, parse_config
from llmload.core.files.records import read_records
from llmload.core.stats import mean, percentile, pstdev
from llmload.loadgen.workload.arrivals import ArrivalQueue, arrival_count, arrival_offsets, slot_ranges
from llmload.output.table import SCHEDULED_COLUMNS, render
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

FAST_SIM = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.2}


def cv(values: list[float]) -> float:
    return pstdev(values) / mean(values)


def gaps(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in zip(ordered, ordered[1:], strict=False)]


@pytest.mark.parametrize(("burstiness", "expected_cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_schedule_rate_is_exact_and_shape_follows_burstiness(burstiness, expected_cv):
    offsets = arrival_offsets(10.0, 20001, burstiness=burstiness, seed=3)
    assert offsets[0] == 0.0
    assert offsets[-1] == pytest.approx(2000.0)  # 20000 gaps of mean 1/10 s exactly
    assert cv(gaps(offsets)) == pytest.approx(expected_cv, rel=0.05)


def test_poisson_gaps_are_exponential():
    g = gaps(arrival_offsets(1.0, 20001, seed=1))
    # exponential with mean 1: P(gap > x) = exp(-x)
    for x, survival in ((0.5, 0.6065), (1.0, 0.3679), (2.0, 0.1353), (3.0, 0.0498)):
        assert sum(v > x for v in g) / len(g) == pytest.approx(survival, abs=0.01)


def test_schedule_is_seeded():
    assert arrival_offsets(5.0, 50, seed=7, rung=1) == arrival_offsets(5.0, 50, seed=7, rung=1)
    assert arrival_offsets(5.0, 50, seed=7, rung=1) != arrival_offsets(5.0, 50, seed=8, rung=1)
    assert arrival_offsets(5.0, 50, seed=7, rung=1) != arrival_offsets(5.0, 50, seed=7, rung=2)


def test_processes_split_the_one_schedule_by_their_users():
    offsets = arrival_offsets(5.0, 101, seed=2)
    ranges = slot_ranges({"w2": 1, "w1": 3})
    assert ranges == {"w1": (0, 3), "w2": (3, 4)}
    taken: list[tuple[int, float]] = []
    sizes = {}
    for process, slots in ranges.items():
        queue = ArrivalQueue(100.0, offsets, slots, 4)
        sizes[process] = len(queue)
        while (item := queue.take()) is not None:
            taken.append(item)
    assert sorted(taken) == [(j, 100.0 + off) for j, off in enumerate(offsets)]
    assert sizes == {"w1": 76, "w2": 25}
    assert arrival_count(2.5, None, 10.0) == 25 and arrival_count(2.5, 7, 10.0) == 7


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ({"mode": "rate", "rungs": [2.5]}, "'mode: rate' needs 'requests_per_rung' or 'duration'"),
        ({"rungs": [2.5]}, "'rungs[0]' must be an integer user count"),
        ({"arrival": "poisson", "burstiness": 2}, "'burstiness' applies to 'arrival: gamma'"),
        ({"arrival": "uniform"}, "'arrival' must be one of poisson, gamma"),
        ({"mode": "rate", "rungs": [0], "duration": 5}, "'rungs[0]' must be an integer >= 1"),
    ],
)
def test_rate_config_errors(yaml_text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(yaml_text, source="rate.yaml")


def rate_run(tmp: Path, text: str, **kw) -> tuple[list, dict]:
    config = tmp / "rate.yaml"
    config.write_text(text)
    run = run_sweep(
        run_dir=tmp, locust_args=["--ladder", str(config), *kw.get("args", [])], sim=FAST_SIM, timeout=240
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    truth, _ = load_truth(run.truth_log)
    records, skipped = read_records(run.records)
    assert not skipped
    return [r for r in records if r.phase == "measure"], truth


@pytest.fixture(scope="module")
def poisson_run(tmp_path_factory):
    """500 Poisson arrivals at 40/s with 16 slots (rarely all busy), then 150 at 400/s with 4
    slots (always saturated: requests wait for a slot)."""
    text = (
        "mode: rate\nrungs: [40, 400]\nrequests_per_rung: 500\nmax_concurrency: 16\nmax_tokens: 8\n"
        "warmup_requests: 1\nseed: 11\n"
    )
    return rate_run(tmp_path_factory.mktemp("poisson"), text)


def test_poisson_rate_and_shape_against_truth(poisson_run):
    records, truth = poisson_run
    rung = [r for r in records if r.rung == 0]
    assert len(rung) == 500 and all(r.ok and r.rate == 40.0 for r in rung)
    arrivals = [truth[r.request_id]["arrival"] for r in rung]
    g = gaps(arrivals)
    assert len(g) / (max(arrivals) - min(arrivals)) == pytest.approx(40.0, rel=0.05)
    assert cv(g) == pytest.approx(1.0, abs=0.15)  # exponential gaps: CV 1 (3 sigma at n = 500)
    # each request reached the server when its schedule said (plus transit), not later
    late_ms = [(truth[r.request_id]["arrival"] - r.t_scheduled) * 1000.0 for r in rung]
    assert percentile(late_ms, 50) < 5.0


def test_saturated_rung_records_the_wait_for_a_slot(poisson_run):
    records, truth = poisson_run
    rung = [r for r in records if r.rung == 1]
    assert len(rung) == 500 and all(r.ok for r in rung)
    # never more than 16 requests in flight at the server
    events = sorted(
        [(truth[r.request_id]["arrival"], 1) for r in rung]
        + [(truth[r.request_id]["last_token"], -1) for r in rung]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 16
    waits = [(r.t_start - r.t_scheduled) * 1000.0 for r in rung]
    assert percentile(waits, 50) > 10.0  # 400/s is more than 16 slots serve
    # a request reached the server after its recorded wait, never before (1 ms: clock reads)
    for r, wait in zip(rung, waits, strict=True):
        assert (truth[r.request_id]["arrival"] - r.t_scheduled) * 1000.0 >= wait - 1.0
    m = tally_rungs(rung)[0].metrics()
    assert m.rate == 400.0 and m.latencies["queue_wait"].median == pytest.approx(percentile(waits, 50))


def test_gamma_burstiness_changes_the_spread(tmp_path):
    text = (
        "mode: rate\nrungs: [30]\nrequests_per_rung: 300\nmax_concurrency: 32\nmax_tokens: 4\n"
        "arrival: gamma\nburstiness: 4\nwarmup_requests: 0\n"
    )
    records, truth = rate_run(tmp_path, text)
    g = gaps([truth[r.request_id]["arrival"] for r in records])
    assert len(records) == 300
    assert cv(g) == pytest.approx(0.5, abs=0.1)  # 1/sqrt(4); Poisson would be 1


def test_two_processes_send_the_one_schedule(tmp_path):
    text = "mode: rate\nrungs: [40]\nrequests_per_rung: 200\nmax_concurrency: 8\nmax_tokens: 4\n"
    records, truth = rate_run(tmp_path, text, args=["--processes", "2"])
    assert len(records) == 200 and len({r.worker for r in records}) == 2
    # both processes computed the same schedule and each sent its share once
    assert sorted(r.t_scheduled - min(x.t_scheduled for x in records) for r in records) == pytest.approx(
        arrival_offsets(40.0, 200, seed=0, rung=0), abs=1e-6
    )
    arrivals = [truth[r.request_id]["arrival"] for r in records]
    assert 199 / (max(arrivals) - min(arrivals)) == pytest.approx(40.0, rel=0.05)


def test_the_row_times_ttft_and_e2el_from_the_scheduled_arrival(poisson_run):
    """The row's latencies from the intended time against the truth log: the server's first and
    last token less each request's scheduled arrival (their p50, within the transit of a token
    back to the client); `waited` the requests sent more than 1 ms after their scheduled arrival,
    all of the saturated rung's."""
    records, truth = poisson_run
    rows = sweep_rows(tally_rungs(records))
    for row in rows:
        rung = [r for r in records if r.rung == row.rung]
        sched = row.scheduled
        assert sched is not None
        for key, when in (("ttft_p50_ms", "first_token"), ("e2el_p50_ms", "last_token")):
            truth_ms = percentile([(truth[r.request_id][when] - r.t_scheduled) * 1000.0 for r in rung], 50)
            assert sched[key] == pytest.approx(truth_ms, abs=2.0), key
        # from the intended time: the send's latency plus the wait
        assert sched["ttft_p50_ms"] >= row.ttft_p50_ms
        late = [(r.t_start - r.t_scheduled) * 1000.0 > 1.0 for r in rung]
        assert sched["waited"] == sum(late) and sched["waited_share"] == pytest.approx(sum(late) / len(rung))
        assert sched["queue_wait_p50_ms"] == pytest.approx(
            percentile([(r.t_start - r.t_scheduled) * 1000.0 for r in rung], 50)
        )
    assert rows[1].scheduled["waited_share"] > 0.5  # 400/s is more than 16 slots serve
    header = render(rows).splitlines()[0].split()
    assert header[header.index("ttft_p50_ms") + 1 :][:4] == list(SCHEDULED_COLUMNS)
