"""Secrets and TLS.

- A whole sweep against a simulator that requires a distinctive API key, with the key given by
  --api-key, LOCUST_API_KEY or OPENAI_API_KEY: the key is accepted (requests succeed), and not one
  output of the run holds it: records, Locust's CSVs and HTML report, the run file, every log,
  and the post-processor's table in every format.
- TLS against the simulator behind a self-signed certificate on loopback: verification is on by
  default (the run stops at the preflight with the certificate error, exit 2), --ca-bundle makes
  it pass, --tls-insecure turns it off; and the users' own connections follow the same options.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.core.files.records import read_records
from llmload.runner.sweep_run import run_sweep
from llmload.servers.process import LOOPBACK
from llmload.servers.simulator import sim_flags

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

KEY = "sk-llmload-7f3a9c1e5b2d-SECRET"
SMALL = ["--rungs", "1,2", "--requests-per-user", "2", "--max-tokens", "8", "--warmup-requests", "1"]
FAST = {"accept_len": 1, "base_ms": 2}


def files_with(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("source", ["--api-key", "LOCUST_API_KEY", "OPENAI_API_KEY"])
def test_api_key_leaves_no_trace(tmp_path, sim_start, monkeypatch, source):
    for var in ("LOCUST_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    args = [*SMALL, "--html", str(tmp_path / "run" / "report.html")]
    if source == "--api-key":
        args += ["--api-key", KEY]
    else:
        monkeypatch.setenv(source, KEY)
    sim = sim_start(**FAST, api_key=KEY, faults={"http_500": 0.3}, fault_seed=1)
    run = run_sweep(host=sim.url, run_dir=tmp_path / "run", locust_args=args, timeout=120)
    assert run.returncode == 1, run.log.read_text()[-2000:]  # some injected 500s, no 401
    records, _ = read_records(run.records)
    assert len(records) == 1 + 2 + 4
    assert {r.outcome for r in records} == {"ok", "http_500"}  # the key was accepted

    outputs = [
        subprocess.run(
            [sys.executable, "scripts/sweep_table.py", str(run.prefix), *fmt],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        for fmt in ([], ["--wide", "--metrics"], ["--format", "json"], ["--format", "csv"])
    ]
    assert all(KEY not in p.stdout + p.stderr for p in outputs)
    written = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"locust.log", "report.html", "run_run.json", "run_stats.csv", "run_records.jsonl"} <= written
    assert files_with(tmp_path, KEY) == []
    assert files_with(tmp_path, KEY[8:20]) == []  # nor a part of it


# --- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", f"/CN={LOOPBACK}"]
        + ["-addext", f"subjectAltName=IP:{LOOPBACK}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@contextlib.contextmanager
def tls_simulator(tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[str]:
    """The simulator serving HTTPS on a free loopback port; stopped by its PID."""
    cert, key = certificate
    port_file = tmp_path / "sim.port"
    cmd = [
        sys.executable,
        "-m",
        "llmload.sim",
        "--host",
        LOOPBACK,
        "--port",
        "0",
        "--port-file",
        str(port_file),
    ]
    cmd += sim_flags(ssl_certfile=cert, ssl_keyfile=key, **FAST)
    with (tmp_path / "sim.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "sim.log").read_text()
            time.sleep(0.05)
        yield f"https://{LOOPBACK}:{port_file.read_text().strip()}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_tls_verified_by_default_then_ca_bundle_or_insecure(tmp_path, certificate):
    with tls_simulator(tmp_path, certificate) as url:
        default = run_sweep(host=url, run_dir=tmp_path / "default", locust_args=SMALL, timeout=120)
        bundle = run_sweep(
            host=url, run_dir=tmp_path / "bundle", locust_args=[*SMALL, "--ca-bundle", str(certificate[0])]
        )
        insecure = run_sweep(host=url, run_dir=tmp_path / "insecure", locust_args=[*SMALL, "--tls-insecure"])
    last = default.log.read_text().strip().splitlines()[-1]
    assert default.returncode == 2
    assert last.startswith(
        f"llmload: error: {url}/v1/models: cannot reach the server: [SSL: CERTIFICATE_VERIFY_FAILED]"
    )
    assert not default.records.exists()
    for run in (bundle, insecure):  # every user connection went through TLS and succeeded
        assert run.returncode == 0, run.log.read_text()[-2000:]
        records, _ = read_records(run.records)
        assert len(records) == 7 and all(r.ok and r.output_tokens == 8 for r in records)


@pytest.mark.parametrize(
    ("options", "verified"),
    [({}, False), ({"ca_bundle": "CERT"}, True), ({"tls_insecure": True}, True)],
    ids=["default", "ca-bundle", "insecure"],
)
def test_user_connections_follow_the_tls_options(tmp_path, certificate, options, verified):
    """The users' own connection pool (not only the preflight) verifies by default."""
    from locust.env import Environment

    from llmload.loadgen.request.users import CompletionsUser

    parsed = Namespace(**{"tls_insecure": False, "ca_bundle": "", "api_key": "", **options})
    if parsed.ca_bundle == "CERT":
        parsed.ca_bundle = str(certificate[0])
    with tls_simulator(tmp_path, certificate) as url:
        user_class = type("TLSUser", (CompletionsUser,), {"host": url})
        user = user_class(Environment(user_classes=[user_class], host=url, parsed_options=parsed))
        if verified:
            assert user.transport.http.request("GET", "/v1/models").status_code == 200
        else:
            with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
                user.transport.http.request("GET", "/v1/models")
