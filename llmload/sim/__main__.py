"""Command line of the simulator: `python -m llmload.sim` / `llmload sim`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from llmload.core.schema import add_plain_flags, from_plain_flags
from llmload.sim.config import FAULTS, SERVER, SimConfig
from llmload.sim.engine import ENGINE
from llmload.sim.faults import FAULT_KINDS, FaultPicker, parse_fault
from llmload.sim.run import run


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults, keep the fault table's line breaks."""


def build_parser() -> argparse.ArgumentParser:
    """The simulator's flags, generated from the declarations in SimConfig and StepModel."""
    p = argparse.ArgumentParser(
        prog="llmload sim",
        description="OpenAI-compatible (vLLM-shaped) LLM server simulator with a continuous-batching "
        "engine and a ground-truth log of when every token left the server.",
        epilog="fault kinds:\n" + "\n".join(f"  {k:<19} {v}" for k, v in FAULT_KINDS.items()),
        formatter_class=_HelpFormatter,
    )
    groups = {
        SERVER: p.add_argument_group("server"),
        ENGINE: p.add_argument_group(
            "engine (step_ms = (base + per_seq*batch + prefill*new_prompt_tokens) * degrade)"
        ),
        FAULTS: p.add_argument_group("faults"),
    }
    add_plain_flags(p, SimConfig, groups)
    groups[FAULTS].add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="inject a fault into this fraction of requests (repeatable); kinds: " + ", ".join(FAULT_KINDS),
    )
    return p


def config_from_args(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    faults = dict(args.fault)
    try:
        FaultPicker(faults)  # validates the sum of the rates
        config: SimConfig = from_plain_flags(args, SimConfig, faults=faults)
    except ValueError as err:
        parser.error(str(err))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    run(config_from_args(argv))
    return 0


if __name__ == "__main__":
    main()
