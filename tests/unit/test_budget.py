"""The Amdahl budget: the seed's hand arithmetic (the motivating sweep: 8 GPUs, speculative
decoding, conc 1-10) reproduced from its table,
the table formats a user types in, the three cost models and the budget file's errors."""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
from fixtures.paths import REPO

from llmload.analysis.budget import (
    CostModel,
    amdahl_gain,
    budget_rows,
    fit_step_model,
    load_budget_config,
    parse_sweep_table,
)
from llmload.core.config import ConfigError

SCRIPT = REPO / "scripts" / "budget.py"


def budget_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


SEED_CSV = """conc,agg_tok/s,per_req_tok/s,tokens,wall_s
1,135.7,135.7,256,1.89
4,318.0,81.9,1024,3.22
8,479.6,61.8,2048,4.27
10,516.2,53.3,2560,4.96
"""
SEED_PLAIN = """ conc  agg_tok/s  per_req_tok/s  tokens  wall_s
    1      135.7          135.7     256    1.89
    4      318.0           81.9    1024    3.22
    8      479.6           61.8    2048    4.27
   10      516.2           53.3    2560    4.96
"""
SEED_MARKDOWN = """| conc | agg_tok/s | per_req_tok/s |
|-----:|----------:|--------------:|
| 1 | 135.7 | 135.7 |
| 4 | 318.0 | 81.9 |
| 8 | 479.6 | 61.8 |
| 10* | 516.2 | 53.3 |
"""
TREE_BUILD = CostModel("CPU tree build", constant_ms=0.8)


def test_seed_conclusion():
    """~45 tokens per step and ~87 ms per step at conc 10; a 0.8 ms component is < 1 % of it;
    a 470x faster one gains at most ~1 % end to end."""
    rows = budget_rows(parse_sweep_table(SEED_CSV), TREE_BUILD, 4.5, 470)
    top = rows[-1]
    assert top.conc == 10
    assert top.tokens_per_step == pytest.approx(45.0)
    assert round(top.step_ms, 1) == 87.2  # 45 / 516.2 * 1000
    assert round(top.share * 100, 2) == 0.92  # 0.8 / 87.17
    assert round(top.gain_speedup * 100, 2) == 0.92
    assert round(top.gain_free * 100, 2) == 0.93
    assert [round(r.step_ms, 1) for r in rows] == [33.2, 56.6, 75.1, 87.2]


def test_seed_step_model_fit():
    """step_ms = 27.2 + 6.0 * batch reproduces the seed table within ~10 %."""
    a, b = fit_step_model(budget_rows(parse_sweep_table(SEED_CSV), TREE_BUILD, 4.5, None))
    assert a == pytest.approx(27.2, rel=0.10) and b == pytest.approx(6.0, rel=0.10)


@pytest.mark.parametrize("text", [SEED_CSV, SEED_PLAIN, SEED_MARKDOWN])
def test_table_formats(text):
    points = parse_sweep_table(text)
    assert [(p.conc, p.agg_tok_s) for p in points] == [(1, 135.7), (4, 318.0), (8, 479.6), (10, 516.2)]


def test_table_without_the_columns_is_an_error():
    with pytest.raises(ConfigError, match="conc and agg_tok/s"):
        parse_sweep_table("users,tok\n1,2\n")


def test_amdahl():
    assert amdahl_gain(100.0, 10.0, 1.0) == 0.0
    assert amdahl_gain(100.0, 10.0, 2.0) == pytest.approx(100 / 95 - 1)
    assert amdahl_gain(100.0, 10.0, math.inf) == pytest.approx(100 / 90 - 1)


def test_cost_models(tmp_path):
    linear = tmp_path / "linear.yaml"
    linear.write_text("component: x\ncost_ms: {linear: {a: 0.2, b: 0.06}}\n")
    assert load_budget_config(linear).cost.cost_ms(10) == pytest.approx(0.8)
    table = tmp_path / "table.yaml"
    table.write_text("cost_ms: {table: {1: 0.4, 8: 0.75, 10: 0.8}}\naccept_len: 4.5\nspeedup: 470\n")
    cfg = load_budget_config(table)
    assert (cfg.accept_len, cfg.speedup) == (4.5, 470.0)
    assert cfg.cost.cost_ms(8) == 0.75
    assert cfg.cost.cost_ms(9) == pytest.approx(0.775)  # linear in between
    with pytest.raises(ConfigError, match="outside the cost table"):
        cfg.cost.cost_ms(16)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accept_len: 4.5\n", "cost_ms is required"),
        ("cost_ms: fast\n", "cost_ms: expected a number"),
        ("cost_ms: {linear: {a: 1}}\n", "expected keys a and b"),
        ("cost_ms: 1\nspeed: 2\n", "unknown key 'speed'"),
        ("cost_ms: {table: {x: 1}}\n", "positive integers"),
    ],
)
def test_budget_file_errors_name_the_key(tmp_path, text, message):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_budget_config(path)


def test_shipped_example_config_and_script(tmp_path):
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    done = budget_cli(str(seed), "--config", str(SCRIPT.parents[1] / "config" / "budget.yaml"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "87.2 ms per step" in out and "0.92 % of it" in out and "470x faster gains 0.92 %" in out


def test_script_without_accept_len_for_a_table_fails(tmp_path):
    seed = tmp_path / "seed.csv"
    seed.write_text(SEED_CSV)
    done = budget_cli(str(seed), "--component-ms", "0.8")
    assert done.returncode == 2 and "no accept length" in done.stderr


def test_the_budgets_line_is_the_one_step_line():
    """The budget's step line over the rungs is the twin's (one fit: least squares, both terms
    >= 0): steps of 11.5 ms at batch 1 and 24 ms at batch 2 give the free line -1 + 12.5 x batch,
    so the base is held at 0 and the slope is sum(b d) / sum(b b)."""
    rows = [
        SimpleNamespace(batch=b, conc=b, step_ms=d) for b, d in [(1, 11.0), (1, 12.0), (2, 23.5), (2, 24.5)]
    ]
    base, per_seq = fit_step_model(rows)
    assert base == 0.0 and per_seq == pytest.approx((11 + 12 + 2 * 23.5 + 2 * 24.5) / 10)
    # a line with both terms >= 0 is the plain least squares: 10 + 3 x batch exactly
    exact = [SimpleNamespace(batch=b, conc=b, step_ms=10 + 3 * b) for b in (1, 4, 8)]
    assert fit_step_model(exact) == (pytest.approx(10.0), pytest.approx(3.0))
