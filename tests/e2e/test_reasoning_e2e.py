"""A reasoning model's stream, timed and counted against the server's own account, for every shape:
`delta.reasoning` (vLLM), `delta.reasoning_content` (SGLang, llama.cpp), `<think>` tags in a
completion's text, and the Responses API's events.

Two servers: the simulator (a real `locust` run: `llmload sweep`, its truth log) and a fake
written apart from it (tests/fixtures/fake_reasoning_server.py: N reasoning then M answer tokens,
one per message, 20 ms apart, driven in-process by the request client). Per request: N+M token
chunks and N+M-1 ITL values, the first chunk on the first reasoning token, the first answer on
token N+1 (each time within 1 ms of the server's write), N reasoning tokens exactly (the server's
count, or the client's where the server gives none). Bad streams are counted and named, never a
traceback: reasoning after the answer, a Responses `error` event, an event type outside the API,
a reasoning count above the output tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import pytest
from fixtures.drive_client import drive

from llmload.analysis.output_identity import output_identity
from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.reconcile import issues
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core.files.records import RequestRecord, read_records
from llmload.output.table import render
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_reasoning_server.py"
N, M = 20, 10
BAR_S = 0.001
ERRORS: list[float] = []  # every checked chunk's |client time - server write|, s


def check_run_errors() -> None:
    """90 % of a run's chunks within 1 ms of the server's write (on a 2-core machine shared with
    other runs a tenth of them may be late, or the server's own clock late: docs/measurements.md)."""
    errors = sorted(ERRORS)
    assert errors and errors[int(0.9 * (len(errors) - 1))] < BAR_S, (errors[len(errors) // 2], errors[-10:])
    ERRORS.clear()


ENDPOINT_OF = {
    "reasoning": "chat",
    "reasoning_content": "chat",
    "tags": "completions",
    "responses": "responses",
}


class Fake:
    """The fake reasoning server, run as its own process on a free port; stopped by PID."""

    def __init__(self, tmp: Path, shape: str, bad: str = "none") -> None:
        self.truth = tmp / f"truth-{shape}-{bad}.jsonl"
        port_file = tmp / f"port-{shape}-{bad}"
        cmd = [sys.executable, str(FAKE), "--port-file", str(port_file), "--truth", str(self.truth)]
        self.proc = subprocess.Popen([*cmd, "--shape", shape, "--bad", bad, "--n", str(N), "--m", str(M)])
        deadline = time.monotonic() + 10
        while not (port_file.exists() and port_file.read_text()):
            assert time.monotonic() < deadline and self.proc.poll() is None, "the fake did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def writes(self) -> dict[str, dict]:
        return {t["id"]: t for t in map(json.loads, self.truth.read_text().splitlines())}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[..., Fake]]:
    started: list[Fake] = []

    def start(shape: str, bad: str = "none") -> Fake:
        started.append(Fake(tmp_path, shape, bad))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def check_against(rec: RequestRecord, writes: list[float], counted: bool) -> None:
    """One request's chunks, times and reasoning tokens against the server's writes."""
    assert rec.ok, rec.error
    assert rec.chunks == len(rec.chunk_times) == N + M
    assert len(itl_ms(rec)) == N + M - 1
    times = [rec.t_start + t for t in rec.chunk_times]
    errors = sorted(abs(got - wrote) for got, wrote in zip(times, writes, strict=True))
    # the median chunk within 1 ms of the server's write; single chunks may be off by more on a
    # loaded machine, either way (a late read, or a server that read its clock late after a
    # write): the run's share of them is bounded by the caller
    assert errors[len(errors) // 2] < BAR_S, errors
    ERRORS.extend(errors)
    assert rec.t_first_reasoning == pytest.approx(times[0], abs=1e-6)
    assert rec.t_first_content == pytest.approx(times[N], abs=1e-6)
    assert rec.reasoning_tokens == N and rec.reasoning_counted is counted
    assert rec.output_tokens == N + M and rec.reasoning_hash is not None


@pytest.mark.parametrize("shape", ["reasoning", "reasoning_content", "tags", "responses"])
def test_fake_server_each_shape(fake, shape):
    server = fake(shape)
    records = gevent.spawn(drive, server.url, ENDPOINT_OF[shape], N + M).get(timeout=60)
    writes = server.writes()
    for rec in records:
        check_against(rec, writes[rec.request_id]["writes"], counted=shape == "tags")
        assert rec.odd_stream is None and not issues(rec.to_dict())
    check_run_errors()
    if shape != "tags":  # no role chunk (completions, responses): TTFT is the first reasoning token
        return
    assert all(rec.t_first == rec.t_first_reasoning for rec in records)


@pytest.mark.parametrize(
    "shape, bad, outcome, odd",
    [
        ("reasoning", "after_answer", "ok", "reasoning_after_answer"),
        ("responses", "error_event", "stream_error", None),
        ("responses", "unknown_event", "ok", "unknown_event:response.audio.delta"),
        ("reasoning_content", "over_count", "ok", None),
    ],
)
def test_fake_server_bad_streams_are_counted_and_named(fake, shape, bad, outcome, odd):
    server = fake(shape, bad)
    records = gevent.spawn(drive, server.url, ENDPOINT_OF[shape], N + M, 2).get(timeout=60)
    assert all(rec.outcome == outcome for rec in records), [(r.outcome, r.error) for r in records]
    assert all(rec.odd_stream == odd for rec in records)
    if bad == "error_event":
        assert all("server_error: the engine died" in (rec.error or "") for rec in records)
        assert all(rec.chunks == N for rec in records)  # the reasoning before the error is kept
    if bad == "over_count":
        assert all("reasoning_over_tokens" in issues(rec.to_dict()) for rec in records)
    rows = [t.row() for t in tally_rungs(records)]
    table = render(rows)
    if odd is not None:
        assert f"2 of 2 streams had {odd}" in table
    if bad == "after_answer":
        assert all(rec.chunks == N + M and rec.reasoning_tokens == N + 1 for rec in records)  # M - 1 answer


# --- the simulator, in a real locust run ---------------------------------------------------------
SIM_CASES = {  # name: (endpoint, simulator flags, whether the client counts)
    "reasoning": ("chat", {"reasoning_format": "reasoning"}, False),
    "reasoning_content-llamacpp": (
        "chat",
        {"reasoning_format": "reasoning_content", "usage_style": "llamacpp"},
        True,
    ),
    "tags": ("completions", {}, False),
    "responses": ("responses", {}, False),
}


@pytest.mark.parametrize("name", list(SIM_CASES))
def test_simulator_each_shape(tmp_path, name):
    endpoint, flags, counted = SIM_CASES[name]
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(f"rungs: [1, 2]\nrequests_per_user: 2\nwarmup_requests: 1\nmax_tokens: {N + M}\n")
    sweep = run_sweep(
        run_dir=tmp_path / "run",
        endpoint=endpoint,
        locust_args=["--ladder", str(ladder)],
        sim={"reasoning": N, "accept_len": 1, "base_ms": 5, "per_seq_ms": 1, **flags},
        timeout=180,
    )
    assert sweep.returncode == 0, sweep.log.read_text()[-3000:]
    truth, _ = load_truth(sweep.truth_log)  # type: ignore[arg-type]
    records, _ = read_records(sweep.files.records)
    measured = [r for r in records if r.phase == "measure"]
    assert len(measured) == 6
    for rec in measured:
        t = truth[rec.request_id]
        assert t["reasoning_tokens"] == N and t["chunk_reasoning"] == [1] * N + [0] * M
        check_against(rec, t["chunk_times"], counted)
        if endpoint == "chat":  # vLLM's TTFT point: the role chunk (written before the first token)
            assert rec.t_start < rec.t_first <= rec.t_first_reasoning  # its precision: test_latency_e2e
        else:
            assert rec.t_first == rec.t_first_reasoning
    check_run_errors()
    rows = [t.row() for t in tally_rungs(measured)]
    assert all(r.reasoning["share"] == pytest.approx(N / (N + M)) for r in rows)
    table = render(rows)
    assert "think_%" in table and "66.7" in table and max(map(len, table.splitlines()[:3])) <= 100


def test_compare_reports_a_change_in_the_thinking_only(tmp_path):
    """Two runs of one workload against simulators that think other words (`--reasoning-salt`)
    but answer the same: compare says the outputs changed, every one in its reasoning only."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(
        "rungs: [1, 2]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: 16\nendpoint: chat\n"
    )
    results = []
    for salt in (0, 1):
        sweep = run_sweep(
            run_dir=tmp_path / f"salt{salt}",
            endpoint="chat",
            locust_args=["--ladder", str(ladder)],
            sim={"reasoning": 8, "reasoning_salt": salt, "base_ms": 2, "per_seq_ms": 1},
            timeout=180,
        )
        assert sweep.returncode == 0, sweep.log.read_text()[-3000:]
        results.append(load_run(str(sweep.prefix)))
    same = output_identity(results[0], results[0])
    assert same.verdict == "identical"
    changed = output_identity(results[0], results[1])
    assert changed.verdict == "changed" and changed.differing == changed.compared == 6
    assert changed.reasoning_only == 6 and "in their reasoning only" in changed.summary()
