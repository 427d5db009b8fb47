"""The ladder file: defaults, overrides, and one-line errors that name the file and the key."""

import dataclasses
import importlib.util
import re
import time
from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from fixtures.paths import REPO
from locust.argument_parser import LocustArgumentParser

from llmload.core.config import ConfigError, SweepConfig, load_config, parse_config
from llmload.loadgen.options import add_arguments, run_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ladder.yaml"
    path.write_text(text)
    return path


def test_shipped_sweep_yaml_is_the_seed_ladder():
    cfg = load_config(REPO / "config" / "sweep.yaml")
    assert cfg.rungs == (1, 4, 8, 10)
    assert cfg.max_tokens == 256 and cfg.ignore_eos and cfg.stream and cfg.temperature == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rungz: [1, 2]\n", "unknown key 'rungz'"),
        ("rungs: []\n", "'rungs' is empty"),
        ("rungs: [1, 0]\n", "'rungs[1]' must be an integer >= 1, got 0"),
        ("rungs: [1, -4]\n", "'rungs[1]' must be an integer >= 1, got -4"),
        ("rungs: [1, two]\n", "'rungs[1]' must be an integer, got 'two'"),
        ("max_tokens: 0\n", "'max_tokens' must be an integer >= 1, got 0"),
        ("max_tokens: 12.5\n", "'max_tokens' must be an integer, got 12.5"),
        ("stream: yes please\n", "'stream' must be true or false"),
        ("distinct_prompts: 1\n", "'distinct_prompts' must be true or false"),
        ("continuous_usage: maybe\n", "'continuous_usage' must be true or false"),
        ("endpoint: embeddings\n", "'endpoint' must be one of completions, chat"),
        ("timeouts: {total: -1}\n", "'timeouts.total' must be a number > 0"),
        ("slo: {ttft: 5}\n", "unknown key 'slo.ttft'"),
        ("- 1\n- 2\n", "the top level must be a mapping"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ")
    assert message in text
    assert "\n" not in text


def test_yaml_syntax_error_gives_the_line(tmp_path):
    path = write(tmp_path, "rungs: [1, 4\nmax_tokens: 8\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: YAML syntax error"):
        load_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")


def test_options_override_the_file(tmp_path):
    path = write(tmp_path, "rungs: [1, 2]\nmax_tokens: 16\n")
    opts = Namespace(
        ladder=str(path),
        rungs="3,5",
        max_tokens=None,
        model="m",
        endpoint="",
        stream="false",
        requests_per_user=2,
        rung_duration=None,
        warmup_requests=0,
    )
    cfg = run_config(opts)
    assert cfg.rungs == (3, 5) and cfg.max_tokens == 16 and cfg.model == "m"
    assert cfg.stream is False and cfg.requests_per_user == 2 and cfg.warmup_requests == 0


def test_bad_rungs_option():
    opts = Namespace(ladder="config/sweep.yaml", rungs="1,x")
    with pytest.raises(ConfigError, match="--rungs"):
        run_config(opts)


def test_override_revalidates():
    with pytest.raises(ConfigError, match="'max_tokens' must be an integer >= 1"):
        SweepConfig().with_overrides(max_tokens=0)


def test_the_shipped_ladder_is_the_built_in_one():
    """`llmload sweep` without --ladder runs the built-in ladder; a checkout's config/sweep.yaml
    says the same, so `make sweep` (which names it) and the installed command agree."""
    shipped = load_config(REPO / "config" / "sweep.yaml")
    assert dataclasses.replace(shipped, source="<defaults>") == SweepConfig()


def test_the_docs_reference_is_generated_from_the_schema():
    spec = importlib.util.spec_from_file_location(
        "config_reference", REPO / "scripts" / "config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.PAGE.read_text()
    assert module.render(page) == page, "docs/configuration.md is stale: run scripts/config_reference.py"


def test_every_flag_of_the_schema_reaches_locust_and_back():
    parser = LocustArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(
        ["--rungs", "2,3", "--max-tokens", "7", "--rung-duration", "1.5", "--stream", "false"],
        env_vars={"LOCUST_MODEL": "m", "LOCUST_WARMUP_REQUESTS": "0"},
    )
    cfg = run_config(options)
    assert (cfg.rungs, cfg.max_tokens, cfg.duration, cfg.stream) == ((2, 3), 7, 1.5, False)
    assert (cfg.model, cfg.warmup_requests) == ("m", 0)
    assert set(parser.args_included_in_web_ui) >= {"rungs", "max_tokens", "rung_duration", "model"}


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("max_tokens", "abc", "--max-tokens: 'max_tokens' must be an integer, got 'abc'"),
        ("max_tokens", "0", "--max-tokens: 'max_tokens' must be an integer >= 1, got 0"),
        ("rung_duration", "soon", "--rung-duration: expected a number, got 'soon'"),
        ("rungs", "1,x", "--rungs: expected comma-separated numbers like 1,4,8,10, got '1,x'"),
    ],
)
def test_a_bad_flag_value_names_the_flag(flag, value, message):
    with pytest.raises(ConfigError) as err:
        run_config(Namespace(**{flag: value}))
    assert str(err.value) == message


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_rejected(tmp_path, value):
    with pytest.raises(ConfigError, match="'timeouts.total' must be a number"):
        load_config(write(tmp_path, f"timeouts: {{total: .{value}}}\n"))


@pytest.mark.parametrize("key", ["timeouts: {total", "burstiness", "temperature"])
def test_an_integer_beyond_any_float_is_rejected(tmp_path, key):
    """A number written out past 1e308 (was OverflowError: int too large to convert to float)."""
    closing = "}" if "{" in key else ""
    message = refused_quickly(write(tmp_path, f"{key}: 1{'0' * 400}{closing}\n"))
    assert re.search(r"'[\w.]+' must be a number, got 10+\.\.\.0+$", message), message


# --- bounded inputs: no file, alias or number makes a check hang or a message a page -------------
def laughs(depth: int = 9, leaf: str = '"lol"') -> str:
    """The "billion laughs": each anchor is nine aliases of the one before (9**10 values)."""
    text = f"&a0 [{', '.join([leaf] * 9)}]"
    for i in range(1, depth + 1):
        text = f"&a{i} [{text}, {', '.join([f'*a{i - 1}'] * 8)}]"
    return text


def refused_quickly(path: Path) -> str:
    """The ConfigError of `path`: one line naming it, short, within a generous bound of time."""
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    elapsed = time.monotonic() - t0
    message = str(err.value)
    assert elapsed < 5, elapsed
    assert message.startswith(f"{path}: ") and "\n" not in message and len(message) <= 300, message
    return message


@pytest.mark.parametrize("key", ["rungs", "prompt", "percentiles", "slo", "not_a_key"])
def test_an_alias_bomb_is_refused_at_the_limit(tmp_path, key):
    message = refused_quickly(write(tmp_path, f"{key}: {laughs()}\n"))
    assert re.search(r": line 1, column \d+: more than 10000 values, each alias counted", message), message


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    message = refused_quickly(write(tmp_path, "rungs: &r [1, *r]\n"))
    assert message.endswith("alias *r is used inside its own anchor")


def test_a_dense_file_stops_at_the_limit_of_values(tmp_path):
    message = refused_quickly(write(tmp_path, "rungs: [" + "1, " * 60_000 + "1]\n"))
    assert "more than 10000 values" in message


def test_aliases_within_the_limit_are_read(tmp_path):
    cfg = load_config(write(tmp_path, "max_tokens: &n 8\nrequests_per_user: *n\nrungs: [1, 2]\n"))
    assert (cfg.max_tokens, cfg.requests_per_user) == (8, 8)


def test_an_oversized_ladder_file_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, "rungs: [1]\nprompt: " + "x" * (50 << 20) + "\n")
    message = refused_quickly(path)
    assert message == (
        f"{path}: larger than 256 KiB, the most a ladder file may be "
        "(a ladder is a few KB; long prompts go in 'prompt_file')"
    )


def test_a_file_is_parsed_once_per_process(tmp_path, monkeypatch):
    """Locust's init checks the ladder and its first tick loads it again: one parse."""
    path = write(tmp_path, "rungs: [1, 2]\n")
    calls = []
    real = yaml.load
    monkeypatch.setattr(yaml, "load", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    assert load_config(path) == load_config(path) == run_config(Namespace(ladder=str(path)))
    assert len(calls) == 1
    path.write_text("rungs: [3]\n")  # an edited file is read again
    assert load_config(path).rungs == (3,)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "text",
    [
        f"prompt: [{'x' * 5000!r}]\n",
        f"model: {list(range(5000))}\n",
        f"endpoint: {'e' * 5000}\n",
        f"retries: {{on_status: {[200] * 5000}}}\n",
        f"rungs: [{'9' * 4000}]\n",
    ],
    ids=["long-string-in-list", "long-list", "long-choice", "long-status-list", "long-int"],
)
def test_a_bad_value_is_quoted_to_about_100_characters(tmp_path, text):
    message = refused_quickly(write(tmp_path, text))
    assert len(message.split(", got ", 1)[-1]) <= 110 or "asks" in message, message


USERS_CEILING = (
    r"at most 100000 users a rung \(20 processes of 5000 streams: more than any server batches\); "
    r"for more, split the load over several llmload runs"
)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("rungs: [1, 100000000000000000000000000000]\n", "rungs[1]"),
        ("rungs: [100001]\n", "rungs[0]"),
        ("mode: rate\nrequests_per_rung: 10\nrungs: [1]\nmax_concurrency: 1000000\n", "max_concurrency"),
        ("mode: capacity\nslo: {ttft_ms: 100}\ncapacity: {max_users: 10000000}\n", "capacity.max_users"),
    ],
)
def test_absurd_user_counts_are_refused_with_the_ceiling(tmp_path, text, key):
    path = write(tmp_path, text)
    message = refused_quickly(path)
    assert re.fullmatch(
        re.escape(f"{path}: '{key}' asks ") + r"(\d+|~10\^\d+) users; " + USERS_CEILING, message
    )


def test_the_users_ceiling_holds_for_flags_and_environment():
    parser = LocustArgumentParser()
    add_arguments(parser)
    for argv, env in ((["--rungs", "1,1" + "0" * 29], {}), ([], {"LOCUST_RUNGS": "200000"})):
        with pytest.raises(ConfigError) as err:
            run_config(parser.parse_args(argv, env_vars=env))
        assert re.fullmatch(
            r"--rungs: 'rungs\[\d\]' asks (200000|~10\^29) users; " + USERS_CEILING, str(err.value)
        )


def test_the_users_ceiling_itself_is_accepted(tmp_path):
    assert load_config(write(tmp_path, "rungs: [100000]\n")).rungs == (100000,)
    assert load_config(write(tmp_path, "mode: rate\nduration: 1\nrungs: [200000.0]\n")).rungs == (200000.0,)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"max_tokens_field": "max_output_tokens"}, "'max_tokens_field' must be one of"),
        (
            {"max_tokens_field": "max_completion_tokens"},
            "is a chat field; 'endpoint: completions' sends max_tokens",
        ),
        ({"endpoint": "responses", "max_tokens_field": "max_tokens"}, "sends max_output_tokens"),
        ({"endpoint": "responses", "stream": False}, "'endpoint: responses' needs 'stream: true'"),
        ({"endpoint": "response"}, "'endpoint' must be one of"),
    ],
)
def test_reasoning_keys_bad_input(raw, message):
    """The Responses endpoint and the output length's field: one line naming the key."""
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        parse_config(raw, "c.yaml")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("c.yaml: ")


def test_max_tokens_field_picks_the_request_field():
    from llmload.loadgen.workload.payload import build_payload

    def fields(**raw: object) -> set[str]:
        body = build_payload(parse_config(raw, "c.yaml"), "m", "p", 7)
        return {k for k in body if "max" in k and body[k] == 7}

    assert fields(endpoint="chat") == {"max_tokens", "max_completion_tokens"}
    assert fields(endpoint="chat", max_tokens_field="max_completion_tokens") == {"max_completion_tokens"}
    assert fields(endpoint="chat", max_tokens_field="max_tokens") == {"max_tokens"}
    assert fields(endpoint="responses") == {"max_output_tokens"}
    assert fields() == {"max_tokens"}
