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
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.cli.sweep_run import LOCUSTFILES, locust_command, target
from llmload.core.files.records import read_records
from llmload.core.files.run_files import RunFiles
from llmload.servers.process import LOOPBACK, free_port
from llmload.sim.truth import load_truth

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
LADDER = [1, 4, 8, 10]
MAX_TOKENS = 128
RUN_TIMEOUT_S = 180.0

pytestmark = pytest.mark.skipif(
    not FAKETIME_LIB.exists() or shutil.which("openssl") is None,
    reason="needs Debian's faketime (libfaketime) and the openssl CLI: apt-get install faketime openssl",
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (cert, key)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key)]
        + ["-out", str(cert), "-subj", f"/CN={LOOPBACK}", "-addext", f"subjectAltName=IP:{LOOPBACK}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def run_fleet(run_dir: Path, cert: tuple[Path, Path], skews_s: list[float]) -> tuple[Path, Path]:
    """A headless master and one worker per skew (its clock moved that far by libfaketime; 0: not
    moved) against a fresh simulator over TLS; (run prefix, truth log). Every process is stopped
    by its PID, every wait bounded."""
    port = free_port()
    locustfile = LOCUSTFILES["completions"]
    prefix = run_dir / "run"
    tls = ["--ca-bundle", str(cert[0])]
    master_args = ["--master", "--master-bind-host", LOOPBACK, "--master-bind-port", str(port)]
    master_args += ["--expect-workers", str(len(skews_s)), "--expect-workers-max-wait", "60"]
    master_args += ["--max-tokens", str(MAX_TOKENS), *tls]
    worker_cmd = [sys.executable, "-m", "locust", "-f", str(locustfile), "--worker", *tls]
    worker_cmd += ["--master-host", LOOPBACK, "--master-port", str(port)]
    sim_args = ["--ssl-certfile", str(cert[0]), "--ssl-keyfile", str(cert[1])]
    procs: list[subprocess.Popen[bytes]] = []
    with target(None, run_dir, {}, sim_args) as (url, truth), (run_dir / "locust.log").open("wb") as out:
        assert truth is not None
        try:
            master = subprocess.Popen(
                locust_command(url, prefix, locustfile, master_args), stdout=out, stderr=subprocess.STDOUT
            )
            procs.append(master)
            for i, skew in enumerate(skews_s):
                env = dict(os.environ)
                if skew:
                    env |= {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"{skew:+g}"}
                    env |= {"FAKETIME_DONT_RESET": "1", "FAKETIME_NO_CACHE": "1"}
                with (run_dir / f"worker{i}.log").open("wb") as wlog:
                    procs.append(subprocess.Popen(worker_cmd, stdout=wlog, stderr=subprocess.STDOUT, env=env))
            assert master.wait(timeout=RUN_TIMEOUT_S) == 0, (run_dir / "locust.log").read_text()[-3000:]
            for worker in procs[1:]:
                worker.wait(timeout=30)  # workers quit when the master does
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
    return prefix, truth


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


@pytest.mark.parametrize("name,skews", [("+200", [0.0, 0.2]), ("-200/+20", [0.02, -0.2])])
def test_skewed_workers_read_like_one_clock(fleets, name, skews):
    same, skewed = table(fleets["same"][0]), table(fleets[name][0])
    for conc in LADDER:
        assert skewed[conc].tokens == same[conc].tokens == conc * MAX_TOKENS
        assert skewed[conc].agg_tok_s == pytest.approx(same[conc].agg_tok_s, rel=0.01), conc
    assert skewed[4].ttft_p50_ms == pytest.approx(same[4].ttft_p50_ms, abs=5.0)


def first_arrivals(prefix: Path, truth_log: Path) -> dict[int, dict[str, float]]:
    """Per rung, each worker's first request's arrival at the simulator less the rung's common
    start (the master's `started`, on the machine's one real clock), in ms."""
    truth = load_truth(truth_log)[0]
    starts = {s["rung"]: s["started"] for s in json.loads(RunFiles(prefix).run.read_text())["stages"]}
    first: dict[int, dict[str, float]] = defaultdict(dict)
    for rec in read_records(RunFiles(prefix).records)[0]:
        if rec.phase == "measure":
            lag = 1000.0 * (truth[rec.request_id]["arrival"] - starts[rec.rung])
            first[rec.rung][rec.worker] = min(first[rec.rung].get(rec.worker, lag), lag)
    return first


@pytest.mark.parametrize("name,skews", [("+200", [0.0, 0.2]), ("-200/+20", [0.02, -0.2])])
def test_workers_start_a_rung_together_at_the_server(fleets, name, skews):
    """No worker's users start before the rung's common start (a clock ahead by 20 or 200 ms
    would send that early), and the two workers' first arrivals are within 5 ms of each other
    at the median rung (a clock behind by 200 ms would send that late)."""
    first = first_arrivals(*fleets[name])
    assert all(lag > -1.0 for lags in first.values() for lag in lags.values()), first
    gaps = [max(lags.values()) - min(lags.values()) for lags in first.values() if len(lags) == 2]
    assert len(gaps) == len(LADDER) - 1, first  # c1's one user runs on one worker
    assert sorted(gaps)[len(gaps) // 2] < 5.0, first


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
    port = free_port()
    prefix = tmp_path / "run"
    master_args = ["--master", "--master-bind-host", LOOPBACK, "--master-bind-port", str(port)]
    master_args += ["--expect-workers", "1", "--expect-workers-max-wait", "60"]
    mute = Path(__file__).parents[1] / "fixtures" / "mute_clock_locustfile.py"
    worker_cmd = [sys.executable, "-m", "locust", "-f", str(mute), "--worker"]
    worker_cmd += ["--master-host", LOOPBACK, "--master-port", str(port)]
    with target(None, tmp_path, {}) as (url, truth), (tmp_path / "locust.log").open("wb") as out:
        master = subprocess.Popen(
            locust_command(url, prefix, LOCUSTFILES["completions"], master_args),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        with (tmp_path / "worker.log").open("wb") as wlog:
            worker = subprocess.Popen(worker_cmd, stdout=wlog, stderr=subprocess.STDOUT)
        try:
            assert master.wait(timeout=60) == 2
            worker.wait(timeout=30)
        finally:
            for proc in (master, worker):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        assert truth is not None and not load_truth(truth)[0]  # no request reached the server
    log = (tmp_path / "locust.log").read_text()
    last = [line for line in log.splitlines() if line.startswith("llmload: error:")]
    assert len(last) == 1 and "answered no clock probe within 5 s" in last[0], log[-2000:]
    assert "Traceback" not in log
    (error,) = json.loads(RunFiles(prefix).run.read_text())["errors"]
    assert error["kind"] == "worker_clock" and error["exit_code"] == 2
