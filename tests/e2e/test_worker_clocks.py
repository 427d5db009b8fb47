"""Workers whose clocks are off still start a rung together and stamp one time line.

A master and two workers on loopback against the simulator over TLS, the built-in ladder
(1/4/8/10 users), one worker's clock moved with libfaketime: +200 ms with a worker at the
master's clock, then -200 ms beside one at +20 ms (an NTP-grade offset). Over TLS every stamp a
worker takes is its own process's clock (kernel receive stamps, which libfaketime does not move,
are read on plain TCP only), so the skewed worker is a worker on another machine.

Ground truth: the simulator's truth log, on the machine's one real clock: each worker's first
request of a rung arrives within 5 ms of the other's; the measured offset in the run file is the
set one within 2 ms; agg tok/s at every rung within 1 % of a same-clock run's, and c4's TTFT p50
within 5 ms (the rung whose same-clock TTFT repeats within a millisecond). Without the correction
the skewed worker's users start 200 ms early (docs/scaling.md says what was measured).
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from fixtures.fleet import run_master_and_workers, self_signed_cert

from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.files.records import read_records
from llmload.core.files.run_files import RunFiles
from llmload.sim.truth import load_truth

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
LADDER = [1, 4, 8, 10]
MAX_TOKENS = 128

pytestmark = pytest.mark.skipif(
    not FAKETIME_LIB.exists() or shutil.which("openssl") is None,
    reason="needs Debian's faketime (libfaketime) and the openssl CLI: apt-get install faketime openssl",
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def run_fleet(run_dir: Path, cert: tuple[Path, Path], skews_s: list[float]) -> tuple[Path, Path]:
    """A master and one worker per skew (its clock moved that far by libfaketime; 0: not moved)
    against a fresh simulator over TLS: (run prefix, truth log)."""
    tls = ["--ca-bundle", str(cert[0])]
    skewed = {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME_DONT_RESET": "1", "FAKETIME_NO_CACHE": "1"}
    run = run_master_and_workers(
        run_dir,
        [{**skewed, "FAKETIME": f"{skew:+g}"} if skew else None for skew in skews_s],
        ["--max-tokens", str(MAX_TOKENS), "--requests-per-user", "1", *tls],  # count-based: one start a rung
        worker_args=tls,
        sim_args=["--ssl-certfile", str(cert[0]), "--ssl-keyfile", str(cert[1])],
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    assert run.truth_log is not None
    return run.prefix, run.truth_log


@pytest.fixture(scope="module")
def fleets(tmp_path_factory, cert) -> dict[str, tuple[Path, Path]]:
    """The same ladder with the workers' clocks as named: both at the master's, one +200 ms, and
    one -200 ms beside one +20 ms."""
    runs = {"same": [0.0, 0.0], "+200": [0.0, 0.2], "-200/+20": [0.02, -0.2]}
    return {
        name: run_fleet(tmp_path_factory.mktemp(f"fleet{i}"), cert, skews)
        for i, (name, skews) in enumerate(runs.items())
    }


def table(prefix: Path) -> dict[int, object]:
    records = [r for r in read_records(RunFiles(prefix).records)[0] if r.phase == "measure"]
    return {row.conc: row for row in sweep_rows(tally_rungs(records))}


@pytest.mark.alone  # starts within 5 ms and a TTFT p50 within 5 ms: beside other runs they move 10-20 ms
@pytest.mark.parametrize("name,skews", [("+200", [0.0, 0.2]), ("-200/+20", [0.02, -0.2])])
def test_skewed_workers_read_like_one_clock(fleets, name, skews):
    same, skewed = table(fleets["same"][0]), table(fleets[name][0])
    for conc in LADDER:
        assert skewed[conc].tokens == same[conc].tokens == conc * MAX_TOKENS
        assert skewed[conc].agg_tok_s == pytest.approx(same[conc].agg_tok_s, rel=0.01), conc
    assert skewed[4].ttft_p50_ms == pytest.approx(same[4].ttft_p50_ms, abs=5.0)


def first_arrivals(prefix: Path, truth_log: Path) -> dict[int, dict[str, float]]:
    """Per rung, each worker's first request on a connection it already had (a new one's TLS
    handshakes queue in the simulator: 10 ms at c4 with the same clocks), as it arrived at the
    simulator, less the rung's common start (the master's `started`; both on the machine's one
    real clock), in ms."""
    truth = load_truth(truth_log)[0]
    starts = {s["rung"]: s["started"] for s in json.loads(RunFiles(prefix).run.read_text())["stages"]}
    first: dict[int, dict[str, float]] = defaultdict(dict)
    for rec in read_records(RunFiles(prefix).records)[0]:
        if rec.phase == "measure" and rec.conn_reused:
            lag = 1000.0 * (truth[rec.request_id]["arrival"] - starts[rec.rung])
            first[rec.rung][rec.worker] = min(first[rec.rung].get(rec.worker, lag), lag)
    return first


@pytest.mark.alone  # starts within 5 ms and a TTFT p50 within 5 ms: beside other runs they move 10-20 ms
@pytest.mark.parametrize("name,skews", [("+200", [0.0, 0.2]), ("-200/+20", [0.02, -0.2])])
def test_workers_start_a_rung_together_at_the_server(fleets, name, skews):
    """No worker's users start before the rung's common start (a clock ahead by 20 or 200 ms
    sends that early: -17 and -195 ms before the correction), none 50 ms after it (one behind by
    200 ms: +203 ms), and at the best rung the two workers' first arrivals are within 5 ms (one
    behind by 20 ms would be 20 ms apart at every rung)."""
    first = first_arrivals(*fleets[name])
    assert all(-1.0 < lag < 50.0 for lags in first.values() for lag in lags.values()), first
    gaps = [max(lags.values()) - min(lags.values()) for lags in first.values() if len(lags) == 2]
    assert len(gaps) >= 2, first  # c8 and c10: each worker has users from the rung before
    assert min(gaps) < 5.0, first


@pytest.mark.alone  # starts within 5 ms and a TTFT p50 within 5 ms: beside other runs they move 10-20 ms
@pytest.mark.parametrize("name,skews", [("+200", [0.0, 0.2]), ("-200/+20", [0.02, -0.2])])
def test_the_run_file_holds_each_workers_offset(fleets, name, skews):
    prefix, _ = fleets[name]
    run = json.loads(RunFiles(prefix).run.read_text())
    offsets = run["clock_offsets"]
    assert len(offsets) == 2
    workers = {}
    for rec in read_records(RunFiles(prefix).records)[0]:
        workers.setdefault(rec.worker, rec.clock_offset_ms)
    measured = sorted(history[-1]["offset_ms"] for history in offsets.values())
    assert measured == pytest.approx(sorted(1000.0 * s for s in skews), abs=2.0)
    for history in offsets.values():
        assert len(history) >= 1 + len(LADDER)  # at the start and before every stage
        assert all(h["uncertainty_ms"] < 1.0 for h in history)


def test_a_worker_that_answers_no_clock_probe_is_refused_at_start(tmp_path):
    """One line naming the worker and the cause, exit 2, the kind in the run file; nothing sent."""
    mute = Path(__file__).parents[1] / "fixtures" / "mute_clock_locustfile.py"
    run = run_master_and_workers(tmp_path, [None], worker_locustfile=mute, timeout=60)
    assert run.returncode == 2
    assert run.truth_log is not None and not load_truth(run.truth_log)[0]  # no request reached the server
    log = run.log.read_text()
    last = [line for line in log.splitlines() if line.startswith("llmload: error:")]
    assert len(last) == 1 and "answered no clock probe within 5 s" in last[0], log[-2000:]
    assert "Traceback" not in log
    (error,) = json.loads(RunFiles(run.prefix).run.read_text())["errors"]
    assert error["kind"] == "worker_clock" and error["exit_code"] == 2
