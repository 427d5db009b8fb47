"""Workloads: prompt files (lines, JSONL, ShareGPT), synthetic prompts of a given token length
checked against the simulator's own token counts (its truth log), shared prefixes, seeding."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.core.config import ConfigError, SweepConfig, load_config
from llmload.core.files.records import RequestRecord, read_records
from llmload.core.workload.prompt_files import load_prompt_file
from llmload.loadgen.transport.token_counts import ServerTokenCounts
from llmload.loadgen.workload.prompts import WORDS, Workload, calibrate_prompts, tag_words, workload_for
from llmload.runner.sweep_run import SweepRun, locust_command, run_sweep
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SAMPLE = REPO / "config" / "sharegpt-sample.json"


def test_sharegpt_takes_the_first_human_turn():
    prompts = load_prompt_file(SAMPLE)
    raw = json.loads(SAMPLE.read_text())
    assert len(prompts) == len(raw) - 1  # the conversation without turns is skipped
    assert prompts[0] == raw[0]["conversations"][0]["value"]
    assert prompts[-1] == "Summarize the KV cache in two sentences."  # human turn after a gpt turn


def test_lines_and_jsonl(tmp_path):
    lines = tmp_path / "p.txt"
    lines.write_text("first prompt\n\n  second prompt\n")
    assert load_prompt_file(lines) == ["first prompt", "  second prompt"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a b"}\n{"other": 1}\n{"prompt": "c"}\n')
    assert load_prompt_file(jsonl) == ["a b", "c"]


@pytest.mark.parametrize(
    ("content", "fmt", "message"),
    [
        (None, "auto", "'prompt_file' cannot be read"),
        ("\n  \n", "auto", "'prompt_file' holds no prompt"),
        ("[1, 2", "sharegpt", "'prompt_file' is not valid sharegpt"),
        ('{"x": 1}\n', "jsonl", "'prompt_file' holds no prompt (format jsonl)"),
    ],
)
def test_bad_prompt_file_is_one_line_naming_file_and_key(tmp_path, content, fmt, message):
    path = tmp_path / "prompts.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_prompt_file(path, fmt)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_prompt_file_is_relative_to_the_config(tmp_path):
    (tmp_path / "w.yaml").write_text("prompt_file: data/p.txt\n")
    assert load_config(tmp_path / "w.yaml").prompt_file == str(tmp_path / "data" / "p.txt")


def test_workload_is_seeded_and_prefix_is_shared():
    config = SweepConfig(prompt_tokens=40, shared_prefix_ratio=0.5, seed=4)
    a, b = Workload(config), Workload(config)
    assert a.prompt(3, "x" * 32) == b.prompt(3, "x" * 32)
    assert Workload(SweepConfig(prompt_tokens=40, shared_prefix_ratio=0.5, seed=5)).prompt(
        3, "x"
    ) != a.prompt(3, "x")
    p0, p1 = a.prompt(0, "r0"), a.prompt(1, "r1")
    assert p0.split()[:21] == p1.split()[:21] and p0 != p1  # the anchor and 20 shared words
    assert len(p0.split()) == 1 + 40
    unique = Workload(SweepConfig(prompt_tokens=40, shared_prefix_ratio=0.5, unique_prompts=True))
    tagged = unique.prompt(0, "abcdef0123456789")
    tag = tag_words("abcdef0123456789", unique.vocab)
    assert tagged.split()[21:25] == tag.split() and len(tagged.split()) == 1 + 40  # inside the budget
    assert tag != tag_words("abcdef0123456788", unique.vocab)


def test_workload_for_reuses_a_workload_only_for_the_same_inputs():
    config, vocab = SweepConfig(prompt_tokens=40, seed=4), list(WORDS[1:40])
    first = workload_for(config, 40, vocab)
    assert workload_for(config, 40, vocab) is first  # the same objects: the shortcut
    assert workload_for(SweepConfig(prompt_tokens=40, seed=4), 40, list(vocab)) is first  # equal: the key
    other_seed = workload_for(SweepConfig(prompt_tokens=40, seed=5), 40, vocab)
    assert other_seed is not first and other_seed.prompt(0, "r") != first.prompt(0, "r")
    assert workload_for(config, 30, vocab) is not workload_for(config, 40, vocab)  # the words count too
    fewer = workload_for(config, 40, vocab[:20])  # another vocabulary: another workload, its own words
    assert fewer.vocab == tuple(vocab[:20]) and fewer is not workload_for(config, 40, vocab)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_calibration_against_the_server(sim_start, endpoint):
    sim = sim_start(base_ms=1)
    cal = calibrate_prompts(ServerTokenCounts(sim.url, "sim-model", endpoint == "chat", {}))
    # the simulator's tokenizer: words of up to 6 letters are one token, longer ones two
    # (llmload.sim.tokens); every prompt costs BOS + the anchor word (+ 3 chat template tokens)
    assert cal.vocab == tuple(w for w in WORDS[1:] if len(w) <= 6)
    assert (cal.method, cal.overhead_method, cal.overhead) == (
        "tokenize",
        "usage",
        5 if endpoint == "chat" else 2,
    )
    assert cal.words_for(100, tagged=False) == (95 if endpoint == "chat" else 98)
    with pytest.raises(ConfigError, match="'prompt_tokens' 6 is too short"):
        cal.words_for(6, tagged=True)


def synthetic_run(tmp_path: Path, ladder: str, endpoint: str) -> tuple[SweepRun, list[RequestRecord]]:
    """A ladder (YAML text) run against a fresh simulator by the endpoint's locustfile; it must pass."""
    config = tmp_path / "ladder.yaml"
    config.write_text(ladder)
    run = run_sweep(
        run_dir=tmp_path,
        endpoint=endpoint,
        locust_args=["--ladder", str(config)],
        sim={"base_ms": 1},
        timeout=120,
    )
    assert run.returncode == 0, run.log.read_text()[-3000:]
    records, _ = read_records(run.records)
    return run, records


def test_synthetic_prompts_have_the_requested_length(tmp_path):
    run, records = synthetic_run(
        tmp_path,
        "rungs: [2]\nrequests_per_user: 3\nwarmup_requests: 0\nmax_tokens: 4\nendpoint: chat\n"
        "prompt_tokens: 120\nshared_prefix_ratio: 0.25\n",
        "chat",
    )
    truth, _ = load_truth(run.truth_log)
    assert len(records) == 6
    assert {truth[r.request_id]["prompt_tokens"] for r in records} == {120}
    assert {r.prompt_tokens for r in records} == {120}  # the real input lengths, as reported
    assert "prompt_tokens 120 -> 115 one-token words" in run.log.read_text()


@pytest.mark.parametrize("unique", [False, True], ids=["shared", "unique"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("tokens", [16, 64, 512])
def test_every_request_has_the_asked_input_length(tmp_path, tokens, endpoint, unique):
    """By the server's own count (the simulator's BPE-like tokenizer: BOS, chat template, words
    of 7+ letters cost 2 tokens, a bracketed hex tag ~14): each request within 1 token of the ask."""
    run, records = synthetic_run(
        tmp_path,
        f"rungs: [2]\nrequests_per_user: 4\nwarmup_requests: 0\nmax_tokens: 2\nendpoint: {endpoint}\n"
        f"prompt_tokens: {tokens}\nunique_prompts: {str(unique).lower()}\nshared_prefix_ratio: 0.25\n",
        endpoint,
    )
    truth, _ = load_truth(run.truth_log)
    assert len(records) == 8
    served = [truth[r.request_id]["prompt_tokens"] for r in records]
    assert all(abs(n - tokens) <= 1 for n in served), served
    assert [r.prompt_tokens for r in records] == served and {r.prompt_tokens_asked for r in records} == {
        tokens
    }
    assert len({r.request_id for r in records}) == 8


def test_calibration_follows_the_endpoint_the_users_send_to(tmp_path):
    """The chat locustfile's users send chat requests although the ladder file does not say
    `endpoint: chat`: the prompts are calibrated for chat (its template), not for completions."""
    _, records = synthetic_run(
        tmp_path,
        "rungs: [1]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: 2\nprompt_tokens: 64\n",
        "chat",
    )
    assert [(r.endpoint, r.prompt_tokens) for r in records] == [("chat", 64), ("chat", 64)]


MIXED_LOCUSTFILE = """
import llmload.loadgen.plugin  # noqa: F401
from llmload.loadgen.run.ladder import LadderShape
from llmload.loadgen.request.users import ChatUser, CompletionsUser

__all__ = ["LadderShape", "ChatUser", "CompletionsUser"]
"""


@pytest.mark.parametrize(("tolerance", "code"), [(0.02, 3), (0.05, 0)])
def test_inputs_off_the_ask_fail_the_run(tmp_path, sim_start, tolerance, code):
    """Completions and chat users in one run: the prompts are calibrated for completions, so the
    chat requests carry the chat template's 3 tokens on top (67 for 64; rung mean 65.5, +2.3 %).
    Beyond input_tolerance the run fails with exit code 3 and says why; within it, it passes."""
    sim = sim_start(base_ms=1)
    locustfile = tmp_path / "mixed.py"
    locustfile.write_text(MIXED_LOCUSTFILE)
    config = tmp_path / "mixed.yaml"
    config.write_text(
        "rungs: [2]\nrequests_per_user: 2\nwarmup_requests: 0\nmax_tokens: 2\nprompt_tokens: 64\n"
        f"input_tolerance: {tolerance}\n"
    )
    cmd = locust_command(sim.url, tmp_path / "run", locustfile, ["--ladder", str(config)])
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    records, _ = read_records(tmp_path / "run_records.jsonl")
    assert (
        sorted((r.endpoint, r.prompt_tokens) for r in records)
        == [("chat", 67)] * 2 + [("completions", 64)] * 2
    )
    assert proc.returncode == code, proc.stderr[-3000:]
    missed = "input lengths not as asked: rung01 c2: input tokens mean 65.5 (min 64, max 67)"
    assert (missed in proc.stderr) == (code == 3)
