"""The Amdahl budget of a component per decode step, rung by rung, from a sweep.

    llmload budget SWEEP --config config/budget.yaml
    llmload budget seed.csv --accept-len 4.5 --component-ms 0.8 --speedup 470
    llmload budget reports/sweep-X --component-ms 0.8   # accept length from /metrics

SWEEP is a run (prefix, records file or folder) or a sweep table typed in by hand (CSV,
markdown or the plain layout of sweep_table.py) with columns conc and agg_tok/s. Options
override the config file. Exit status: 0; 2 on a configuration or input error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmload.analysis.budget import (
    BudgetConfig,
    CostModel,
    budget_rows,
    load_budget_config,
    load_points,
)
from llmload.core.checks import flag_type, number
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.files.records import RecordFileError
from llmload.output.budget_report import render_budget


def budget_file(text: str) -> Path:
    """--config: the budget YAML's path (also `llmload twin --config`)."""
    if not text.strip():  # Path("") is the current folder: "cannot read ." would not name the flag
        raise argparse.ArgumentTypeError("empty path; give the budget YAML file")
    return Path(text)


def _config(args: argparse.Namespace) -> BudgetConfig:
    cfg = load_budget_config(args.config) if args.config else None
    if args.component_ms is not None:
        cost = CostModel(
            args.component or (cfg.cost.name if cfg else "component"), constant_ms=args.component_ms
        )
    elif cfg is not None:
        cost = cfg.cost
    else:
        raise ConfigError("give --config FILE or --component-ms MS")
    return BudgetConfig(
        cost=cost,
        accept_len=args.accept_len if args.accept_len is not None else (cfg.accept_len if cfg else None),
        speedup=args.speedup if args.speedup is not None else (cfg.speedup if cfg else None),
    )


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
        type=flag_type(number(0, 1e12, above=True), "speedup"),  # 1e9: the component removed
        default=None,
        help="what if the component were this many times faster",
    )


@command("llmload budget")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload budget", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", help="a run or a sweep-table file")
    add_component_arguments(p)
    p.add_argument("--format", choices=["table", "markdown"], default="table")
    args = p.parse_args(argv)
    try:
        cfg = _config(args)
        rows = budget_rows(load_points(args.sweep), cfg.cost, cfg.accept_len, cfg.speedup)
    except (ConfigError, RecordFileError, OSError) as exc:
        print(f"llmload budget: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    print(render_budget(rows, cfg.cost, cfg.speedup, args.format))
    return OK
