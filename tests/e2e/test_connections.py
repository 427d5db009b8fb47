"""Connections as a real client holds them (llmload.loadgen.connections), against the simulator's
truth log: which connection the server saw each request on, and when each connection was
accepted.

Ground truth used: the simulator logs every accepted connection (id, peer port) and the
connection of every request, so "a request reused a connection" is checked as "the server saw an
earlier request on the same connection", and a record's `conn_port` must be that connection's
peer port. Tokens are checked against the server's `completion_tokens`.
"""

from __future__ import annotations

from collections import Counter

import pytest
from fixtures.connections import MAX_TOKENS, Paired, drive, pair

from llmload.core.stats import percentile

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
