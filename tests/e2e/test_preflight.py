"""Preflight through the real `locust` command line: a wrong host, path, model or API key stops the
run before the first rung with exit code 2 and one line naming the problem (also the last line of
the output), and not one generation request is sent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures.sockets import unanswered_port

from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.servers.process import LOOPBACK, free_port
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


def last_line(run: SweepRun) -> str:
    return run.log.read_text().strip().splitlines()[-1]


def assert_stopped_before_the_first_rung(run: SweepRun, message: str, truth_log: Path | None = None) -> None:
    log = run.log.read_text()
    assert run.returncode == 2, log[-2000:]
    assert re.fullmatch(r"llmload: error: " + message, last_line(run)), last_line(run)
    assert re.search(r"ERROR/llmload: llmload: " + message + "\n", log)  # also logged when it happened
    assert "Traceback" not in log
    assert not run.records.exists() or run.records.read_text() == ""
    if truth_log is not None:
        assert load_truth(truth_log)[0] == {}  # the server saw no generation request


def test_unreachable_host(tmp_path):
    host = f"http://{LOOPBACK}:{free_port()}"
    run = run_sweep(host=host, run_dir=tmp_path, timeout=60)
    assert_stopped_before_the_first_rung(
        run, re.escape(f"{host}/v1/models: cannot reach the server: ") + r"\[Errno 111\] Connection refused"
    )


def test_connect_timeout_applies_to_preflight(tmp_path):
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("timeouts: {connect: 0.5}\n")
    with unanswered_port() as port:
        host = f"http://{LOOPBACK}:{port}"
        run = run_sweep(
            host=host, run_dir=tmp_path / "run", locust_args=["--ladder", str(ladder)], timeout=60
        )
    assert_stopped_before_the_first_rung(
        run, re.escape(f"{host}/v1/models: cannot reach the server: timed out")
    )


def test_wrong_path(tmp_path, sim_start):
    sim = sim_start()
    run = run_sweep(host=sim.url + "/v1", run_dir=tmp_path / "run", timeout=60)
    assert_stopped_before_the_first_rung(
        run,
        re.escape(f"{sim.url}/v1/v1/models: HTTP 404: not an OpenAI-compatible server at this address ")
        + r"\(give --host without the /v1 path\)",
        sim.truth_log,
    )


def test_model_not_served(tmp_path, sim_start):
    sim = sim_start()
    run = run_sweep(host=sim.url, run_dir=tmp_path / "run", locust_args=["--model", "gpt-9"], timeout=60)
    assert_stopped_before_the_first_rung(
        run, re.escape(f"model 'gpt-9' is not served by {sim.url}; it serves: sim-model"), sim.truth_log
    )


@pytest.mark.parametrize("given", ["", "sk-wrong"])
def test_api_key_rejected(tmp_path, sim_start, monkeypatch, given):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LOCUST_API_KEY", raising=False)
    sim = sim_start(api_key="sk-right")
    run = run_sweep(host=sim.url, run_dir=tmp_path / "run", locust_args=["--api-key", given], timeout=60)
    assert_stopped_before_the_first_rung(
        run,
        re.escape(f"{sim.url}/v1/models: HTTP 401: the server rejected the API key ")
        + r"\(set --api-key / LOCUST_API_KEY / OPENAI_API_KEY\)",
        sim.truth_log,
    )
    assert "sk-" not in run.log.read_text()


def test_missing_ca_bundle(tmp_path, sim_start):
    sim = sim_start()
    bundle = tmp_path / "nope.pem"
    run = run_sweep(
        host=sim.url, run_dir=tmp_path / "run", locust_args=["--ca-bundle", str(bundle)], timeout=60
    )
    assert_stopped_before_the_first_rung(
        run, re.escape(f"--ca-bundle {bundle}: cannot load: No such file or directory"), sim.truth_log
    )


@pytest.mark.parametrize(("rejected", "key"), [("tools", "tools"), ("response_format", "response_format")])
def test_a_server_that_refuses_tools_or_a_format_is_found_before_the_run(tmp_path, sim_start, rejected, key):
    """A server without tool calling or structured output (the simulator refusing a key, as vLLM
    without --enable-auto-tool-choice refuses tools) stops the run at the preflight: one line
    naming the key, no measured request."""
    sim = sim_start(reject_keys=rejected)
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text("endpoint: chat\nrungs: [1]\ntools: weather\nresponse_format: json_object\n")
    run = run_sweep(host=sim.url, run_dir=tmp_path / "run", locust_args=["--ladder", str(ladder)], timeout=60)
    assert_stopped_before_the_first_rung(
        run,
        re.escape(f"the server refuses '{key}' (HTTP 400: `{key}` is not supported by this server)") + ".*",
    )
    assert sim.truth_log is not None
    sent = load_truth(sim.truth_log)[0].values()
    assert [r["status"] for r in sent if r["status"] != 200] == [400]  # the probe of that key, then nothing
