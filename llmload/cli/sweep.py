"""Run the concurrency sweep and print its table: the main job, in one command.

    llmload sweep                          # against a fresh simulator
    llmload sweep --host http://127.0.0.1:8000 [--ladder config/sweep.yaml]
    llmload sweep --rungs 1,2 --max-tokens 16             # any ladder option of the locustfile
    llmload sweep --sim accept_len=1 --sim base_ms=10 -- --rungs 1,2,4
    llmload sweep --sim-file reports/twin-X/twin_sim.yaml  # the simulator `llmload twin` fitted

Without --host it starts the simulator on a free loopback port and stops it afterwards.
Options this command does not know (the ladder options: --rungs, --max-tokens, ...; see
below) and arguments after `--` go to locust unchanged. The run's files land in
reports/sweep-<time>/ under the current directory (run_records.jsonl, run_stats.csv,
run_failures.csv, run_run.json, locust.log).

A --run-dir in use by another run is refused (a lock), one holding an earlier run too unless
--overwrite. A file of the run that cannot be written (a full disk), told by Locust or the
simulator over a pipe, and a simulator that ends mid-run stop the run at once; how the run
ended is said once, for this command and `llmload capacity` (`llmload.runner.run_outcome`).

Bad input (host, ladder file, simulator flag, output folder) is one line before anything starts.
Ctrl+C, SIGTERM or SIGHUP at any moment (any number of them) stops Locust and the simulator
(`llmload.runner.sweep_run`), prints the table of the rungs that finished with the rest marked, and
exits with the interrupted code; the run has no time limit of its own. Exit codes:
`llmload.core.exit_codes` (docs/errors-and-exit-codes.md).
"""

from __future__ import annotations

import argparse
import signal
import sys

from llmload.analysis.identity.determinism import diverged
from llmload.analysis.run.postprocess import load_run
from llmload.core.checks import file_name, file_path, folder_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ENDPOINTS, ConfigError
from llmload.core.exit_codes import BAD_INPUT, DIVERGED, INTERRUPTED, OK, WRITE_FAILED
from llmload.core.files.records import RecordFileError
from llmload.core.stop_signals import STOPS
from llmload.loadgen.options import options_help
from llmload.output.run_table import render_run, run_notes
from llmload.runner.run_outcome import CRASHED, ENDED, REFUSED, STOPPED, ending, run_errors, unmeasured
from llmload.runner.sweep_input import OVERWRITE_HELP, claim, sim_flag, split_argv
from llmload.runner.sweep_run import SweepRun, run_sweep
from llmload.servers.python_child import PythonChild

PROG = "llmload sweep"


def report(run: SweepRun, fmt: str, *, fail_on_divergence: bool = False) -> int:
    """Print the table of what was measured, and the one line that says how the run ended
    (`llmload.runner.run_outcome.ending`); returns the exit code (with `fail_on_divergence`,
    DIVERGED for a clean run whose greedy texts differ across rungs)."""
    errors = run_errors(run)
    end = ending(run, errors)
    code = end.code
    ended = end.line if end.kind == ENDED else None
    if ended is not None and run.started_at is None:  # nothing ran: no table
        print(f"{PROG}: error: {ended}", file=sys.stderr)
        return code
    if end.kind == STOPPED:
        print(f"{PROG}: {end.line}", file=sys.stderr)
    elif end.kind == REFUSED:
        print(f"{PROG}: error: {end.line}", file=sys.stderr)
        return BAD_INPUT
    elif end.kind == CRASHED:
        tail = run.log.read_text(errors="replace").splitlines()[-15:] if run.log.exists() else []
        print("\n".join(tail), file=sys.stderr)
        print(f"{PROG}: {end.line}", file=sys.stderr)
    try:
        result = load_run(run.files, start_child=PythonChild)
    except RecordFileError as exc:
        ladder = unmeasured(run) if code in (INTERRUPTED, WRITE_FAILED) else None
        if ladder is not None:  # stopped before the first record: the ladder, every rung marked
            print(render_run(ladder, fmt))
        print(f"{PROG}: no measured request to tabulate ({exc})", file=sys.stderr)
        if ended is not None:
            print(f"{PROG}: error: {ended}", file=sys.stderr)
        return code
    print(render_run(result, fmt))
    for line in [] if fmt == "table" else run_notes(result):  # never inside data made to paste or parse
        print(line, file=sys.stderr)
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for error in errors:  # a write failure other than the one said last followed from it
        if ended is None or (error.message != ended and error.exit_code != WRITE_FAILED):
            print(f"{PROG}: {error.message}", file=sys.stderr)
    if fail_on_divergence and code == OK and diverged(result.divergence):
        code = DIVERGED
    if ended is not None:  # the last line: what stopped the run
        print(f"{PROG}: error: {ended}", file=sys.stderr)
    elif code == INTERRUPTED:
        print(f"{PROG}: the run did not finish every rung (exit code {code})", file=sys.stderr)
    return code


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    own, locust_args = split_argv(sys.argv[1:] if argv is None else argv)
    p = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=options_help(without=("--endpoint",)),  # the sweep's own --endpoint chooses it
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--host", default=None, help="server URL, e.g. http://127.0.0.1:8000 (default: the simulator)"
    )
    p.add_argument(
        "--ladder", type=file_name, default=None, help="ladder file (default: the built-in ladder)"
    )
    p.add_argument(
        "--run-dir",
        type=folder_path,
        default=None,
        help="where the run's files go (default: a new reports/sweep-<time>); a folder holding an "
        "earlier run is refused unless --overwrite",
    )
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument(
        "--sim", type=sim_flag, action="append", default=[], help="simulator flag KEY=VALUE, repeatable"
    )
    p.add_argument(
        "--sim-file",
        type=file_path,
        default=None,
        help="simulator settings from a YAML mapping (KEY: VALUE, e.g. `llmload twin`'s twin_sim.yaml)",
    )
    p.add_argument(
        "--endpoint",
        choices=list(ENDPOINTS),
        default="completions",
        help="the Locust user class and the endpoint it sends to: /v1/completions, "
        "/v1/chat/completions or /v1/responses (default: completions)",
    )
    p.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    p.add_argument(
        "--fail-on-divergence",
        action="store_true",
        help=f"exit {DIVERGED} when the greedy-determinism check finds a rung whose texts differ",
    )
    args, passed_on = p.parse_known_args(own)
    locust_args = [*passed_on, *locust_args]
    if args.ladder:
        locust_args = ["--ladder", args.ladder, *locust_args]
    with STOPS:  # from here a stop signal is recorded, never raised (llmload.core.stop_signals)
        try:
            claimed = claim(args, locust_args)
        except ConfigError as e:
            print(f"{PROG}: error: {one_line(str(e))}", file=sys.stderr)
            return BAD_INPUT
        with claimed.folder:  # held until the run is reported: no other run writes into it meanwhile
            if STOPS.first is not None:  # while checking: nothing started yet
                name = signal.Signals(STOPS.first).name
                print(f"{PROG}: stopped by {name} before anything started", file=sys.stderr)
                return INTERRUPTED
            target = args.host or "the simulator"
            print(f"{PROG}: sweeping {target}; files in {claimed.run_dir}", file=sys.stderr)
            run = run_sweep(
                host=args.host or None,
                run_dir=claimed.run_dir,
                locust_args=locust_args,
                sim_args=claimed.simulator,
                endpoint=args.endpoint,
                progress=True,
                records=claimed.records,
            )
            return report(run, args.format, fail_on_divergence=args.fail_on_divergence)
