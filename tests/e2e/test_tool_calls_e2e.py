"""A reply that is a tool call, timed, counted and compared like answer text, against a server
written apart from llmload (tests/fixtures/fake_tool_server.py: 30 tokens, one a message, 20 ms
apart, finish_reason "tool_calls", usage at the end; it logs when it wrote each message).

Per request: 30 token chunks, each within 1 ms of the server's write (the median of a request; a
run's 90th percentile), TTFT within 2 ms of the server's first write (the role delta), the first
tool call on the first named call, the calls counted (parallel calls each), arguments that are not
JSON counted per rung and the request still ok; on chat and on the Responses API. Two sweeps whose
calls' arguments differ are "changed" in `llmload compare`, in their tool calls; two alike are
"identical".
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from fixtures.drive_client import drive
from fixtures.paths import REPO

from llmload.analysis.output_identity import CHANGED, IDENTICAL, output_identity
from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.output.table import render_metrics
from llmload.runner.sweep_run import run_sweep

SERVER = REPO / "tests" / "fixtures" / "fake_tool_server.py"
TOKENS = 30


class ToolServer:
    """The fake tool-call server as its own process on a free port, stopped by its PID."""

    def __init__(self, folder: Path, *flags: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.truth, port_file = folder / "truth.jsonl", folder / "port"
        argv = [sys.executable, str(SERVER), "--port-file", str(port_file), "--truth", str(self.truth)]
        self.proc = subprocess.Popen([*argv, "--tokens", str(TOKENS), *flags])
        deadline = time.monotonic() + 10
        while not (port_file.exists() and port_file.read_text()):
            assert time.monotonic() < deadline and self.proc.poll() is None, "the fake server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def writes(self) -> dict[str, dict]:
        return {t["id"]: t for t in map(json.loads, self.truth.read_text().splitlines())}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[ToolServer]]:
    started: list[ToolServer] = []
    yield started
    for server in started:
        server.proc.terminate()
        server.proc.wait(10)


def start(servers: list[ToolServer], folder: Path, *flags: str) -> ToolServer:
    servers.append(ToolServer(folder, *flags))
    return servers[-1]


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_a_tool_call_is_chunks_timed_against_the_servers_writes(servers, tmp_path, endpoint):
    server = start(servers, tmp_path / endpoint, "--shape", endpoint)
    records = gevent.spawn(drive, server.url, endpoint, TOKENS, 4).get(timeout=60)
    truth = server.writes()
    ttft_errors, chunk_errors = [], []
    for rec in records:
        writes = truth[rec.request_id]["writes"]
        assert rec.ok and rec.finish_reason == ("tool_calls" if endpoint == "chat" else "stop"), rec.error
        assert rec.chunks == len(rec.chunk_times) == TOKENS == rec.output_tokens
        assert len(itl_ms(rec)) == TOKENS - 1 and not rec.tokens_estimated
        times = [rec.t_start + t for t in rec.chunk_times]
        errors = sorted(abs(got - wrote) for got, wrote in zip(times, writes, strict=True))
        assert errors[len(errors) // 2] < 0.001, errors
        chunk_errors += errors
        assert rec.t_first_tool_call == pytest.approx(times[0], abs=1e-6)
        assert rec.t_first_content is None and rec.tool_calls == 1 and rec.tool_calls_invalid == 0
        assert rec.tool_hash is not None and rec.text_hash is not None
        first = truth[rec.request_id]["first"] if endpoint == "chat" else writes[0]  # the role delta
        ttft_errors.append(abs(rec.t_first - first))
    assert len({rec.tool_hash for rec in records}) == 1  # one call, the same each time
    assert sorted(ttft_errors)[len(ttft_errors) // 2] < 0.002, ttft_errors
    assert sorted(chunk_errors)[int(0.9 * (len(chunk_errors) - 1))] < 0.001, chunk_errors[-10:]
    (tally,) = tally_rungs(records)
    metrics = tally.metrics()
    assert metrics.tool_calls == {"requests": 4, "calls": 4, "parallel": 0, "invalid": 0, "valid_share": 1.0}
    assert metrics.latencies["ttftc"] is not None and metrics.latencies["ttftc"].count == 4
    assert not metrics.itl_per_chunk
    table = render_metrics([metrics])
    assert "4 of 4 completed replies made 4 tool calls" in table and "several tokens in a chunk" not in table


def test_parallel_calls_and_invalid_arguments_are_counted(servers, tmp_path):
    parallel = start(servers, tmp_path / "parallel", "--calls", "3")
    invalid = start(servers, tmp_path / "invalid", "--invalid")
    both = [gevent.spawn(drive, s.url, "chat", TOKENS, 2) for s in (parallel, invalid)]
    gevent.joinall(both, raise_error=True)
    calls, bad = (g.value for g in both)
    truth = parallel.writes()
    for rec in calls:
        assert rec.ok and rec.tool_calls == 3 and rec.tool_calls_invalid == 0 and rec.chunks == TOKENS
        assert len(truth[rec.request_id]["calls"]) == 3
    assert all(rec.ok and rec.tool_calls == 1 and rec.tool_calls_invalid == 1 for rec in bad)
    (calls_tally,), (bad_tally,) = tally_rungs(calls), tally_rungs(bad)
    assert calls_tally.metrics().tool_calls == {
        "requests": 2,
        "calls": 6,
        "parallel": 2,
        "invalid": 0,
        "valid_share": 1.0,
    }
    assert bad_tally.metrics().tool_calls == {
        "requests": 2,
        "calls": 2,
        "parallel": 0,
        "invalid": 2,
        "valid_share": 0.0,
    }
    assert bad_tally.row().failures == 0


def test_compare_says_which_runs_tool_calls_changed(servers, tmp_path):
    """Three sweeps (`llmload sweep` against the fake): salt 0 twice, then salt 1, whose calls'
    arguments are other words."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(f"rungs: [1]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: {TOKENS}\n")
    runs = []
    for name, salt in (("base", 0), ("same", 0), ("other", 1)):
        server = start(servers, tmp_path / f"server-{name}", "--gap-ms", "2", "--salt", str(salt))
        sweep = run_sweep(
            host=server.url,
            run_dir=tmp_path / name,
            endpoint="chat",
            locust_args=["--ladder", str(ladder)],
            timeout=120,
        )
        assert sweep.returncode == 0, sweep.log.read_text()[-3000:]
        runs.append(load_run(str(sweep.prefix)))
    base, same, other = runs
    identical = output_identity(base, same)
    assert identical.verdict == IDENTICAL and identical.compared == 2, identical.summary()
    changed = output_identity(base, other)
    assert changed.verdict == CHANGED and changed.differing == changed.tool_calls_changed == 2
    assert changed.summary() == "outputs changed on 2 of 2 matched requests (2 in their tool calls)"
