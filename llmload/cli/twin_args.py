"""`llmload twin`'s command line: its flags, each checked as it is parsed (--rungs by the sweep's
own parse and check of its rungs), the change they ask for (`change_of`), and the help's
paragraph on exit codes, written from `llmload.core.exit_codes` (`exit_status`).
"""

from __future__ import annotations

import argparse
import math
import textwrap

from llmload.analysis.twin.replay import Change
from llmload.cli.budget import add_component_arguments, component_config
from llmload.core.checks import flag_type, folder_path, number
from llmload.core.command_line import ArgumentParser
from llmload.core.config import ConfigError, rungs_flag
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, NO_FIT, NOT_WORTH_IT, OK, UNDECIDED
from llmload.core.schema import shown
from llmload.runner.twin_replays import TWIN_SIM

PROG = "llmload twin"
EXITS = (  # the twin's exit codes (llmload.core.exit_codes), as --help says them
    (OK, "the twin fits (with a change: worth it)"),
    (NO_FIT, "it does not fit (the verdict names why)"),
    (BAD_INPUT, "bad input, or a run the model cannot be fitted to"),
    (INTERRUPTED, "a replay was stopped"),
    (NOT_WORTH_IT, "with a change, not worth it"),
    (UNDECIDED, "with a change, cannot tell"),
)


def exit_status() -> str:
    """The help's paragraph on exit codes, written from the codes themselves."""
    text = "Exit status: " + "; ".join(f"{code} {what}" for code, what in EXITS) + "."
    return textwrap.fill(text, width=96)


def _rungs(text: str) -> list[int | float]:
    """--rungs: the sweep's own parse and check of its rungs (`llmload.core.config.rungs_flag`)."""
    try:
        return rungs_flag(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--rungs: ")) from None


def _concs(text: str) -> list[int]:
    """--at: comma-separated concurrencies."""
    try:
        values = [int(p) for p in text.replace(" ", "").split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected concurrencies like 8,12, got {shown(text)}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected concurrencies >= 1, got {shown(text)}")
    return values


def _percent(text: str) -> float:
    """--worth: a finite percentage >= 0, as a share."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5, got {shown(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite percentage >= 0, got {shown(text)}")
    return value / 100.0


def parse_args(argv: list[str], doc: str) -> argparse.Namespace:
    """The twin's flags, each checked (`doc`: the command's docstring, its help)."""
    p = ArgumentParser(
        prog=PROG,
        description=doc.split("\n\n")[0],
        epilog="\n\n".join([*doc.strip().split("\n\n")[1:], exit_status()]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a finished run: its prefix, records file or folder")
    p.add_argument(
        "--run-dir",
        type=folder_path,
        default=None,
        help="where the twin's files go (default: reports/twin-<time>)",
    )
    p.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    p.add_argument("--fit-only", action="store_true", help=f"fit and write {TWIN_SIM}; no replay")
    add_component_arguments(p)  # --accept-len: predict with it (a better draft model)
    scale = flag_type(number(0, 1_000, above=True), "step_scale")
    p.add_argument("--step-scale", type=scale, help="every step cost times S (a faster GPU or kernel: S < 1)")
    p.add_argument(
        "--rungs", type=_rungs, help="predict these rungs (e.g. 8,16; extrapolated where not measured)"
    )
    p.add_argument(
        "--at", type=_concs, default=None, help="the production rungs of the decision (default: all)"
    )
    p.add_argument(
        "--worth", type=_percent, default=0.05, help="the decision's threshold: a gain of at least PCT %% (5)"
    )
    return p.parse_args(argv)


def change_of(args: argparse.Namespace) -> Change:
    """The change the flags (and the budget file) ask for."""
    found = component_config(args, required=False)
    cost = speedup = None
    if found is not None:
        cfg, _ = found
        cost, speedup = cfg.cost, cfg.speedup
    elif args.speedup is not None:
        raise ConfigError("--speedup: of which component? give --component-ms MS or --config FILE")
    if cost is not None and speedup is None:
        raise ConfigError("--component-ms: give --speedup K too (the component K times faster; inf: free)")
    return Change(cost=cost, speedup=speedup, step_scale=args.step_scale, accept_len=args.accept_len)
