"""The Amdahl budget of a component per decode step, rung by rung, from a sweep.

    llmload budget SWEEP --config config/budget.yaml
    llmload budget seed.csv --accept-len 4.5 --component-ms 0.8 --speedup 470
    llmload budget reports/sweep-X --component-ms 0.8 --speedup inf   # step and batch measured
    llmload budget reports/sweep-X --saves-ms 10                     # 10 ms less per step

SWEEP is a run (prefix, records file or folder): each rung's step and batch are measured from
its streams (and the server's metrics); or a sweep table typed in by hand (CSV, markdown or the
plain layout of sweep_table.py) with columns conc and agg_tok/s, whose step is conc x
--accept-len / agg tok/s. Options override the config file. Exit status: 0; 2 on a
configuration or input error (a component larger than the step included).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from llmload.analysis.budget import (
    BudgetConfig,
    CostModel,
    budget_rows,
    check_speedup,
    load_budget_config,
    load_points,
)
from llmload.core.checks import flag_type, number
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.files.records import RecordFileError
from llmload.output.budget_report import render_budget
from llmload.servers.python_child import PythonChild


def budget_file(text: str) -> Path:
    """--config: the budget YAML's path (also `llmload twin --config`)."""
    if not text.strip():  # Path("") is the current folder: "cannot read ." would not name the flag
        raise argparse.ArgumentTypeError("empty path; give the budget YAML file")
    return Path(text)


def positive_ms(text: str) -> float:
    """--saves-ms: a finite number of milliseconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of ms, got {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of ms > 0, got {text[:40]!r}")
    return value


def component_config(args: argparse.Namespace, *, required: bool = True) -> tuple[BudgetConfig, str] | None:
    """The component (from --saves-ms, --component-ms or --config) and the flag or key that gave
    its cost (named when it is refused); None when none is given and `required` is false."""
    if args.saves_ms is not None:
        if args.component_ms is not None or args.config is not None:
            raise ConfigError("--saves-ms: give it alone, or --component-ms / --config with --speedup")
        if args.speedup is not None:
            raise ConfigError("--saves-ms: the saving is absolute (the component free): drop --speedup")
        cost = CostModel(args.component or "the change", constant_ms=args.saves_ms)
        return BudgetConfig(cost=cost, accept_len=args.accept_len, speedup=math.inf), "--saves-ms"
    cfg = load_budget_config(args.config) if args.config else None
    if args.component_ms is not None:
        name = args.component or (cfg.cost.name if cfg else "component")
        cost, given_as = CostModel(name, constant_ms=args.component_ms), "--component-ms"
    elif cfg is not None:
        cost, given_as = cfg.cost, f"{args.config}: cost_ms"
    elif required:
        raise ConfigError("give --config FILE, --component-ms MS or --saves-ms MS")
    else:
        return None
    config = BudgetConfig(
        cost=cost,
        accept_len=args.accept_len if args.accept_len is not None else (cfg.accept_len if cfg else None),
        speedup=args.speedup if args.speedup is not None else (cfg.speedup if cfg else None),
    )
    return config, given_as


def add_component_arguments(p: argparse.ArgumentParser) -> None:
    """The component flags `budget` and `twin` share, each checked by its budget-file key's check."""
    p.add_argument("--config", type=budget_file, default=None, help="budget YAML (see config/budget.yaml)")
    p.add_argument("--component", default="", help="the component's name")
    p.add_argument(
        "--component-ms",
        type=flag_type(number(0, 60_000), "cost_ms"),
        default=None,
        help="the component's cost per step, ms",
    )
    p.add_argument(
        "--accept-len",
        type=flag_type(number(1, 1_000), "accept_len"),
        default=None,
        help="accepted tokens per sequence per step",
    )
    p.add_argument(
        "--speedup",
        type=flag_type(check_speedup, "speedup"),  # > 0, or inf: the component removed
        default=None,
        help="what if the component were this many times faster (inf: free)",
    )
    p.add_argument(
        "--saves-ms",
        type=positive_ms,
        default=None,
        help="the change saves this many ms of every step (an absolute change: the component free)",
    )
    p.add_argument("--wide", action="store_true", help="every column (default: tables fit 100 columns)")


@command("llmload budget")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload budget", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", help="a run or a sweep-table file")
    add_component_arguments(p)
    p.add_argument("--format", choices=["table", "markdown"], default="table")
    args = p.parse_args(argv)
    try:
        found = component_config(args)
        assert found is not None
        cfg, given_as = found
        points = load_points(args.sweep, start_child=PythonChild)
        rows = budget_rows(points, cfg.cost, cfg.accept_len, cfg.speedup, given_as)
    except (ConfigError, RecordFileError, OSError) as exc:
        print(f"llmload budget: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    accept_given = args.accept_len is not None and any(r.measured for r in rows)
    out = render_budget(rows, cfg.cost, cfg.speedup, args.format, wide=args.wide, accept_given=accept_given)
    print(out)
    return OK
