"""Kernel receive timestamps (llmload.loadgen.transport.receive_stamps): a request streamed while the client's
event loop is blocked again and again (a greenlet that hogs the CPU for 15 ms at a time, as another
request's end-of-request work or a garbage collection would) is still timed to the simulator's own
write times, and the record says how late the generator read it. The same request through a client
without stamps shows the hog does delay the reads, so the first test can fail."""

from __future__ import annotations

import gevent
import pytest
from gevent.monkey import get_original
from geventhttpclient import HTTPClient
from test_faults_client import plain_client, send, truth_of

from llmload.core.files.records import RequestRecord
from llmload.loadgen.transport.receive_stamps import stamp_receive_times

SLOW_STEPS = {"accept_len": 1, "base_ms": 40, "per_seq_ms": 0}  # one message every 40 ms
HOG_S = 0.015
TOKENS = 8
blocking_sleep = get_original("time", "sleep")  # time.sleep itself yields once Locust patched it


def send_while_hogged(http: HTTPClient) -> RequestRecord:
    def hog() -> None:
        while True:
            blocking_sleep(HOG_S)  # blocks the whole event loop, as CPU work does
            gevent.sleep(0.001)

    hogger = gevent.spawn(hog)
    try:
        (rec,) = send(http, max_tokens=TOKENS)
    finally:
        hogger.kill()
    assert rec.ok and rec.output_tokens == TOKENS
    return rec


def message_errors_ms(rec: RequestRecord, truth: dict) -> list[float]:
    """Per content message: when the client says it arrived minus when the server wrote it. The
    last token is timed by the closing messages written with it (usage, [DONE]): its error is
    counted from when the server finished writing them, as no client can time it better when
    they arrive together."""
    written = list(truth[rec.request_id]["chunk_times"])
    assert len(written) == len(rec.chunk_times) == TOKENS
    closed = truth[rec.request_id]["closed"]
    if rec.t_start + rec.chunk_times[-1] > written[-1]:
        written[-1] = min(rec.t_start + rec.chunk_times[-1], closed)
    return [(rec.t_start + c - w) * 1000.0 for c, w in zip(rec.chunk_times, written, strict=True)]


@pytest.mark.skipif(not stamp_receive_times(plain_client("http://127.0.0.1:1")), reason="Linux only")
def test_kernel_stamps_remove_the_generators_own_delay(sim_start):
    sim = sim_start(**SLOW_STEPS)
    http = plain_client(sim.url)
    assert stamp_receive_times(http)
    rec = send_while_hogged(http)
    errors = message_errors_ms(rec, truth_of(sim, [rec]))
    assert rec.stamps == "kernel"
    assert max(abs(e) for e in errors) < 1.0, errors  # the latency bar of the metrics tests
    assert rec.read_delay_ms is not None and rec.read_delay_ms > HOG_S * 1000.0 / 3


def test_without_stamps_the_reads_are_late(sim_start):
    sim = sim_start(**SLOW_STEPS)
    rec = send_while_hogged(plain_client(sim.url))
    errors = message_errors_ms(rec, truth_of(sim, [rec]))
    assert rec.stamps == "user" and rec.read_delay_ms is None
    assert max(errors) > HOG_S * 1000.0 / 3, errors


def test_tls_connections_fall_back_to_read_times():
    assert not stamp_receive_times(HTTPClient.from_url("https://127.0.0.1:1"))


@pytest.mark.skipif(not stamp_receive_times(plain_client("http://127.0.0.1:1")), reason="Linux only")
def test_chunks_read_together_are_marked_by_at_least_their_true_lateness(sim_start):
    """The event loop blocked for longer than the step: messages pile up and one read takes
    several under the newest stamp. Against the simulator's truth, every chunk more than 0.5 ms
    late is marked, by a bound no smaller than its lateness; no unmarked one is late."""
    sim = sim_start(accept_len=1, base_ms=10, per_seq_ms=0)  # a message every 10 ms, hogged for 15
    http = plain_client(sim.url)
    assert stamp_receive_times(http)
    rec = send_while_hogged(http)
    errors = message_errors_ms(rec, truth_of(sim, [rec]))
    marks = dict(zip(rec.uncertain_chunks or (), rec.uncertain_ms or (), strict=True))
    assert marks, f"no chunk marked though the reads were late: {errors}"
    for i, error in enumerate(errors):
        if i in marks:
            assert marks[i] >= error - 0.1, (i, marks[i], errors)
        else:
            assert error < 0.5, (i, errors, marks)


@pytest.mark.skipif(not stamp_receive_times(plain_client("http://127.0.0.1:1")), reason="Linux only")
def test_chunks_delivered_together_are_marked_though_no_read_was_late(sim_start):
    """The client reads at once, but every other chunk reaches it only with the next one, a step
    later (a buffering proxy; the kernel delivering a backlog under load): the poll that returned
    them waited, so only the stream's previous read bounds the held chunk's time, and that mark
    must cover its true lateness (truth log: when the chunk was due)."""
    sim = sim_start(accept_len=1, base_ms=10, per_seq_ms=0, faults={"bunched": 1.0})
    http = plain_client(sim.url)
    assert stamp_receive_times(http)
    (rec,) = send(http, max_tokens=TOKENS)
    assert rec.ok and rec.output_tokens == TOKENS
    errors = message_errors_ms(rec, truth_of(sim, [rec]))
    marks = dict(zip(rec.uncertain_chunks or (), rec.uncertain_ms or (), strict=True))
    held = range(0, TOKENS - 1, 2)
    # the fault did hold them: a step (10 ms), shorter when a loaded simulator catches up on its steps
    assert min(errors[i] for i in held) > 2.0, errors
    for i in held:
        assert i in marks and marks[i] >= errors[i] - 0.1, (i, marks, errors)
    assert rec.ttft_uncertain_ms is not None and rec.ttft_uncertain_ms >= errors[0] - 0.1
    for i, error in enumerate(errors):
        if i not in marks:
            assert error < 0.5, (i, errors, marks)
