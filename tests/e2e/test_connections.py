"""Connections as a real client holds them (llmload.loadgen.transport.connections), against the simulator's
truth log: which connection the server saw each request on, and when each connection was
accepted.

Ground truth used: the simulator logs every accepted connection (id, peer port) and the
connection of every request, so "a request reused a connection" is checked as "the server saw an
earlier request on the same connection", and a record's `conn_port` must be that connection's
peer port. Tokens are checked against the server's `completion_tokens`.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from fixtures.connections import MAX_TOKENS, Paired, drive, pair
from fixtures.fleet import self_signed_cert

from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.core.files.records import RequestRecord, read_records
from llmload.core.stats import percentile
from llmload.loadgen.transport.preflight import tls_context
from llmload.output.table import render
from llmload.runner.sweep_run import run_sweep
from llmload.servers.process import LOOPBACK
from llmload.servers.simulator import sim_flags

FAST = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.5}


def check_against_truth(p: Paired) -> None:
    """Zero failures, exact tokens, and every record's connection facts match the server's."""
    assert all(r.ok for r in p.records), Counter(r.outcome for r in p.records)
    assert sum(r.output_tokens for r in p.records) == len(p.records) * MAX_TOKENS
    assert sum(p.truth[r.request_id]["completion_tokens"] for r in p.records) == len(p.records) * MAX_TOKENS
    seen: set[int] = set()
    for rec in sorted(p.records, key=lambda r: r.t_start):
        conn = p.truth[rec.request_id]["connection"]
        assert rec.conn_reused == (conn in seen), rec
        assert rec.conn_port == p.connections[conn]["peer_port"]
        assert (rec.connect_ms is not None) == (not rec.conn_reused)
        seen.add(conn)


def new_connection_records(p: Paired) -> list:
    return [r for r in p.records if not r.conn_reused]


@pytest.mark.parametrize("users", [1, 4, 10])
def test_keep_alive_reuses_one_connection_per_user(sim_start, users):
    sim = sim_start(**FAST)
    per_user = 200 // users if users == 4 else 30
    p = pair(sim.truth_log, drive(sim.url, users=users, per_user=per_user))
    check_against_truth(p)
    assert len(p.served_connections()) == users
    assert len(new_connection_records(p)) == users
    assert all(r.reconnect is None for r in p.records)
    assert all(r.stamps == "kernel" for r in p.records)  # receive stamps on pooled connections too
    # TTFT as measured minus TTFT as the server saw it (request received -> first token written):
    # with a reused connection only the request's transit and the first chunk's are left
    diffs = [
        (r.t_first - r.t_start - (p.truth[r.request_id]["first_token"] - p.truth[r.request_id]["received"]))
        * 1000.0
        for r in p.records
        if r.conn_reused
    ]
    assert percentile(diffs, 50) < 0.5, f"median client-server TTFT difference {percentile(diffs, 50):.3f} ms"


def test_connection_close_mode_opens_one_per_request(sim_start):
    sim = sim_start(**FAST)
    p = pair(sim.truth_log, drive(sim.url, users=4, per_user=25, mode="close"))
    check_against_truth(p)
    assert len(p.served_connections()) == 100
    assert all(r.reconnect is None for r in p.records)  # by design, not a reconnect


@pytest.mark.parametrize(
    ("flags", "users", "per_user", "think_s", "reason"),
    [
        ({"close_after_stream": True}, 4, 50, 0.0, "closed"),
        ({"keep_alive_timeout": 1}, 25, 8, 2.0, "expired"),
        ({"max_requests_per_connection": 3}, 4, 50, 0.0, "closed"),
    ],
    ids=["close-after-stream", "keep-alive-timeout", "max-requests"],
)
def test_server_closed_connections_are_reconnects_not_failures(
    sim_start, flags, users, per_user, think_s, reason
):
    sim = sim_start(**FAST, **flags)
    p = pair(sim.truth_log, drive(sim.url, users=users, per_user=per_user, think_s=think_s))
    assert len(p.records) == 200
    check_against_truth(p)
    opened = new_connection_records(p)
    assert len(opened) == len(p.served_connections())
    # every new connection after a user's first is a recorded reconnect
    reconnects = Counter(r.reconnect for r in opened)
    assert reconnects[None] == users, reconnects
    assert sum(reconnects.values()) - users == len(opened) - users
    assert set(reconnects) - {None} <= {reason, "resent"}, reconnects
    if "max_requests_per_connection" in flags:
        assert len(opened) == users * -(-per_user // 3)
        assert all(n <= 3 for n in Counter(p.truth[r.request_id]["connection"] for r in p.records).values())
    if "keep_alive_timeout" in flags:
        assert len(opened) == 200  # every request came after more than the idle timeout


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture
def tls_sim(tmp_path):
    """The simulator over HTTPS with a self-signed certificate for 127.0.0.1: (url, truth log, CA file)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    cert, key = self_signed_cert(tmp_path)
    port_file, truth = tmp_path / "port", tmp_path / "truth.jsonl"
    flags = sim_flags(ssl_certfile=cert, ssl_keyfile=key, truth_log=truth, port_file=port_file, **FAST)
    with (tmp_path / "sim.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmload.sim", "--port", "0", *flags], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        yield f"https://{LOOPBACK}:{port_file.read_text().strip()}", truth, cert
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_tls_handshake_only_on_new_connections(tls_sim):
    url, truth_log, cert = tls_sim
    by_mode = {}
    for mode in ("keep-alive", "close"):
        records = drive(
            url, users=1, per_user=100, mode=mode, ssl_context_factory=lambda: tls_context(str(cert))
        )
        p = pair(truth_log, records)
        check_against_truth(p)
        assert all(p.connection_of(r)["tls"] for r in p.records)
        assert all((r.tls_ms is not None and r.tls_ms > 0) == (not r.conn_reused) for r in p.records)
        by_mode[mode] = p
    assert len(new_connection_records(by_mode["keep-alive"])) == 1
    assert len(new_connection_records(by_mode["close"])) == 100

    def client_extra_ms(p: Paired, r: RequestRecord) -> float:
        """The client's TTFT of `r` beyond the server's own (received to first token), ms."""
        truth = p.truth[r.request_id]
        return (r.t_first - r.t_start) * 1000.0 - (truth["first_token"] - truth["received"]) * 1000.0

    setup = percentile([r.connect_ms + r.tls_ms for r in by_mode["close"].records], 50)
    # the TTFT a new connection adds is its own connect + TLS time, beyond what the server did: taken
    # request by request (each one's own setup time subtracted), so the machine's jitter in setup
    # times does not enter twice
    close = by_mode["close"]
    reused = by_mode["keep-alive"]
    extra = (
        setup
        + percentile([client_extra_ms(close, r) - (r.connect_ms + r.tls_ms) for r in close.records], 50)
        - percentile([client_extra_ms(reused, r) for r in reused.records], 50)
    )
    assert abs(extra - setup) < max(0.5, 0.2 * setup), f"TTFT grew {extra:.2f} ms, connect+TLS {setup:.2f} ms"


def test_locust_run_keeps_one_connection_per_user(tmp_path):
    """Through Locust (default `connection: keep-alive`): 200 requests at conc 4 open 4 connections
    (other connections, preflight's and the /metrics scrapes, carry no generation request)."""
    config = tmp_path / "ladder.yaml"
    config.write_text("rungs: [4]\nrequests_per_user: 50\nwarmup_requests: 0\nmax_tokens: 8\n")
    run = run_sweep(run_dir=tmp_path, locust_args=["--ladder", str(config)], sim=FAST, timeout=180)
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    p = pair(run.truth_log, records)
    assert len(records) == 200
    check_against_truth(p)
    assert len(p.served_connections()) == 4
    (row,) = sweep_rows(tally_rungs(records))
    assert row.new_connections == 4
    opened = [r for r in records if not r.conn_reused]
    # the kernel's handshake on loopback: tens of microseconds, inside the connect's wall time
    assert all(r.handshake_ms is not None and 0.0 <= r.handshake_ms <= r.connect_ms for r in opened)
    assert max(r.handshake_ms for r in opened) < 1.0
    # 4 connects on loopback in 200 requests do not move the TTFT p50: no note (issue 40)
    assert row.connect_ttft_ms is not None and abs(row.connect_ttft_ms) < 0.05 * row.ttft_p50_ms
    assert "connections opened" not in render([row])
