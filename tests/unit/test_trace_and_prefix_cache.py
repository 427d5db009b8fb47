"""Trace files, the prefix-cache model, trace-stats and the trace workload's prompts (pure logic)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from fixtures.paths import REPO
from fixtures.sim_calibration import SIM_OVERHEAD, SIM_VOCAB

from llmload.analysis.trace_stats import block_ids, predicted_cached_tokens, rate_bins, trace_stats
from llmload.cli.trace_stats import main as trace_stats_main
from llmload.core.config import ConfigError, SweepConfig
from llmload.core.workload.trace_file import TraceLine, parse_trace, read_trace, replay_window
from llmload.loadgen.workload.trace import TraceWorkload
from llmload.sim.prefix_cache import PrefixCache, block_keys, prompt_units
from llmload.sim.tokens import CHAT_TEMPLATE_TOKENS_PER_MESSAGE, chat_prompt, count_tokens

SAMPLE = REPO / "config" / "sample-trace.jsonl"

JSONL = """\
{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}
{"timestamp": 1000, "input_length": 1024, "output_length": 7, "hash_ids": [1, 2]}

{"timestamp": 3500, "input_length": 10, "output_length": 3, "input_text": "hello there"}
"""
CSV = """\
timestamp,input_length,output_length,hash_ids,input_text
2000,600,5,"[1, 3]",
1000,1024,7,1 2,
3500,10,3,,hello there
"""


def test_jsonl_and_csv_say_the_same_and_are_sorted_by_time():
    a, b = parse_trace(JSONL, "t.jsonl"), parse_trace(CSV, "t.csv")
    strip = [(t.timestamp_ms, t.input_length, t.output_length, t.hash_ids, t.input_text) for t in a]
    assert strip == [(t.timestamp_ms, t.input_length, t.output_length, t.hash_ids, t.input_text) for t in b]
    assert strip == [
        (1000, 1024, 7, (1, 2), None),
        (2000, 600, 5, (1, 3), None),
        (3500, 10, 3, None, "hello there"),
    ]
    assert [t.line for t in a] == [2, 1, 4]  # file lines, for error messages and records


def test_window_and_speed():
    lines = parse_trace(JSONL, "t")
    assert [(off, t.line) for off, t in replay_window(lines)] == [(0.0, 2), (1.0, 1), (2.5, 4)]
    # window [0.5 s, 2.5 s) of trace time, sent twice as fast, from the window's start
    assert [(off, t.line) for off, t in replay_window(lines, start_s=0.5, duration_s=2.0, speed=2)] == [
        (0.25, 1)
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"timestamp": 1, "input_length": 0, "output_length": 1}',
            "t:1: 'input_length' must be an integer >= 1",
        ),
        ('{"timestamp": -5, "input_length": 3, "output_length": 1}', "t:1: 'timestamp' must be a number"),
        ('{"timestamp": 1, "input_length": 3}', "t:1: 'output_length' must be an integer >= 1, got None"),
        (
            '{"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}',
            "t:1: 'hash_ids' has 2 blocks; input_length 1025 needs ceil(1025/512) = 3",
        ),
        (
            '{"timestamp": 1, "input_length": 3, "output_length": 1, "hash_ids": "x"}',
            "'hash_ids' must be a list",
        ),
        ('{"timestamp": 1, "input_length": 3, "output_length": 1}\n{oops', "t:2: not a JSON object"),
        ("timestamp,input_length\n1,2\n", "t: the CSV header lacks output_length"),
        ("", "t: 'trace_file' holds no request"),
    ],
)
def test_bad_traces_name_the_line_and_field(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_trace(text, "t")


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 1, "input_length": "%s", "output_length": 1}' % ("x" * 5000),
        '{"timestamp": 1, "input_length": "%s", "output_length": 1}' % ("9" * 5000),
        '{"timestamp": 1%s, "input_length": 3, "output_length": 1}' % ("0" * 400),
    ],
    ids=["long-string", "long-digits", "beyond-a-float"],
)
def test_a_bad_trace_value_is_one_short_line(line):
    with pytest.raises(ConfigError) as err:
        parse_trace(line, "t")
    message = str(err.value)
    assert message.startswith("t:1: '") and "\n" not in message and len(message) <= 200, message


def test_unreadable_trace_file(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'no.jsonl'}: 'trace_file' cannot be read")):
        read_trace(tmp_path / "no.jsonl")


def test_prefix_cache_lru_by_hand():
    cache = PrefixCache(block_size=4, capacity_blocks=3)
    # 9 tokens: blocks a, b full; the 9th token is in a partial block (never cached)
    assert cache.admit(["a", "b"], 9) == 0
    assert cache.admit(["a", "b"], 9) == 8
    # 8 tokens exactly: the last block holds the last token, so only "a" may hit
    assert cache.admit(["a", "b"], 8) == 4
    # a miss stops the lookup even if later blocks are cached; recency is now a, x, b
    assert cache.admit(["x", "b"], 12) == 0
    assert len(cache) == 3
    assert cache.admit(["y"], 5) == 0  # full: evicts the least recently used, a
    assert cache.admit(["a"], 5) == 0  # a was evicted (re-inserted now, evicting x)
    assert cache.admit(["b"], 5) == 4 and cache.admit(["x"], 5) == 0


def test_block_keys_chain_over_the_prefix():
    one = block_keys(["a", "b", "c", "d", "e", "f"], 2)
    two = block_keys(["z", "z", "c", "d", "e", "f"], 2)
    assert len(one) == 3 and one[0] != two[0] and one[1] != two[1]  # same block, other prefix
    assert block_keys(["a", "b", "c", "d", "e"], 2) == one[:2]  # the partial block has no key


def test_chat_units_count_the_simulator_tokens():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi  there you"}]
    assert len(prompt_units(None, messages)) == chat_prompt(messages)[1] == 13  # BOS, 2 * 3 template
    for text in ("a  b\nc", "Hello, world: 42 tokens!", " x"):  # the simulator's count, whatever it is
        assert len(prompt_units(text)) == count_tokens(text)


def line(n: int, ids: list[int] | None, length: int, ts: float = 0.0) -> TraceLine:
    return TraceLine(n, ts, length, 1, tuple(ids) if ids is not None else None)


def test_predicted_hits_by_hand():
    lines = [
        line(1, [1, 2], 1000),  # cold
        line(2, [1, 2], 1024),  # block 1 full hit; block 2 holds the last token: 512
        line(3, [1, 5], 600),  # shares block 1: 512
        line(4, [9, 2], 1024),  # block id 2 after another prefix is another block: 0
        line(5, None, 1024),  # no hash_ids: shares nothing
        line(6, None, 1024),
    ]
    assert predicted_cached_tokens(lines, 512, 100) == [0, 512, 512, 0, 0, 0]
    # 16-token blocks: line 2 hits all of line 1's 62 full blocks (992 tokens); line 3 shares the
    # 32 blocks of id 1 and not the 5 full blocks of its partial block 5
    assert predicted_cached_tokens(lines, 16, 10_000)[:3] == [0, 992, 512]
    # LRU: line 4's two blocks evict line 2's from a cache of two, not from one of four
    order = [lines[1], lines[3], lines[2]]
    assert predicted_cached_tokens(order, 512, 2) == [0, 0, 0]
    assert predicted_cached_tokens(order, 512, 4) == [0, 0, 512]
    ids = block_ids(lines[0], 256, {})
    assert len(ids) == 3 and len(set(ids)) == 3


def test_rate_bins_and_stats():
    assert rate_bins([0.0, 0.5, 1.2, 3.9], 1.0) == [2.0, 1.0, 0.0, 1.0]
    window = replay_window(parse_trace(JSONL, "t"))
    stats = trace_stats(window, bin_s=1.0, block_size=512, capacities=[10])
    assert (stats.lines, stats.input_tokens, stats.output_tokens, stats.duration_s) == (3, 1634, 15, 2.5)
    assert stats.rate == [1.0, 1.0, 1.0]
    assert stats.cache[0].cached_tokens == 512 and stats.cache[0].hit_rate == pytest.approx(512 / 1634)


def test_trace_workload_prompts_share_blocks_exactly_where_hash_ids_do(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(JSONL)
    config = SweepConfig(mode="trace", trace_file=str(trace), warmup_requests=0, seed=3)
    wl = TraceWorkload(config, SIM_VOCAB, SIM_OVERHEAD)
    prompts = [wl.request(i) for i in range(3)]
    assert [(n, line_no) for _, n, line_no in prompts] == [(7, 2), (5, 1), (3, 4)]
    # the simulator's count (BOS + one token per word): exactly input_length
    assert [count_tokens(p) for p, _, _ in prompts[:2]] == [1024, 600]
    a, b = (prompt_units(p) for p, _, _ in prompts[:2])
    assert a[:512] == b[:512] and a[512:600] != b[512:]  # block 1 shared, blocks 2 and 3 differ
    assert prompts[2][0] == "hello there"  # input_text verbatim
    # the same block id always gives the same text, and a partial block is the full one's prefix
    again = TraceWorkload(config, SIM_VOCAB, SIM_OVERHEAD)
    assert again.request(0)[0] == prompts[0][0]
    assert wl._block((3, 0), 88).split() == wl._block((3, 0), 512).split()[:88]
    # another seed, other texts (a rerun against a server with a warm cache starts cold)
    other = TraceWorkload(SweepConfig(mode="trace", trace_file=str(trace), seed=4), SIM_VOCAB, SIM_OVERHEAD)
    assert other.request(0)[0] != prompts[0][0]
    # a bigger overhead (a chat template) shortens the first block only: still input_length tokens
    chat = TraceWorkload(config, SIM_VOCAB, SIM_OVERHEAD + 3)
    assert [len(p.split()) for p in chat.prepare()[:2]] == [1024 - 4, 600 - 4]
    with pytest.raises(ConfigError, match=re.escape(f"{trace}: no line in the window 'start_s' 100")):
        TraceWorkload(SweepConfig(mode="trace", trace_file=str(trace), start_s=100), SIM_VOCAB, SIM_OVERHEAD)
    short = tmp_path / "short.jsonl"
    short.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{short}:1: 'input_length' 1 is below the 2 tokens")):
        TraceWorkload(SweepConfig(mode="trace", trace_file=str(short)), SIM_VOCAB, SIM_OVERHEAD)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_the_simulator_cache_hits_what_trace_stats_predicts_on_the_built_prompts(endpoint):
    # the built prompts through the simulator's own units and cache, against the prediction from
    # hash_ids alone: block boundaries agree whatever the overhead (chat adds 3 template tokens)
    config = SweepConfig(mode="trace", trace_file=str(SAMPLE), duration_s=2)
    chat = endpoint == "chat"
    wl = TraceWorkload(config, SIM_VOCAB, SIM_OVERHEAD + (CHAT_TEMPLATE_TOKENS_PER_MESSAGE if chat else 0))
    cache = PrefixCache(16, 256)
    served = []
    for prompt, t in zip(wl.prepare(), wl.lines, strict=True):
        units = prompt_units(None, [{"role": "user", "content": prompt}]) if chat else prompt_units(prompt)
        assert len(units) == t.input_length
        served.append(cache.admit(block_keys(units, 16), len(units)))
    assert served == predicted_cached_tokens(wl.lines, 16, 256) and sum(served) > 0


def test_sample_trace_is_what_its_script_writes(tmp_path):
    out = tmp_path / "sample.jsonl"
    script = REPO / "scripts" / "make_sample_trace.py"
    subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, capture_output=True)
    assert out.read_text() == SAMPLE.read_text()
    assert len(read_trace(SAMPLE)) == 500


def test_trace_stats_command(capsys, tmp_path):
    assert trace_stats_main([str(SAMPLE), "--cache-blocks", "1024", "--speed", "5", "--bin-s", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("500 requests over 10.55 s;")
    assert "ideal prefix cache, 16-token blocks, LRU:" in out
    assert trace_stats_main([str(SAMPLE), "--format", "json", "--cache-blocks", "1024"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lines"] == 500 and data["cache"][0]["capacity_blocks"] == 1024
    lines = read_trace(SAMPLE)
    assert data["cache"][0]["cached_tokens"] == sum(predicted_cached_tokens(lines, 16, 1024))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5}\n')
    assert trace_stats_main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"llmload trace-stats: error: {bad}:1: 'output_length' must be an integer >= 1, got None"]
    with pytest.raises(SystemExit) as exc:
        trace_stats_main([str(SAMPLE), "--block-size", "24"])
    assert exc.value.code == 2
