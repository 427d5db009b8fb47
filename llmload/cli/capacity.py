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
import signal
import sys
from pathlib import Path

from llmload.analysis.capacity import CapacityResult, replay
from llmload.analysis.run.sweep_rows import group_rungs
from llmload.cli.sweep import OVERWRITE_HELP, _sim_flag, check_input, ended_by, records_at
from llmload.cli.sweep_run import default_run_dir, run_sweep
from llmload.core.checks import file_name, file_path, folder_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ENDPOINTS, ConfigError, load_config
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED
from llmload.core.files.output_paths import check_output_file, claim_run_folder, fresh_folder
from llmload.core.files.records import RecordFileError, read_records
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import read_run_info
from llmload.core.stop_signals import STOPS
from llmload.output.capacity import FORMATS, capacity_plot, render_capacity


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


@command("llmload capacity")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = ArgumentParser(
        prog="llmload capacity",
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
    p.add_argument("--sim", type=_sim_flag, action="append", default=[], help="simulator flag KEY=VALUE")
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
    returncode = 0
    prefix: str | Path | RunFiles = args.prefix
    if args.plot is not None:
        try:
            check_output_file("--plot", args.plot)
        except ConfigError as exc:
            print(f"llmload capacity: error: {one_line(str(exc))}", file=sys.stderr)
            return BAD_INPUT
    if not prefix:
        if not args.ladder:
            print(
                "llmload capacity: error: --ladder: a ladder file with 'mode: capacity' is needed",
                file=sys.stderr,
            )
            return BAD_INPUT
        try:
            mode = load_config(args.ladder).mode
        except ConfigError as exc:
            print(f"llmload capacity: error: {one_line(str(exc))}", file=sys.stderr)
            return BAD_INPUT
        if mode != "capacity":
            print(
                f"llmload capacity: error: {args.ladder}: 'mode' must be capacity, got {mode!r}",
                file=sys.stderr,
            )
            return BAD_INPUT
        run_args = ["--ladder", args.ladder, *passed_on, *locust_args]
        try:  # the sweep's own checks: host, --sim, output paths, Locust's parse of its options
            run_dir = args.run_dir or fresh_folder(default_run_dir())
            simulator = check_input(args, run_dir, run_args)
            records = records_at(run_dir, run_args, args.host or "")
            folder = claim_run_folder("--run-dir", run_dir, records, overwrite=args.overwrite)
        except ConfigError as exc:
            print(f"llmload capacity: error: {one_line(str(exc))}", file=sys.stderr)
            return BAD_INPUT
        print(
            f"llmload capacity: searching {args.host or 'the simulator'}; files in {run_dir}", file=sys.stderr
        )
        with STOPS, folder:  # a stop signal is recorded and acted on by run_sweep, never raised
            run = run_sweep(
                host=args.host or None,
                run_dir=run_dir,
                locust_args=run_args,
                sim_args=simulator,
                endpoint=args.endpoint,
                records=records,
            )
        prefix, returncode = run.files, run.returncode
        if (ended := ended_by(run)) is not None:
            returncode = ended[0]
            print(f"llmload capacity: error: {ended[1]}", file=sys.stderr)
        elif run.stopped_by is not None:
            returncode = INTERRUPTED
            name = signal.Signals(run.stopped_by).name
            stopped = "Locust stopped" if run.truth_log is None else "Locust and the simulator stopped"
            print(f"llmload capacity: stopped by {name}: {stopped}", file=sys.stderr)
        elif returncode != 0:
            print(f"llmload capacity: locust exited with code {returncode}; see {run.log}", file=sys.stderr)
    try:
        result = capacity_of_run(prefix)
    except (RecordFileError, ConfigError) as exc:
        print(f"llmload capacity: error: {one_line(str(exc))}", file=sys.stderr)
        return returncode or 2
    print(render_capacity(result, args.format))
    files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
    plot = capacity_plot(result, args.plot or files.output("capacity.png"))
    print(f"llmload capacity: plot in {plot}", file=sys.stderr)
    return returncode
