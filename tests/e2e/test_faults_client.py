"""The request client against the simulator, one request at a time: each timeout (connect, first
token, total) ends a request as `timeout` before the server would have answered, a closed port is
`connect_error`, and retries happen only when configured, after the server's Retry-After. Each
test runs with both stream readers (the process's StreamReader, and line by line)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from fixtures.sockets import unanswered_port
from geventhttpclient import HTTPClient

from llmload.core.config import RetryConfig, SweepConfig
from llmload.core.files.records import RequestRecord
from llmload.loadgen.request.client import RequestContext, send_request
from llmload.loadgen.transport.exchange import Transport
from llmload.loadgen.transport.receive_stamps import stamp_receive_times
from llmload.loadgen.workload.payload import COMPLETIONS_PATH, build_payload
from llmload.servers.process import LOOPBACK, free_port
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

FAST = {"accept_len": 1, "base_ms": 2, "per_seq_ms": 0.5}


def plain_client(url: str, *, connect: float = 5.0, first_token: float = 5.0) -> HTTPClient:
    """A client without kernel stamps (its streams are read line by line)."""
    return HTTPClient.from_url(url, connection_timeout=connect, network_timeout=first_token, concurrency=1)


@pytest.fixture(params=["stream_reader", "line_by_line"])
def client(request: pytest.FixtureRequest) -> Callable[..., HTTPClient]:
    """Makes the client; each test runs with both ways of reading a stream: the process's
    StreamReader (plain TCP with kernel stamps, as Locust users read) and line by line in the
    request's greenlet (what TLS streams use)."""

    def make(url: str, *, connect: float = 5.0, first_token: float = 5.0) -> HTTPClient:
        http = plain_client(url, connect=connect, first_token=first_token)
        if request.param == "stream_reader":
            assert stamp_receive_times(http)
        return http

    return make


def send(
    http: HTTPClient, *, max_tokens: int = 16, total: float = 30.0, retries: RetryConfig | None = None
) -> list[RequestRecord]:
    """One logical request; the records of all its attempts."""
    config = SweepConfig(max_tokens=max_tokens)
    ctx = RequestContext(uuid.uuid4().hex, 0, 1, "measure", "completions", True, max_tokens, "test")
    records: list[RequestRecord] = []
    send_request(
        Transport(http),
        COMPLETIONS_PATH,
        build_payload(config, "sim-model", config.prompt, max_tokens),
        {"Content-Type": "application/json"},
        ctx,
        total_timeout=total,
        retries=retries or RetryConfig(),
        report=records.append,
    )
    return records


def truth_of(sim, records: list[RequestRecord]) -> dict[str, dict]:
    """The truth log once it holds every record's request: the server writes a request's line
    just after the response's last bytes, so the client can be a moment ahead of it."""
    deadline = time.monotonic() + 10
    while True:
        truth, _ = load_truth(sim.truth_log)
        if {r.request_id for r in records} <= set(truth) or time.monotonic() > deadline:
            return truth
        time.sleep(0.05)


def test_connect_timeout(client):
    with unanswered_port() as port:
        (rec,) = send(client(f"http://{LOOPBACK}:{port}", connect=0.3))
    assert rec.outcome == "timeout" and "no connection" in rec.error
    assert rec.e2e_s < 3.0  # the connect timeout, not the 30 s total one


def test_closed_port_is_connect_error(client):
    (rec,) = send(client(f"http://{LOOPBACK}:{free_port()}"))
    assert rec.outcome == "connect_error" and rec.status is None


def test_first_token_timeout_on_slow_headers(client, sim_start):
    sim = sim_start(**FAST, faults={"slow_headers": 1.0}, slow_headers_s=3)
    (rec,) = send(client(sim.url, first_token=0.3))
    assert rec.outcome == "timeout" and rec.status is None and rec.output_tokens == 0
    assert rec.e2e_s < 2.0  # gave up before the server answered


def test_first_token_timeout_between_chunks(client, sim_start):
    sim = sim_start(**FAST, faults={"stall": 1.0}, stall_s=3)
    (rec,) = send(client(sim.url, first_token=0.3))
    assert rec.outcome == "timeout" and rec.status == 200
    assert rec.output_tokens == rec.chunks == 1  # the chunk before the stall, reported as partial
    assert rec.e2e_s < 2.0


def test_total_timeout(client, sim_start):
    sim = sim_start(accept_len=1, base_ms=20, per_seq_ms=0)  # 64 tokens take ~1.3 s
    (rec,) = send(client(sim.url), max_tokens=64, total=0.4)
    assert rec.outcome == "timeout" and rec.error == "request exceeded 0.4 s"
    assert 0 < rec.output_tokens < 64
    (ok,) = send(client(sim.url), max_tokens=64, total=10)  # the same request in time
    assert ok.ok and ok.output_tokens == 64


def test_no_retries_by_default(client, sim_start):
    sim = sim_start(**FAST, faults={"http_429": 1.0})
    (rec,) = send(client(sim.url))
    assert rec.outcome == "http_429"
    truth = truth_of(sim, [rec])
    assert list(truth) == [rec.request_id]


@pytest.mark.parametrize("status", [429, 503])
def test_retries_honour_retry_after_and_record_each_attempt(client, sim_start, status):
    sim = sim_start(**FAST, faults={f"http_{status}": 0.5}, fault_seed=3)
    http = client(sim.url)
    retries = RetryConfig(max=2, on_status=(status,), backoff_s=0.2)
    chains = [send(http, retries=retries) for _ in range(8)]
    records = [r for chain in chains for r in chain]
    truth = truth_of(sim, records)
    assert sorted(r.request_id for r in records) == sorted(truth)  # one record per attempt
    assert any(len(chain) > 1 for chain in chains)
    for chain in chains:
        first = chain[0].request_id
        assert [r.request_id for r in chain] == [first] + [f"{first}-retry{n}" for n in range(1, len(chain))]
        assert all(r.outcome == f"http_{status}" for r in chain[:-1])
        assert chain[-1].ok or len(chain) == 3  # retried until success or max
        for n, (prev, nxt) in enumerate(zip(chain, chain[1:], strict=False), start=1):
            # 429 carries Retry-After: 1 (honoured); 503 carries none: backoff 0.2 * 2**(n-1)
            wait = 1.0 if status == 429 else 0.2 * 2 ** (n - 1)
            assert nxt.t_start - prev.t_end >= wait - 0.01  # timer granularity
        for r in chain:
            assert r.output_tokens == (truth[r.request_id]["completion_tokens"] if r.ok else 0)
