"""The live metrics (`llmload.loadgen.monitor.live_series` and its exporters): the Prometheus
endpoint's counters and histograms equal what the records hold, counted here from the records'
fields; the endpoint answers over HTTP; the OTLP push reaches a stub OTLP/HTTP receiver with the
same sums; bad `--metrics-port` and `--otlp` values are one line each."""

from __future__ import annotations

import argparse
import math
import socket
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.core.files.records import RequestRecord, new_record
from llmload.loadgen.monitor.live_series import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, LiveTally
from llmload.loadgen.monitor.prometheus_endpoint import PrometheusEndpoint
from llmload.loadgen.options import metrics_port, otlp_url
from llmload.servers.process import free_port

RUN = "20261206T000000Z-test"


def record(
    n: int, rung: int, outcome: str = "ok", stream: bool = True, phase: str = "measure"
) -> RequestRecord:
    """A record of `rung` whose times and tokens depend on n (gaps of n+1.3 ms between its chunks:
    no time within 0.1 ms of a bucket's bound)."""
    chunks = [0.05 * (n % 7 + 1) + 0.0003 + i * (0.001 * (n + 1) + 0.0003) for i in range(n % 5 + 2)]
    return new_record(
        request_id=f"r{n}",
        rung=rung,
        users=rung + 1,
        phase=phase,
        endpoint="completions",
        stream=stream,
        max_tokens=16,
        t_start=1000.0 + n,
        t_end=1000.0 + n + chunks[-1] + 0.0021 * n + 0.0004,
        t_first=1000.0 + n + chunks[0],
        chunk_times=chunks,
        chunks=len(chunks),
        output_tokens=len(chunks) + n % 3,
        outcome=outcome,
        run_id=RUN,
    )


RECORDS = [
    *(record(n, 0) for n in range(12)),
    *(record(n, 1) for n in range(12, 30)),
    record(30, 1, outcome="http_500"),
    record(31, 1, outcome="timeout"),
    record(32, 1, outcome="timeout"),
    record(33, 1, stream=False),
    record(34, -1, phase="warmup"),
]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def labels(rung: int, phase: str = "measure", **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({"run": RUN, "rung": str(rung), "phase": phase, **more}.items())


def fed_endpoint() -> tuple[PrometheusEndpoint, LiveTally]:
    tally = LiveTally([], lambda: (RUN, 1, 2))
    endpoint = PrometheusEndpoint(tally.gauges)
    tally.exporters = [endpoint]
    for rec in RECORDS:
        tally.record(rec)
    tally.health(RUN, {"worker": "local", "cpu": 12.5, "lag_ms": 3.0})
    return endpoint, tally


def scraped(endpoint: PrometheusEndpoint) -> str:
    from prometheus_client import generate_latest

    return generate_latest(endpoint.registry).decode()


def test_counters_equal_the_records_sums():
    endpoint, _ = fed_endpoint()
    got = samples(scraped(endpoint))
    for rung, phase in ((0, "measure"), (1, "measure"), (-1, "warmup")):
        mine = [r for r in RECORDS if r.rung == rung]
        tokens = sum(r.output_tokens for r in mine if r.outcome == "ok")
        assert got[("llmload_output_tokens_total", labels(rung, phase))] == tokens
        for outcome, count in Counter(r.outcome for r in mine).items():
            assert got[("llmload_requests_total", labels(rung, phase, outcome=outcome))] == count
    assert got[("llmload_rung", frozenset({"run": RUN}.items()))] == 1
    assert got[("llmload_rung_users", frozenset({"run": RUN}.items()))] == 2
    health = frozenset({"run": RUN, "worker": "local"}.items())
    assert got[("llmload_client_cpu_percent", health)] == 12.5
    assert got[("llmload_client_loop_lag_seconds", health)] == 0.003
    assert not any(name.endswith("_created") for name, _ in got)


@pytest.mark.parametrize(
    ("name", "buckets"),
    [
        ("llmload_ttft_seconds", TTFT_BUCKETS),
        ("llmload_itl_seconds", ITL_BUCKETS),
        ("llmload_e2e_seconds", E2E_BUCKETS),
    ],
)
def test_histograms_hold_each_completed_requests_values(name, buckets):
    """Values from the records' raw times: TTFT of streamed completed requests, every gap between
    chunks (one chunk, one token here), end-to-end of every completed request."""
    endpoint, _ = fed_endpoint()
    got = samples(scraped(endpoint))
    for rung in (0, 1):
        done = [r for r in RECORDS if r.rung == rung and r.outcome == "ok"]
        values = {
            "llmload_ttft_seconds": [r.t_first - r.t_start for r in done if r.stream],
            "llmload_itl_seconds": [
                b - a for r in done for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)
            ],
            "llmload_e2e_seconds": [r.t_end - r.t_start for r in done],
        }[name]
        assert got[(f"{name}_count", labels(rung))] == len(values)
        assert got[(f"{name}_sum", labels(rung))] == pytest.approx(sum(values), abs=1e-5)
        for bound in buckets:  # µs rounding of the chunk times: no value lies within 1 µs of a bound
            le = labels(rung, le=str(float(bound)))
            assert got[(f"{name}_bucket", le)] == sum(v <= bound for v in values), bound
        assert got[(f"{name}_bucket", labels(rung, le="+Inf"))] == len(values)


def test_the_endpoint_answers_over_http_and_keeps_its_scrape_times():
    endpoint, _ = fed_endpoint()
    port = free_port()
    endpoint.serve(port)
    try:

        def get() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                return str(answer.read().decode())

        text = gevent.get_hub().threadpool.apply(get)  # a real thread, while the hub serves
        assert samples(text) == samples(scraped(endpoint))
        assert [len(times) for times in endpoint.scrapes.values()] == [1]
        with pytest.raises(OSError):  # the port is taken now
            PrometheusEndpoint(lambda: []).serve(port)
    finally:
        endpoint.stop()


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def test_the_otlp_push_reaches_a_receiver_with_the_same_sums():
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from llmload.loadgen.monitor.otlp_push import OtlpPush

    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        tally = LiveTally([], lambda: (RUN, 1, 2))
        push = OtlpPush(f"http://127.0.0.1:{server.server_address[1]}", tally.gauges)
        tally.exporters = [push]
        for rec in RECORDS:
            tally.record(rec)
        push.close()  # the last export
    finally:
        server.shutdown()
        server.server_close()
    assert _Receiver.bodies
    last: dict[str, dict[frozenset[tuple[str, str]], Any]] = {}
    for body in _Receiver.bodies:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        key = frozenset((a.key, a.value.string_value) for a in point.attributes)
                        last.setdefault(metric.name, {})[key] = point
    for rung, phase in ((0, "measure"), (1, "measure"), (-1, "warmup")):
        mine = [r for r in RECORDS if r.rung == rung and r.outcome == "ok"]
        assert last["llmload_output_tokens"][labels(rung, phase)].as_int == sum(r.output_tokens for r in mine)
        e2e = last["llmload_e2e_seconds"][labels(rung, phase)]
        assert e2e.count == len(mine) and list(e2e.explicit_bounds) == list(E2E_BUCKETS)
        assert math.isclose(e2e.sum, sum(r.t_end - r.t_start for r in mine), abs_tol=1e-6)
    timeouts = last["llmload_requests"][labels(1, outcome="timeout")]
    assert timeouts.as_int == 2
    assert last["llmload_rung_users"][frozenset({"run": RUN}.items())].as_double == 2


def _busy_port() -> tuple[socket.socket, int]:
    held = socket.socket()
    held.bind(("", 0))
    held.listen()
    return held, held.getsockname()[1]


@pytest.mark.parametrize("text", ["", "x", "-1", "65536", "1" + "0" * 400, "1.5", "inf"])
def test_a_metrics_port_out_of_range_is_refused_in_one_line(text):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        metrics_port(text)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200


def test_a_busy_metrics_port_is_refused_and_a_free_one_taken():
    held, port = _busy_port()
    with held, pytest.raises(argparse.ArgumentTypeError, match=f"port {port} cannot be served"):
        metrics_port(str(port))
    assert metrics_port("0") == 0
    assert metrics_port(str(free_port())) > 0


@pytest.mark.parametrize("text", ["collector:4318", "ftp://x", "http://", "http://h:99999", "//h/v1"])
def test_an_otlp_value_that_is_no_url_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        otlp_url(text)
    assert otlp_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318"


def test_the_end_of_a_run_waits_for_each_regular_scrapers_next_scrape():
    """Two scrapers (Prometheus every 1 s, a script every 0.25 s) and one that stopped long ago:
    the wait ends at the later of the two regular scrapers' next scrapes; with nobody scraping
    regularly it does not wait."""
    endpoint = PrometheusEndpoint(lambda: [])
    ended = time.time()
    prometheus, script, gone = ("127.0.0.1", "Prometheus/2"), ("127.0.0.1", "curl"), ("10.0.0.1", "x")
    endpoint.scrapes = {
        gone: [ended - 100, ended - 99],
        prometheus: [ended - 1.5, ended - 0.5],
        script: [ended - 0.3, ended - 0.05],
    }

    def scrape(who: tuple[str, str], after: float) -> None:
        gevent.sleep(after)
        endpoint.scrapes[who].append(time.time())

    gevent.spawn(scrape, script, 0.1)
    gevent.spawn(scrape, prometheus, 0.4)
    endpoint.wait_for_scrapes(ended, 60)
    waited = time.time() - ended
    assert 0.4 <= waited < 1.0, waited
    endpoint.scrapes = {gone: [ended - 100, ended - 99]}
    started = time.time()
    endpoint.wait_for_scrapes(time.time(), 60)
    assert time.time() - started < 0.05
