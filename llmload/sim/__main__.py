"""Command line of the simulator: `python -m llmload.sim` / `llmload sim`."""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Sequence
from typing import NoReturn

from llmload.core.command_line import ArgumentParser, command, one_line, path_text
from llmload.core.schema import add_plain_flags, from_plain_flags
from llmload.core.stop_signals import accept_stop_signals
from llmload.sim.config import FAULTS, SERVER, SimConfig, SimFlagError
from llmload.sim.engine import ENGINE
from llmload.sim.faults import FAULT_KINDS, FaultPicker, parse_fault
from llmload.sim.power import GPU
from llmload.sim.run import run, server_tls

__all__ = ["SimFlagError", "build_parser", "config_from_args", "main"]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults, keep the fault table's line breaks."""


def build_parser() -> argparse.ArgumentParser:
    """The simulator's flags, generated from the declarations in SimConfig and StepModel."""
    p = ArgumentParser(
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
        GPU: p.add_argument_group(
            "gpu (GET /gpu/metrics, as a DCGM exporter: watts = idle + busy + seq*batch while a step runs)"
        ),
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


def _raise_flag_error(message: str) -> NoReturn:
    raise SimFlagError(one_line(message))  # one line, each value cut, whatever was typed


def config_from_args(argv: Sequence[str] | None = None, *, exit_on_error: bool = True) -> SimConfig:
    """The simulator's configuration from its command line. A bad flag prints the usage and exits 2,
    or, with exit_on_error=False (checking flags before starting it), raises SimFlagError."""
    parser = build_parser()
    if not exit_on_error:  # neither an error nor --help may end the process that checks
        parser.error = _raise_flag_error  # type: ignore[method-assign]
        parser.print_help = lambda file=None: None  # type: ignore[method-assign]
        parser.exit = lambda status=0, message=None: _raise_flag_error("--help is not a setting")  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    faults = dict(args.fault)
    try:
        FaultPicker(faults)  # validates the sum of the rates
        config: SimConfig = from_plain_flags(args, SimConfig, faults=faults)
    except ValueError as err:
        parser.error(str(err))
    try:  # the certificate and key load now, so a bad pair is refused before anything starts
        server_tls(config)
    except (ssl.SSLError, OSError) as e:
        flags = (
            f"--ssl-certfile {path_text(config.ssl_certfile)} --ssl-keyfile {path_text(config.ssl_keyfile)}"
        )
        reason = e.reason if isinstance(e, ssl.SSLError) and e.reason else e.strerror or str(e)
        parser.error(f"{flags}: cannot load the certificate and its key: {reason}")
    return config


@command("llmload sim")
def main(argv: Sequence[str] | None = None) -> int:
    accept_stop_signals()  # SIGTERM stops the server by PID, whatever its parent left blocked
    return run(config_from_args(argv))


if __name__ == "__main__":
    sys.exit(main())
