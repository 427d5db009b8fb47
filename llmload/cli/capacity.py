"""Find the largest concurrency, or request rate, that meets the SLOs, and say how sure that is:
`llmload capacity`.

examples:
    llmload capacity --ladder capacity.yaml                      # search a fresh simulator
    llmload capacity --ladder capacity.yaml --host http://127.0.0.1:8000
    llmload capacity --prefix reports/capacity-x/run             # the answer of a finished run

The ladder file sets `mode: capacity`, the bounds in `slo:` (ttft_ms, tpot_ms, itl_ms, e2el_ms)
and the search in `capacity:`: `variable: concurrency` (closed-loop users, default) or `rate`
(open-loop requests/s from `start`, `max_concurrency` client slots, bisected to
`rate_resolution`), `percentile`, `confidence`, `max_failure_ratio`, `requests`, `max_requests`
(see docs/capacity.md). The search runs as one Locust run like `llmload sweep`
(each probe a rung of the records file; other options go to locust), then the answer is
replayed from the records (llmload.analysis.capacity.replay), printed with the probes table,
and plotted to `<prefix>_capacity.png`. In a rate search TTFT and E2EL count the wait for a
client slot; a probe marked `!` waited for one (raise max_concurrency).

exit status: locust's (0 when the run finished cleanly), 2 on bad input, 4 when stopped
(SIGINT, SIGTERM or SIGHUP at any moment; the search has no time limit of its own).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmload.analysis.capacity import CapacityResult, replay
from llmload.analysis.run.sweep_rows import group_rungs
from llmload.core.checks import file_name, file_path, folder_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ENDPOINTS, ConfigError, load_config
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.files.output_paths import check_output_file
from llmload.core.files.records import RecordFileError, read_records
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import read_run_info
from llmload.core.stop_signals import STOPS
from llmload.output.capacity import FORMATS, capacity_plot, render_capacity
from llmload.runner.run_outcome import STOPPED, ending
from llmload.runner.sweep_input import OVERWRITE_HELP, claim, sim_flag, split_argv
from llmload.runner.sweep_run import run_sweep

PROG = "llmload capacity"


def capacity_of_run(prefix: str | Path | RunFiles) -> CapacityResult:
    """The search's answer from a run's records and run file (its config names the SLOs)."""
    files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
    info = read_run_info(files)
    if info is None or not info.has_config:
        raise RecordFileError(f"{files.run}: no run file: cannot tell the run's SLOs")
    config = info.sweep_config()
    if config.mode != "capacity":
        raise ConfigError(f"{files.run}: the run is 'mode: {config.mode}', not a capacity search")
    records, _ = read_records(files.records)
    return replay(config.capacity, config.slo, group_rungs(records))


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    own, locust_args = split_argv(sys.argv[1:] if argv is None else argv)
    p = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--ladder",
        type=file_name,
        default=None,
        help="ladder file with 'mode: capacity', 'slo:' and 'capacity:'",
    )
    p.add_argument(
        "--prefix", default="", help="report the search of this finished run instead of running one"
    )
    p.add_argument("--host", default=None, help="server URL (default: a fresh simulator)")
    p.add_argument("--run-dir", type=folder_path, default=None, help="where the run's files go")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument("--sim", type=sim_flag, action="append", default=[], help="simulator flag KEY=VALUE")
    p.add_argument(
        "--endpoint",
        choices=list(ENDPOINTS),
        default="completions",
        help="the Locust user class: /v1/completions, /v1/chat/completions or /v1/responses "
        "(default: completions)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="table", help="how the answer is printed (default: table)"
    )
    p.add_argument("--plot", type=file_path, default=None, help="plot file (default: <prefix>_capacity.png)")
    args, passed_on = p.parse_known_args(own)
    prefix: str | Path | RunFiles = args.prefix
    returncode = OK
    try:
        if args.plot is not None:
            check_output_file("--plot", args.plot)
        if not prefix:
            run_args = ["--ladder", _capacity_ladder(args.ladder), *passed_on, *locust_args]
            claimed = claim(args, run_args)  # the sweep's own checks and its claim of the run folder
    except ConfigError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    if not prefix:
        target = args.host or "the simulator"
        print(f"{PROG}: searching {target}; files in {claimed.run_dir}", file=sys.stderr)
        with STOPS, claimed.folder:  # a stop signal is recorded and acted on by run_sweep, never raised
            run = run_sweep(
                host=args.host or None,
                run_dir=claimed.run_dir,
                locust_args=run_args,
                sim_args=claimed.simulator,
                endpoint=args.endpoint,
                records=claimed.records,
            )
        prefix, end = run.files, ending(run)
        returncode = end.code
        if end.line is not None:  # how the run ended, in the sweep's words
            print(f"{PROG}: {'' if end.kind == STOPPED else 'error: '}{end.line}", file=sys.stderr)
        elif returncode != OK:
            print(f"{PROG}: locust exited with code {returncode}; see {run.log}", file=sys.stderr)
    try:
        result = capacity_of_run(prefix)
    except (RecordFileError, ConfigError) as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return returncode if returncode != OK else BAD_INPUT  # no answer: the run's own code, else bad input
    print(render_capacity(result, args.format))
    files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
    plot = capacity_plot(result, args.plot or files.output("capacity.png"))
    print(f"{PROG}: plot in {plot}", file=sys.stderr)
    return returncode


def _capacity_ladder(ladder: str | None) -> str:
    """--ladder, checked to be a capacity search's (ConfigError, one line, otherwise)."""
    if not ladder:
        raise ConfigError("--ladder: a ladder file with 'mode: capacity' is needed")
    mode = load_config(ladder).mode
    if mode != "capacity":
        raise ConfigError(f"{ladder}: 'mode' must be capacity, got {mode!r}")
    return ladder
