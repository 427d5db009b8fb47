"""Length distributions (llmload.core.workload.lengths): the drawn lengths follow the asked distribution
(mean within 2 %, a Kolmogorov-Smirnov test at 1 % does not reject), a seed gives the same
sequence twice, any split of the indices gives back the single sequence, a scenario string equals
its mapping, and bad parameters are one line naming the key (fuzzed)."""

from __future__ import annotations

import itertools
import math
from argparse import Namespace
from pathlib import Path

import pytest
from fixtures.fuzzing import examples
from fixtures.length_stats import KS_1PCT, ks_statistic, truncated_normal_cdf, uniform_cdf
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.core.checks import ConfigError
from llmload.core.config import load_config, parse_config
from llmload.core.workload.lengths import Lengths, parse_lengths, parse_scenario
from llmload.loadgen.options import run_config
from llmload.loadgen.run.messages import config_to_dict
from llmload.loadgen.workload.arrivals import slot_indices

N = 2000


def draws(lengths: Lengths, stream: str = "input", seed: int = 0, n: int = N) -> list[int]:
    return [lengths.length(seed, stream, i) for i in range(n)]


NORMAL = parse_lengths(
    "t", "prompt_tokens", {"dist": "normal", "mean": 128, "std": 32, "min": 16, "max": 512}
)
UNIFORM = parse_lengths("t", "max_tokens", {"dist": "uniform", "min": 16, "max": 64})
UNIFORM_IN = UNIFORM  # the same distribution: a length has no key of its own


def test_normal_inputs_and_uniform_outputs_follow_the_asked_distribution():
    sample = draws(NORMAL)
    assert abs(sum(sample) / N - 128) / 128 < 0.02
    assert math.sqrt(N) * ks_statistic(sample, truncated_normal_cdf(128, 32, 16, 512)) < KS_1PCT
    out = draws(UNIFORM, "output")
    assert min(out) == 16 and max(out) == 64
    assert abs(sum(out) / N - 40) / 40 < 0.02
    assert math.sqrt(N) * ks_statistic(out, uniform_cdf(16, 64)) < KS_1PCT


def test_lognormal_has_the_asked_mean_and_stays_in_bounds():
    lengths = parse_lengths("t", "k", {"dist": "lognormal", "mean": 200, "std": 100, "min": 1, "max": 100000})
    sample = draws(lengths)
    assert abs(sum(sample) / N - 200) / 200 < 0.02
    bounded = parse_lengths("t", "k", {"dist": "lognormal", "mean": 200, "std": 100, "min": 150, "max": 160})
    assert set(draws(bounded, n=200)) <= set(range(150, 161))


def test_empirical_draws_each_length_by_its_share(tmp_path: Path):
    (tmp_path / "lengths.txt").write_text("10\n\n20\n20\n30\n")
    lengths = parse_lengths("t", "k", {"dist": "empirical", "file": "lengths.txt"}, base=tmp_path)
    sample = draws(lengths)
    shares = {v: sample.count(v) / N for v in (10, 20, 30)}
    assert set(sample) == {10, 20, 30}
    assert abs(shares[20] - 0.5) < 0.04 and abs(shares[10] - 0.25) < 0.04


def test_the_same_seed_gives_the_same_lengths_and_another_seed_others():
    assert draws(NORMAL, seed=7, n=200) == draws(NORMAL, seed=7, n=200)
    assert draws(NORMAL, seed=7, n=200) != draws(NORMAL, seed=8, n=200)
    assert draws(NORMAL, "input", n=200) != draws(NORMAL, "output", n=200)  # input and output independent


def test_any_split_of_the_indices_gives_back_the_single_sequence():
    single = draws(UNIFORM, n=200)
    # two processes taking interleaved indices, and two taking blocks
    halves = {i: UNIFORM.length(0, "input", i) for p in (0, 1) for i in range(p, 200, 2)}
    assert [halves[i] for i in range(200)] == single
    blocks = [UNIFORM.length(0, "input", i) for i in range(0, 120)] + [
        UNIFORM.length(0, "input", i) for i in range(120, 200)
    ]
    assert blocks == single


def test_a_scenario_string_equals_its_mapping():
    ins, outs = parse_scenario("t", "scenario", "N(480,240)/(300,150)")
    assert ins == parse_lengths("t", "k", {"dist": "normal", "mean": 480, "std": 240, "min": 1, "max": 1440})
    assert outs == parse_lengths("t", "k", {"dist": "normal", "mean": 300, "std": 150, "min": 1, "max": 900})
    assert (
        parse_scenario("t", "scenario", "U(50,100)/(50, 100)")
        == (parse_lengths("t", "k", {"dist": "uniform", "min": 50, "max": 100}),) * 2
    )
    assert parse_scenario("t", "scenario", " D(100,1000) ") == (
        parse_lengths("t", "k", 100),
        parse_lengths("t", "k", {"dist": "fixed", "value": 1000}),
    )


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (-3, "'k'"),
        (0, "'k'"),
        ({"dist": "uniform", "min": 64, "max": 16}, "'k.min'"),
        ({"dist": "normal", "mean": 128, "std": -1, "min": 1, "max": 500}, "'k.std'"),
        ({"dist": "normal", "mean": 128, "std": 0, "min": 1, "max": 500}, "'k.std'"),
        ({"dist": "normal", "mean": 128, "min": 1, "max": 500}, "std"),
        ({"dist": "gamma"}, "'k.dist'"),
        ({"dist": "uniform", "min": 1, "max": 5, "mean": 3}, "'k.mean'"),
        ({"dist": "empirical", "file": "garbage.txt"}, "'k.file'"),
        ({"dist": "empirical", "file": "missing.txt"}, "'k.file'"),
    ],
)
def test_bad_parameters_are_one_line_naming_the_key(tmp_path: Path, value, named):
    (tmp_path / "garbage.txt").write_text("12\nseven\n")
    with pytest.raises(ConfigError) as e:
        parse_lengths("ladder.yaml", "k", value, base=tmp_path)
    assert named in str(e.value) and "ladder.yaml" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text", ["N(1,2)", "U(5,1)/(1,2)", "D(1,2)/(3,4)", "X(1,2)/(3,4)", "N(a,b)/(c,d)", ""]
)
def test_bad_scenarios_are_one_line_naming_the_key(text):
    with pytest.raises(ConfigError) as e:
        parse_scenario("ladder.yaml", "scenario", text)
    assert "'scenario" in str(e.value) and "\n" not in str(e.value)


numbers = st.one_of(
    st.integers(-5, 2000),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
)
mappings = st.fixed_dictionaries(
    {
        "dist": st.one_of(
            st.sampled_from(["fixed", "uniform", "normal", "lognormal", "empirical"]), st.text(max_size=5)
        )
    },
    optional={k: numbers for k in ("value", "min", "max", "mean", "std", "file", "other")},
)


@settings(max_examples=examples(1000), deadline=None)
@given(value=st.one_of(numbers, mappings, st.lists(numbers, max_size=3)), u=st.floats(1e-12, 1 - 1e-12))
def test_fuzzed_lengths_are_accepted_in_bounds_or_one_line(value, u):
    try:
        lengths = parse_lengths("ladder.yaml", "max_tokens", value, base=Path("/nonexistent"))
    except ConfigError as e:
        assert "'max_tokens" in str(e) and "\n" not in str(e)
        return
    assert lengths.low <= lengths.at(u) <= lengths.high


@settings(max_examples=examples(1000), deadline=None)
@given(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda k, a, b, c, d: f"{k}({a},{b})/({c},{d})",
            st.sampled_from("NUDX"),
            *(st.integers(-3, 10**9) for _ in range(4)),
        ),
    )
)
def test_fuzzed_scenarios_are_accepted_or_one_line(text):
    try:
        ins, outs = parse_scenario("ladder.yaml", "scenario", text)
    except ConfigError as e:
        assert "'scenario" in str(e) and "\n" not in str(e)
        return
    assert ins.low <= ins.at(0.5) <= ins.high and outs.low <= outs.at(0.5) <= outs.high


def test_the_keys_take_a_distribution_in_yaml_flags_and_a_scenario():
    yaml_config = parse_config(
        {
            "prompt_tokens": {"dist": "uniform", "min": 16, "max": 64},
            "max_tokens": {"dist": "fixed", "value": 9},
        },
        "ladder.yaml",
    )
    assert yaml_config.prompt_tokens == UNIFORM_IN and yaml_config.max_tokens == 9  # fixed stays a number
    flags = run_config(
        Namespace(prompt_tokens="{dist: uniform, min: 16, max: 64}", max_tokens="9", scenario="")
    )
    assert (flags.prompt_tokens, flags.max_tokens) == (UNIFORM_IN, 9)
    assert run_config(Namespace(scenario="U(16,64)/(16,64)")).max_tokens == UNIFORM
    with pytest.raises(ConfigError, match="'scenario' sets 'max_tokens'"):
        parse_config({"scenario": "D(10,20)", "max_tokens": 30}, "ladder.yaml")
    with pytest.raises(ConfigError, match="--max-tokens: 'max_tokens' must be an integer"):
        run_config(Namespace(max_tokens="{dist: uniform"))


def test_a_configuration_with_distributions_round_trips_to_the_workers(tmp_path: Path):
    (tmp_path / "l.txt").write_text("5\n7\n")
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(
        "prompt_tokens: {dist: empirical, file: l.txt}\n"
        "max_tokens: {dist: normal, mean: 9, std: 2, min: 1, max: 20}\n"
    )
    config = load_config(ladder)
    again = parse_config(config_to_dict(config), "<announced by the master>")
    assert (again.prompt_tokens, again.max_tokens) == (config.prompt_tokens, config.max_tokens)
    assert config.with_overrides(seed=3).prompt_tokens == config.prompt_tokens


def test_processes_take_disjoint_shares_of_the_one_index_sequence():
    # a count-bounded rung of 5 users, 3 requests each, over processes of 2 and 3 users
    blocks = [list(itertools.islice(slot_indices(s, 5, 3), (s[1] - s[0]) * 3)) for s in ((0, 2), (2, 5))]
    assert sorted(blocks[0] + blocks[1]) == list(range(15))
    # a timed rung: in turn, a round of 5 indices at a time
    timed = [list(itertools.islice(slot_indices(s, 5, None), (s[1] - s[0]) * 4)) for s in ((0, 2), (2, 5))]
    assert sorted(timed[0] + timed[1]) == list(range(20))
    assert list(itertools.islice(slot_indices((0, 5), 5, None), 7)) == list(
        range(7)
    )  # one process: 0, 1, 2, ...
