"""Output lengths from a prompt file's replies (`{dist: empirical, replies: true | FILE}`): the
lengths are the replies' tokens by llmload's model of a BPE tokenizer (the simulator's), the run's
prompt_file and its format are taken, `min` / `max` keep a range, the configuration round-trips
to the workers and takes the form as a flag, and bad input (a file without replies, garbage,
wrong keys) is one line naming the key, fuzzed."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest
from fixtures.fuzzing import examples
from fixtures.paths import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmload.core.checks import ConfigError
from llmload.core.config import load_config, parse_config
from llmload.core.workload.lengths import Lengths, parse_lengths
from llmload.core.workload.prompt_files import load_prompt_file, load_replies
from llmload.core.workload.token_count import count_text_tokens, text_tokens
from llmload.loadgen.options import run_config
from llmload.loadgen.run.messages import config_to_dict
from llmload.sim.tokens import BOS_TOKENS, count_tokens

SAMPLE = REPO / "config" / "sharegpt-sample.json"
REPLIES = {"dist": "empirical", "replies": True}


def sharegpt(path: Path, replies: list[str | None]) -> Path:
    """A ShareGPT file: one conversation per reply (None: a prompt without one)."""
    convs = [
        {
            "conversations": [{"from": "human", "value": f"question {i}"}]
            + ([] if r is None else [{"from": "gpt", "value": r}])
        }
        for i, r in enumerate(replies)
    ]
    path.write_text(json.dumps(convs))
    return path


def test_the_lengths_are_the_replies_tokens_as_the_simulator_counts_them(tmp_path: Path):
    replies = ["one two three", "a government of the people, by the people.", ("x " * 40).strip(), None]
    ladder = tmp_path / "l.yaml"
    sharegpt(tmp_path / "p.json", replies)
    ladder.write_text("prompt_file: p.json\nmax_tokens: {dist: empirical, replies: true}\n")
    config = load_config(ladder)
    assert isinstance(config.max_tokens, Lengths)
    expected = tuple(count_tokens(r) - BOS_TOKENS for r in replies if r is not None)
    assert config.max_tokens.values == expected == (3, 11, 40)
    assert len(load_prompt_file(tmp_path / "p.json")) == 4  # the prompt without a reply is still sent
    # the same file named, and the shipped sample (its last two conversations have no reply)
    named = parse_lengths("t", "max_tokens", {"dist": "empirical", "replies": "p.json"}, base=tmp_path)
    assert named == config.max_tokens
    sample = parse_config({"prompt_file": str(SAMPLE), "max_tokens": REPLIES}, "t").max_tokens
    assert len(sample.values) == 10


def test_jsonl_replies_are_the_completion_or_the_response(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "a", "completion": "one two"}\n{"prompt": "b", "response": "x y z"}\n'
        '{"prompt": "c"}\n{"prompt": "d", "completion": " ", "response": "four five six seven"}\n'
    )
    assert load_replies("t", "k", path) == ["one two", "x y z", "four five six seven"]
    config = parse_config({"prompt_file": str(path), "max_tokens": REPLIES}, "t")
    assert config.max_tokens.values == (2, 3, 4)


def test_the_prompt_format_and_a_range_are_kept(tmp_path: Path):
    path = sharegpt(tmp_path / "p.txt", ["a b", "a b c d", "a " * 9])
    config = parse_config(
        {"prompt_file": str(path), "prompt_format": "sharegpt", "max_tokens": REPLIES | {"min": 3, "max": 8}},
        "t",
    )
    assert config.max_tokens.values == (4,) or config.max_tokens == 4  # one length left: a fixed one
    with pytest.raises(ConfigError, match="holds no reply \\(format lines"):
        parse_config({"prompt_file": str(path), "prompt_format": "lines", "max_tokens": REPLIES}, "t")


def test_the_form_round_trips_to_the_workers_and_is_taken_as_a_flag(tmp_path: Path):
    sharegpt(tmp_path / "p.json", ["a b", "a b c", "a b c d e"])
    ladder = tmp_path / "l.yaml"
    ladder.write_text("prompt_file: p.json\nmax_tokens: 16\n")
    flagged = run_config(Namespace(ladder=str(ladder), max_tokens="{dist: empirical, replies: true}"))
    assert flagged.max_tokens == Lengths("empirical", 2, 5, values=(2, 3, 5))
    again = parse_config(config_to_dict(flagged), "<announced by the master>")
    assert again.max_tokens == flagged.max_tokens
    assert flagged.with_overrides(seed=9).max_tokens == flagged.max_tokens


@pytest.mark.parametrize(
    ("files", "value", "named"),
    [
        (
            {"p.txt": "one prompt\nanother\n"},
            REPLIES,
            "'max_tokens.replies' .* holds no reply \\(format lines",
        ),
        ({"p.txt": '{"prompt": "a"}\n'}, REPLIES, "holds no reply \\(format jsonl"),
        ({"p.txt": '[{"conversations": [{"from": "human", "value": "q"}]}]'}, REPLIES, "holds no reply"),
        ({"p.txt": "[1, 2"}, REPLIES, "'max_tokens.replies' .* is not valid sharegpt"),
        ({"p.txt": '{"prompt": "a"}\n{oops\n'}, REPLIES, "'max_tokens.replies' .* is not valid jsonl"),
        ({"p.txt": b"\xff\xfe bad"}, REPLIES, "'max_tokens.replies' cannot read"),
        ({}, {"dist": "empirical", "replies": "missing.json"}, "'max_tokens.replies' cannot read"),
        ({}, {"dist": "empirical", "replies": 3}, "'max_tokens.replies' must be true .* or a file path"),
        ({}, {"dist": "empirical", "replies": ""}, "'max_tokens.replies' must be a file path"),
        ({"p.txt": "[]"}, REPLIES | {"format": "csv"}, "'max_tokens.format' must be one of"),
        ({}, {"dist": "empirical", "values": [3], "format": "lines"}, "'max_tokens.format' applies to"),
        ({}, {"dist": "empirical", "values": [3], "file": "x"}, "'max_tokens' .* needs exactly one of"),
        ({}, {"dist": "empirical", "values": [3, 9], "min": 10}, "'max_tokens' has no length in \\[10, "),
        ({}, {"dist": "empirical", "values": [3], "min": 5, "max": 4}, "'max_tokens.min' 5 is above"),
        ({}, {"dist": "empirical", "values": [3], "max": 0}, "'max_tokens.max' must be an integer >= 1"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(tmp_path: Path, files, value, named):
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    raw = {"max_tokens": value} | ({"prompt_file": str(tmp_path / "p.txt")} if files else {})
    with pytest.raises(ConfigError) as e:
        parse_config(raw, "ladder.yaml")
    message = str(e.value)
    assert message.startswith("ladder.yaml: ") and "\n" not in message
    assert __import__("re").search(named, message), message


def test_replies_true_without_a_prompt_file_names_the_key():
    with pytest.raises(ConfigError, match="'max_tokens.replies' true takes the replies of 'prompt_file'"):
        parse_config({"max_tokens": REPLIES}, "ladder.yaml")


@settings(max_examples=examples(1000), deadline=None)
@given(st.text(max_size=200))
def test_the_count_is_the_simulator_s_tokenizer(text):
    assert count_text_tokens(text) == len(text_tokens(text)) == count_tokens(text) - BOS_TOKENS


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=12)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["conversations", "from", "value", "prompt", "completion", "response", "x"]),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=16,
)
turns = st.fixed_dictionaries(
    {"from": st.sampled_from(["human", "gpt", "system", "user", "bard", 3]), "value": json_values}
)
conversations = st.lists(  # a prompt then its reply, the usual ShareGPT entry
    st.tuples(st.text(min_size=1, max_size=20), st.text(max_size=60)).map(
        lambda qa: {"conversations": [{"from": "human", "value": qa[0]}, {"from": "gpt", "value": qa[1]}]}
    ),
    max_size=5,
)
contents = st.one_of(
    conversations.map(json.dumps),
    st.text(max_size=120),
    json_values.map(json.dumps),
    st.lists(st.fixed_dictionaries({"conversations": st.lists(turns, max_size=4)}), max_size=4).map(
        json.dumps
    ),
    st.lists(json_values, max_size=4).map(lambda objs: "\n".join(json.dumps(o) for o in objs)),
    st.binary(max_size=40),
)
options = st.just(REPLIES) | st.fixed_dictionaries(
    {"dist": st.just("empirical")},
    optional={
        "replies": st.one_of(st.just(True), st.just("p.txt"), st.integers(), st.none(), st.text(max_size=4)),
        "format": st.one_of(st.sampled_from(["auto", "lines", "jsonl", "sharegpt"]), st.integers()),
        "min": st.integers(-2, 30),
        "max": st.integers(-2, 30),
        "values": st.lists(st.integers(-1, 9), max_size=3),
    },
)


@settings(
    max_examples=examples(1000),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(content=contents, value=options, fmt=st.sampled_from(["auto", "lines", "jsonl", "sharegpt"]))
def test_fuzzed_reply_files_and_options_are_accepted_in_bounds_or_one_line(tmp_path, content, value, fmt):
    path = tmp_path / "p.txt"
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    raw = {"prompt_file": str(path), "prompt_format": fmt, "max_tokens": value}
    try:
        config = parse_config(raw, "ladder.yaml")
    except ConfigError as e:
        assert str(e).startswith("ladder.yaml: ") and "\n" not in str(e)
        assert "'max_tokens" in str(e) or "'prompt_file'" in str(e), str(e)
        return
    lengths = config.max_tokens
    values = lengths.values if isinstance(lengths, Lengths) else (lengths,)
    assert values and all(value.get("min", 1) <= v <= value.get("max", 10**7) for v in values)
