"""The simulator as a real process: wire shapes, timing model, faults, truth log, metrics.

Clients here are plain `http.client` (threads for concurrency) and one aiohttp client for the
256-stream test, never Locust, so the simulator is checked independently of the load generator.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp
import pytest

from llmload.servers.simulator import SimulatorProcess
from llmload.sim.truth import load_truth

FAST = {"base_ms": 1, "per_seq_ms": 0.1}
TIMEOUT_S = 20.0


@dataclass
class Reply:
    """What a client saw: status, headers, SSE data payloads with their arrival times."""

    status: int | None
    headers: dict[str, str]
    t0: float
    body: bytes = b""  # non-streamed body, or the raw non-SSE body
    messages: list[tuple[float, str]] = field(default_factory=list)  # (time.time(), data payload)
    done: bool = False
    error: str | None = None

    @property
    def chunks(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, json.loads(data)) for t, data in self.messages]

    @property
    def content(self) -> list[tuple[float, str]]:
        """(time, text) of messages carrying generated text."""
        out = []
        for t, chunk in self.chunks:
            for choice in chunk.get("choices") or []:
                text = choice.get("text") or (choice.get("delta") or {}).get("content")
                if text:
                    out.append((t, text))
        return out

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.content)

    @property
    def finish_reason(self) -> str | None:
        reasons = [
            c["finish_reason"] for _, m in self.chunks for c in m.get("choices") or [] if c["finish_reason"]
        ]
        return reasons[-1] if reasons else None


def call(
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """POST body (GET without one); read an SSE stream line by line, timestamping each line."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT_S)
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", **(headers or {})}
    if request_id:
        headers["X-Request-Id"] = request_id
    t0 = time.time()
    reply = Reply(status=None, headers={}, t0=t0)
    try:
        conn.request("POST" if body is not None else "GET", path, json.dumps(body) if body else None, headers)
        resp = conn.getresponse()
        reply.status, reply.headers = resp.status, dict(resp.getheaders())
        if not resp.getheader("Content-Type", "").startswith("text/event-stream"):
            reply.body = resp.read()
            return reply
        while line := resp.readline():
            t = time.time()
            if line.startswith(b"data: "):
                data = line[6:].strip().decode()
                if data == "[DONE]":
                    reply.done = True
                else:
                    reply.messages.append((t, data))
    except (OSError, http.client.HTTPException) as err:
        reply.error = repr(err)
    finally:
        conn.close()
    return reply


def completion(max_tokens: int, prompt: str = "tell me a story", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": prompt, "max_tokens": max_tokens, "stream": True, **extra}


def in_parallel(fn: Callable[[int], Reply], n: int) -> list[Reply]:
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, range(n)))


def truth_of(sim: SimulatorProcess, ids: list[str]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The truth log once it holds every id (the line is written just after the response ends)."""
    assert sim.truth_log is not None
    deadline = time.monotonic() + 5.0
    while True:
        requests, steps = load_truth(sim.truth_log)
        if all(i in requests for i in ids) or time.monotonic() > deadline:
            return requests, steps
        time.sleep(0.02)


def words(text: str) -> int:
    return len(text.split())


# --- tokens, text and usage --------------------------------------------------------------------


def test_ignore_eos_streams_exactly_max_tokens(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    reply = call(sim.url, "/v1/completions", completion(300, ignore_eos=True))
    assert reply.status == 200 and reply.done and reply.error is None
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    assert words(reply.text) == 300
    assert reply.finish_reason == "length"


def test_same_prompt_same_text_and_pattern(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    a, b = (call(sim.url, "/v1/completions", completion(100, ignore_eos=True)) for _ in range(2))
    other = call(sim.url, "/v1/completions", completion(100, prompt="another prompt", ignore_eos=True))
    assert a.text == b.text and words(a.text) == 100
    assert [words(t) for _, t in a.content] == [words(t) for _, t in b.content]
    assert other.text != a.text


def test_vllm_usage_only_when_asked_in_separate_chunk(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    plain = call(sim.url, "/v1/completions", completion(20, ignore_eos=True))
    assert not any("usage" in m for _, m in plain.chunks)
    asked = call(
        sim.url, "/v1/completions", completion(20, ignore_eos=True, stream_options={"include_usage": True})
    )
    *content, (_, last) = asked.chunks
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 20
    assert last["usage"]["prompt_tokens"] == 5 and last["usage"]["total_tokens"] == 25  # BOS + 4 words
    assert not any("usage" in m for _, m in content)
    assert content[-1][1]["choices"][0]["finish_reason"] == "length"  # on the last content chunk
    continuous = call(
        sim.url,
        "/v1/completions",
        completion(
            20, ignore_eos=True, stream_options={"include_usage": True, "continuous_usage_stats": True}
        ),
    )
    running = [m["usage"]["completion_tokens"] for _, m in continuous.chunks]
    assert running == sorted(running) and running[-1] == 20 and len(running) == len(continuous.chunks)


def test_llamacpp_usage_on_final_nonempty_choices_chunk(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(usage_style="llamacpp", **FAST)
    reply = call(sim.url, "/v1/completions", completion(20, ignore_eos=True))  # no stream_options
    *content, (_, last) = reply.chunks
    assert last["choices"][0]["text"] == "" and last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 20 and last["timings"]["predicted_n"] == 20
    assert all(m["choices"][0]["finish_reason"] is None and "usage" not in m for _, m in content)
    assert reply.done
    chat = call(
        sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    )
    assert chat.status == 200 and json.loads(chat.body)["timings"]["predicted_n"] == 5


def test_nonstream_completion_and_chat_include_usage(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    body = {"prompt": "one two three", "max_tokens": 30, "ignore_eos": True}
    data = json.loads(call(sim.url, "/v1/completions", body).body)
    assert data["object"] == "text_completion" and words(data["choices"][0]["text"]) == 30
    assert data["usage"] == {"prompt_tokens": 4, "total_tokens": 34, "completion_tokens": 30}
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there you"}]
    chat = json.loads(
        call(sim.url, "/v1/chat/completions", {"messages": messages, "max_completion_tokens": 7}).body
    )
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["prompt_tokens"] == 1 + 2 + 3 + 2 * 3  # BOS, words, 3 template tokens per message


def test_chat_role_chunk_comes_first(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 12,
        "stream": True,
        "ignore_eos": True,
    }
    reply = call(sim.url, "/v1/chat/completions", body, request_id="chat-1")
    first = reply.chunks[0][1]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert words(reply.text) == 12 and reply.done
    requests, _ = truth_of(sim, ["chat-1"])
    rec = requests["chat-1"]
    assert rec["endpoint"] == "chat" and rec["role_sent"] < rec["first_token"]


def test_ignore_eos_unsupported_stops_naturally(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(ignore_eos_unsupported=True, **FAST)
    reply = call(sim.url, "/v1/completions", completion(2000, ignore_eos=True))
    assert reply.finish_reason == "stop" and 16 <= words(reply.text) < 2000


def test_wrong_model_is_404_with_openai_error(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(**FAST)
    reply = call(sim.url, "/v1/completions", {**completion(5), "model": "gpt-nope"})
    assert reply.status == 404
    error = json.loads(reply.body)["error"]
    assert {"message", "type", "code"} <= error.keys() and "gpt-nope" in error["message"]


def test_models_tokenize_health_and_request_id(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(model="m1", max_model_len=4096, **FAST)
    models = json.loads(call(sim.url, "/v1/models").body)
    assert models["object"] == "list" and models["data"][0]["id"] == "m1"
    assert models["data"][0]["max_model_len"] == 4096
    tok = json.loads(call(sim.url, "/tokenize", {"model": "m1", "prompt": "a b c d"}).body)
    assert tok["count"] == 5 and len(tok["tokens"]) == 5 and tok["max_model_len"] == 4096  # BOS + 4
    assert call(sim.url, "/health").status == 200
    reply = call(sim.url, "/v1/completions", {**completion(3), "model": "m1"}, request_id="rid-42")
    assert reply.headers["X-Request-Id"] == "rid-42" and reply.chunks[0][1]["id"] == "cmpl-rid-42"
    too_long = call(sim.url, "/v1/completions", {**completion(5000), "model": "m1"})
    assert too_long.status == 400


# --- timing model -----------------------------------------------------------------------------


def test_accept_len_gives_multi_token_chunks(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=1, per_seq_ms=0.1, accept_len=4, max_draft=7)
    replies = in_parallel(
        lambda i: call(sim.url, "/v1/completions", completion(200, f"p{i}", ignore_eos=True)), 8
    )
    sizes = [words(t) for r in replies for _, t in r.content[:-1]]  # the last chunk is capped
    assert max(sizes) > 4 and statistics.mean(sizes) == pytest.approx(4.0, abs=0.25)


def test_single_request_step_time(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=20, per_seq_ms=5, accept_len=1)
    reply = call(sim.url, "/v1/completions", completion(40, ignore_eos=True), request_id="one")
    assert len(reply.content) == 40
    requests, steps = truth_of(sim, ["one"])
    rec = requests["one"]
    assert rec["last_token"] - rec["admitted"] == pytest.approx(40 * 0.025, rel=0.05)
    assert reply.content[-1][0] - reply.t0 == pytest.approx(40 * 0.025, rel=0.05)
    assert all(s["t_end"] - s["t_start"] == pytest.approx(0.025, abs=1e-6) for s in steps)


def test_step_time_grows_with_batch(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=20, per_seq_ms=5, accept_len=1)
    ids = [f"b{i}" for i in range(4)]
    replies = in_parallel(
        lambda i: call(
            sim.url, "/v1/completions", completion(30, f"q{i}", ignore_eos=True), request_id=ids[i]
        ),
        4,
    )
    requests, steps = truth_of(sim, ids)
    full = [s for s in steps if s["batch"] == 4]
    assert len(full) >= 25
    assert all(s["t_end"] - s["t_start"] == pytest.approx(0.040, abs=1e-6) for s in full)
    gaps = [b[0] - a[0] for r in replies for a, b in zip(r.content, r.content[1:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(0.040, rel=0.1)


def test_max_num_seqs_queues_the_rest(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=10, per_seq_ms=0, accept_len=1, max_num_seqs=2)
    ids = ["q0", "q1", "q2"]

    def one(i: int) -> Reply:
        time.sleep(0.05 * i)  # a known arrival order
        return call(sim.url, "/v1/completions", completion(20, f"r{i}", ignore_eos=True), request_id=ids[i])

    in_parallel(one, 3)
    requests, steps = truth_of(sim, ids)
    first_done = min(requests["q0"]["last_token"], requests["q1"]["last_token"])
    assert requests["q2"]["admitted"] >= first_done - 0.005
    assert requests["q2"]["admitted"] - requests["q2"]["arrival"] > 0.05
    assert max(s["batch"] for s in steps) == 2


def test_degrade_lengthens_steps(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=10, per_seq_ms=0, accept_len=1, degrade_pct_per_min=6000)  # +100 % per second
    call(sim.url, "/v1/completions", completion(60, ignore_eos=True), request_id="d")
    _, steps = truth_of(sim, ["d"])
    first, last = steps[0], steps[-1]
    growth = (last["t_end"] - last["t_start"]) - (first["t_end"] - first["t_start"])
    # step = 10 ms * (1 + minutes * 60): it grows by 10 ms per second of server time
    assert growth == pytest.approx(0.010 * (last["t_start"] - first["t_start"]), rel=0.05)
    assert last["t_start"] - first["t_start"] > 0.5


def test_defaults_reproduce_seed_sweep(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start()
    one = call(sim.url, "/v1/completions", completion(256, "seed single", ignore_eos=True), request_id="c1")
    requests, _ = truth_of(sim, ["c1"])
    rate = 256 / (requests["c1"]["last_token"] - requests["c1"]["arrival"])
    assert rate == pytest.approx(135.7, rel=0.10) and words(one.text) == 256
    ids = [f"c10-{i}" for i in range(10)]
    in_parallel(
        lambda i: call(
            sim.url, "/v1/completions", completion(256, f"seed {i}", ignore_eos=True), request_id=ids[i]
        ),
        10,
    )
    requests, _ = truth_of(sim, ids)
    recs = [requests[i] for i in ids]
    assert all(r["tokens_sent"] == 256 for r in recs)
    aggregate = 2560 / (max(r["last_token"] for r in recs) - min(r["arrival"] for r in recs))
    assert aggregate == pytest.approx(516.2, rel=0.10)


# --- truth log and metrics ----------------------------------------------------------------------


def test_truth_log_matches_what_the_client_saw(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=5, per_seq_ms=1)
    ids = [f"t{i}" for i in range(6)]
    replies = in_parallel(
        lambda i: call(
            sim.url, "/v1/completions", completion(50 + 10 * i, f"t{i}", ignore_eos=True), request_id=ids[i]
        ),
        6,
    )
    requests, steps = truth_of(sim, ids)
    for rid, reply in zip(ids, replies, strict=True):
        rec = requests[rid]
        assert rec["tokens_sent"] == rec["completion_tokens"] == words(reply.text)
        assert rec["chunk_tokens"] == [words(t) for _, t in reply.content]
        assert len(rec["chunk_times"]) == len(reply.content)
        assert reply.content[0][0] - rec["first_token"] == pytest.approx(0.0, abs=0.005)
        assert reply.content[-1][0] - rec["last_token"] == pytest.approx(0.0, abs=0.005)
        assert rec["arrival"] <= rec["admitted"] <= rec["first_token"] <= rec["last_token"]
        assert rec["finish_reason"] == "length" and rec["fault"] is None and rec["status"] == 200
    assert sum(s["tokens"] for s in steps) == sum(r["tokens_sent"] for r in requests.values())


def parse_prometheus(text: str) -> dict[str, float]:
    """Strict enough for the simulator: every line is a comment or `name{labels} value`."""
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_]+="[^"]*",?)*\})? (\S+)$')
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = sample.match(line)
        assert m, f"not Prometheus text: {line!r}"
        values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values


def test_metrics_counters_equal_tokens_served(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=2, per_seq_ms=0.1)
    replies = in_parallel(
        lambda i: call(sim.url, "/v1/completions", completion(40 + i, f"m{i}", ignore_eos=True)), 5
    )
    served = sum(words(r.text) for r in replies)
    metrics = parse_prometheus(call(sim.url, "/metrics").body.decode())
    label = '{model_name="sim-model"}'
    assert metrics["vllm:generation_tokens_total" + label] == served
    assert metrics['vllm:request_success_total{model_name="sim-model",finished_reason="length"}'] == 5
    assert metrics["vllm:num_requests_running" + label] == 0
    drafts = metrics["vllm:spec_decode_num_drafts_total" + label]
    accepted = metrics["vllm:spec_decode_num_accepted_tokens_total" + label]
    assert drafts + accepted == served
    assert metrics["vllm:spec_decode_num_draft_tokens_total" + label] == 7 * drafts
    assert metrics["vllm:prompt_tokens_total" + label] == 5 * 3  # BOS, "m", digit per prompt


def test_each_simulator_binds_the_port_the_os_picks_and_names_it(tmp_path: Path) -> None:
    """No port is chosen first and bound later (two test runs or sweeps at once could then take the
    same one, and one's health check pass on the other's server): each simulator binds port 0
    and its URL is the port it bound, so two started together answer apart, each into its own log."""
    sims = [
        SimulatorProcess(truth_log=tmp_path / f"t{i}.jsonl", log_path=tmp_path / f"s{i}.log", **FAST)
        for i in range(2)
    ]
    assert [sim.url for sim in sims] == ["", ""]  # known only once bound
    with sims[0], sims[1]:
        assert sims[0].port != sims[1].port and all(sim.port > 0 for sim in sims)
        for i, sim in enumerate(sims):
            assert sim.url == f"http://127.0.0.1:{sim.port}"
            assert call(sim.url, "/v1/completions", completion(3), request_id=f"r{i}").status == 200
    assert [set(load_truth(tmp_path / f"t{i}.jsonl")[0]) for i in range(2)] == [{"r0"}, {"r1"}]


def test_sigterm_closes_truth_log_and_exits_zero(tmp_path: Path) -> None:
    sim = SimulatorProcess(truth_log=tmp_path / "truth.jsonl", log_path=tmp_path / "sim.log", **FAST)
    with sim:
        call(sim.url, "/v1/completions", completion(10), request_id="last")
    assert sim.stop() == 0
    requests, steps = load_truth(tmp_path / "truth.jsonl")
    assert "last" in requests and steps


def test_load_truth_tolerates_a_cut_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"type":"step","t_start":1,"t_end":2,"batch":1,"tokens":3,"prefill_tokens":0}\n{"type":"req'
    )
    requests, steps = load_truth(path)
    assert requests == {} and len(steps) == 1


def test_unknown_fault_kind_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "llmload.sim", "--fault", "gremlins=1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "gremlins" in proc.stderr and "http_500" in proc.stderr


def test_256_concurrent_streams_with_tiny_steps(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=0.5, per_seq_ms=0.01)

    async def one(session: aiohttp.ClientSession, i: int) -> int:
        body = completion(64, f"many {i}", ignore_eos=True, stream_options={"include_usage": True})
        async with session.post(sim.url + "/v1/completions", json=body) as resp:
            lines = [line async for line in resp.content]
        usage = [json.loads(x[6:]) for x in lines if x.startswith(b"data: {")][-1]["usage"]
        assert lines[-2].strip() == b"data: [DONE]"
        return usage["completion_tokens"]

    async def main() -> list[int]:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as session:
            return await asyncio.gather(*(one(session, i) for i in range(256)))

    assert asyncio.run(main()) == [64] * 256
    assert call(sim.url, "/health").status == 200


# --- faults (rate 1.0: every request gets the fault) ------------------------------------------


def test_fault_http_500_and_503(sim_start: Callable[..., SimulatorProcess]) -> None:
    for kind, status in (("http_500", 500), ("http_503", 503)):
        sim = sim_start(faults={kind: 1.0}, **FAST)
        reply = call(sim.url, "/v1/completions", completion(10), request_id=kind)
        assert reply.status == status and json.loads(reply.body)["error"]["code"] == status
        assert truth_of(sim, [kind])[0][kind]["fault"] == kind


def test_fault_http_429_has_retry_after(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"http_429": 1.0}, **FAST)
    reply = call(sim.url, "/v1/completions", completion(10))
    assert reply.status == 429 and reply.headers["Retry-After"] == "1"
    assert json.loads(reply.body)["error"]["type"] == "RateLimitError"


def test_fault_reset_before_headers(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"reset": 1.0}, **FAST)
    reply = call(sim.url, "/v1/completions", completion(10), request_id="r")
    assert reply.status is None and reply.error is not None
    rec = truth_of(sim, ["r"])[0]["r"]
    assert rec["fault"] == "reset" and rec["status"] is None and rec["admitted"] is None


def test_fault_drop_cuts_after_n_tokens(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"drop": 1.0}, drop_after=8, **FAST)
    reply = call(sim.url, "/v1/completions", completion(50, ignore_eos=True), request_id="d")
    assert reply.status == 200 and not reply.done and reply.error is not None
    assert words(reply.text) == 8 and reply.finish_reason is None
    rec = truth_of(sim, ["d"])[0]["d"]
    assert rec["tokens_sent"] == 8 and rec["fault"] == "drop" and rec["finish_reason"] is None


def test_fault_malformed_line_mid_stream(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"malformed": 1.0}, **FAST)
    reply = call(sim.url, "/v1/completions", completion(40, ignore_eos=True))
    bad = []
    for i, (_, data) in enumerate(reply.messages):
        try:
            json.loads(data)
        except json.JSONDecodeError:
            bad.append(i)
    assert len(bad) == 1 and 0 < bad[0] < len(reply.messages) - 1
    assert reply.done  # the stream then finishes normally


def test_fault_stall_pauses_after_first_chunk(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"stall": 1.0}, stall_s=0.6, **FAST)
    reply = call(sim.url, "/v1/completions", completion(30, ignore_eos=True))
    times = [t for t, _ in reply.content]
    assert times[1] - times[0] >= 0.58 and reply.done and words(reply.text) == 30


def test_fault_slow_headers(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"slow_headers": 1.0}, slow_headers_s=0.5, **FAST)
    reply = call(sim.url, "/v1/completions", completion(10, ignore_eos=True))
    assert reply.content[0][0] - reply.t0 >= 0.5 and reply.done and words(reply.text) == 10


def test_fault_wrong_content_type(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"wrong_content_type": 1.0}, **FAST)
    reply = call(sim.url, "/v1/completions", completion(10))
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/html")
    assert b"<html" in reply.body


def test_fault_no_done(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"no_done": 1.0}, **FAST)
    reply = call(
        sim.url, "/v1/completions", completion(10, ignore_eos=True, stream_options={"include_usage": True})
    )
    assert reply.error is None and not reply.done
    assert reply.chunks[-1][1]["usage"]["completion_tokens"] == 10


def test_fault_no_usage(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"no_usage": 1.0}, **FAST)
    reply = call(
        sim.url, "/v1/completions", completion(10, ignore_eos=True, stream_options={"include_usage": True})
    )
    assert reply.done and words(reply.text) == 10
    assert not any("usage" in m for _, m in reply.chunks)


def test_fault_rates_mix_deterministically(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(faults={"http_500": 0.5}, fault_seed=3, **FAST)
    statuses = [call(sim.url, "/v1/completions", completion(2)).status for _ in range(20)]
    again = sim_start(faults={"http_500": 0.5}, fault_seed=3, **FAST)
    assert statuses == [call(again.url, "/v1/completions", completion(2)).status for _ in range(20)]
    assert 3 <= statuses.count(500) <= 17


def test_client_disconnect_frees_the_batch_slot(sim_start: Callable[..., SimulatorProcess]) -> None:
    sim = sim_start(base_ms=10, per_seq_ms=0, accept_len=1)
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=TIMEOUT_S)
    conn.request(
        "POST", "/v1/completions", json.dumps(completion(500, ignore_eos=True)), {"X-Request-Id": "gone"}
    )
    resp = conn.getresponse()
    resp.readline()
    conn.sock.close()  # hang up mid-stream
    conn.close()
    rec = truth_of(sim, ["gone"])[0]["gone"]
    assert rec["finish_reason"] == "abort" and rec["completion_tokens"] < 100
    metrics = parse_prometheus(call(sim.url, "/metrics").body.decode())
    assert metrics['vllm:num_requests_running{model_name="sim-model"}'] == 0
    assert metrics['vllm:request_success_total{model_name="sim-model",finished_reason="abort"}'] == 1
