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
simulator over a pipe, and a simulator that ends mid-run stop the run at once (`ended_by`).

Bad input (host, ladder file, simulator flag, output folder) is one line before anything starts.
Ctrl+C, SIGTERM or SIGHUP at any moment (any number of them) stops Locust and the simulator
(`llmload.cli.sweep_run`), prints the table of the rungs that finished with the rest marked, and
exits with the interrupted code; the run has no time limit of its own. Exit codes:
`llmload.core.exit_codes` (docs/errors-and-exit-codes.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

import yaml

from llmload.analysis.identity.determinism import diverged
from llmload.analysis.run.postprocess import RunResult, load_run, missing_rungs
from llmload.cli.sweep_run import LOCUSTFILES, SweepRun, default_run_dir, locust_command, run_sweep
from llmload.core.checks import file_name, file_path, folder_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ENDPOINTS, ConfigError, load_config
from llmload.core.exit_codes import BAD_INPUT, DIVERGED, EXIT_CODES, INTERRUPTED, OK, WRITE_FAILED
from llmload.core.files.output_paths import check_output_folder, claim_run_folder, fresh_folder
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_errors import KINDS, RunError
from llmload.core.files.run_files import SIM_LOG, RunFiles
from llmload.core.files.run_info import read_run_info
from llmload.core.schema import shown
from llmload.core.stop_signals import STOPS
from llmload.loadgen.argparse_adapter import parser_actions
from llmload.loadgen.locust_args import parse_locust_args
from llmload.loadgen.options import check_api_key, check_host, options_help, run_config
from llmload.output.run_table import render_run, run_notes
from llmload.servers.python_child import PythonChild
from llmload.sim.__main__ import SimFlagError, build_parser, config_from_args

PROG = "llmload sweep"
OVERWRITE_HELP = "replace the earlier run in --run-dir (its records, run file, CSVs, truth log, logs)"
SIM_CHOSEN = ("host", "port", "port_file", "truth_log")  # the sweep sets these itself
SIM_REPEATABLE = ("fault",)
# the simulator's switches (flags without a value): `--sim KEY=true` turns one on, `KEY=false` leaves it off
SIM_SWITCHES = frozenset(
    o for a in parser_actions(build_parser()) if a.nargs == 0 and a.const is True for o in a.option_strings
)
SWITCH_WORDS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def _sim_flag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. accept_len=1), got {shown(text)}")
    return key.replace("-", "_"), value


def sim_args(flags: Sequence[tuple[str, str]]) -> list[str]:
    """The simulator's command-line flags from `--sim KEY=VALUE` pairs (true/false: a switch),
    checked with the simulator's own parser; ConfigError (one line) for a flag it would refuse,
    a flag the sweep sets itself, or a key given twice."""
    args: list[str] = []
    seen: dict[str, str] = {}
    for key, value in flags:
        where = f"--sim {shown(f'{key}={value}')}"
        if key in SIM_CHOSEN:
            raise ConfigError(f"{where}: the sweep chooses the simulator's {key} itself")
        if key in seen and key not in SIM_REPEATABLE:
            earlier = shown(f"{key}={seen[key]}")
            named = key if len(key) <= 100 else shown(key)
            raise ConfigError(f"{where}: {named} given twice (also {earlier}); give it once")
        seen[key] = value
        option = "--" + key.replace("_", "-")
        if option in SIM_SWITCHES:  # a simulator switch: on or off, never a value after it
            switch = value.strip().lower()
            if switch not in SWITCH_WORDS:
                raise ConfigError(f"{where}: {key} is a switch: give {key}=true or {key}=false")
            args += [option] if SWITCH_WORDS[switch] else []
        else:
            args += [option, value]
    try:
        config_from_args(args, exit_on_error=False)
    except SimFlagError as e:
        text = str(e)  # the simulator's parser quotes the whole value: cut, as every message is
        raise ConfigError(f"--sim: {text if len(text) <= 200 else text[:200] + '...'}") from None
    return args


def locust_options(run_dir: Path, locust_args: Sequence[str], host: str = "") -> Namespace | None:
    """The options of the Locust command the sweep will run, parsed by Locust's own parser
    (llmload.loadgen.locust_args): ConfigError with Locust's reason for one it would refuse
    (an unknown flag, a missing value, an output path it cannot write); None for --help."""
    placeholder = host or "http://127.0.0.1:1"  # the simulator's address is not known yet
    command = locust_command(placeholder, run_dir / "run", LOCUSTFILES["completions"], locust_args)
    return parse_locust_args(command[command.index("-f") :])


def records_at(run_dir: Path, locust_args: Sequence[str], host: str = "") -> RunFiles:
    """Where the run's records land: --records, else the last --csv prefix's records file (the
    sweep's own --csv, <run_dir>/run, unless the command names another), as the ladder decides."""
    options = locust_options(run_dir, locust_args, host)
    records = getattr(options, "records", "") if options is not None else ""
    if records:
        return RunFiles.of_records(records)
    prefix = getattr(options, "csv_prefix", None) if options is not None else None
    return RunFiles(Path(prefix) if prefix else run_dir / "run")


def _api_key(locust_args: Sequence[str]) -> str:
    """The key Locust will use: --api-key, else LOCUST_API_KEY, else OPENAI_API_KEY."""
    given = [v for flag, v in zip(locust_args, locust_args[1:], strict=False) if flag == "--api-key"]
    return given[-1] if given else os.environ.get("LOCUST_API_KEY") or os.environ.get("OPENAI_API_KEY", "")


def sim_file_flags(path: Path) -> list[tuple[str, str]]:
    """`--sim-file`: a YAML mapping of simulator settings (KEY: VALUE, as `--sim KEY=VALUE`)."""
    where = f"--sim-file {shown(str(path))}"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        why = " ".join(str(getattr(e, "strerror", None) or e).split())  # YAML's message spans lines
        raise ConfigError(f"{where}: cannot read: {why[:200]}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"{where}: expected a mapping of simulator settings (base_ms: 27.2, ...)")
    pairs = []
    for key, value in data.items():
        if isinstance(value, dict | list) or value is None:
            raise ConfigError(f"{where}: {shown(key)}: expected a number, a word or true/false")
        pairs.append((key.replace("-", "_"), str(value).lower() if isinstance(value, bool) else str(value)))
    return pairs


def check_input(args: argparse.Namespace, run_dir: Path, locust_args: Sequence[str]) -> list[str]:
    """Everything checkable before a process starts, Locust's own parse of its command line
    included; returns the simulator's flags (--sim-file's, then --sim's: a key in both is refused)."""
    sim = [*(sim_file_flags(args.sim_file) if getattr(args, "sim_file", None) else []), *args.sim]
    if args.host is not None:  # given, if only as '': never the simulator in silence
        check_host(args.host)
        if sim:
            flag = "--sim-file" if getattr(args, "sim_file", None) else "--sim"
            raise ConfigError(f"{flag} {sim[0][0]}: with --host no simulator is started")
    check_api_key(_api_key(locust_args))
    if args.ladder:
        load_config(args.ladder)
    check_output_folder("--run-dir", run_dir)  # created here: Locust's log and files go there
    options = locust_options(run_dir, locust_args, args.host or "")  # and every output path Locust writes
    if options is not None:
        run_config(options)  # the llmload flags' values, as the Locust process will check them
    return sim_args(sim)


def run_file_is_this_runs(run: SweepRun) -> bool:
    """Whether the run file was written by this run's Locust (not older than its start)."""
    try:
        return run.started_at is not None and run.files.run.stat().st_mtime >= run.started_at
    except OSError:
        return False


def run_errors(run: SweepRun) -> list[RunError]:
    """The errors this run's Locust recorded, each once, in order: why the run did not start, the
    server's first HTTP 400 reason, a failed reconciliation, a stalled rung, a file it could not
    write, ... (`llmload.core.files.run_errors.KINDS`): what it told over the status pipe, then
    what its run file holds besides. None when it wrote no run file and told nothing (it died
    first, or refused its configuration before writing any file) or left one older than its start
    (another run's)."""
    told = [
        RunError(t.kind, t.message, t.exit_code) for t in run.told if t.source == "locust" and t.kind in KINDS
    ]
    info = read_run_info(run.files) if run_file_is_this_runs(run) else None
    written = info.errors if info is not None else ()
    return told + [e for e in written if e not in told]


def ended_by(run: SweepRun) -> tuple[int, str] | None:
    """Why the run ended, when it was neither Locust's own end nor a stop signal: (exit code, the
    one line). A file of the run that could not be written (told by Locust or the simulator), a
    simulator that did not start, or one that ended while Locust ran."""
    failed = [t.message for t in run.told if t.exit_code == WRITE_FAILED]
    if failed:
        return WRITE_FAILED, failed[0]
    sim_log = run.log.parent / SIM_LOG
    said = [t.message for t in run.told if t.source == "llmload sim"]
    exit_code = run.simulator_exit
    code = exit_code if exit_code in (BAD_INPUT, WRITE_FAILED) else INTERRUPTED
    if run.simulator_failure is not None:
        return code, f"the simulator did not start: {said[0] if said else run.simulator_failure}"
    if exit_code is not None:
        why = said[0] if said else f"its log: {sim_log}"
        return (
            code,
            f"the simulator ended (exit code {exit_code}) while Locust ran; Locust was stopped: {why}",
        )
    return None


def unmeasured(run: SweepRun) -> RunResult | None:
    """A run stopped before its first record, as a table of its ladder (its run file's) with every
    rung marked started or not run; None without a run file of this run."""
    info = read_run_info(run.files) if run_file_is_this_runs(run) else None
    missing = missing_rungs(info, [])
    return RunResult(str(run.files.prefix), None, [], [], None, [], info, missing) if missing else None


def report(run: SweepRun, fmt: str, *, fail_on_divergence: bool = False) -> int:
    """Print the table of what was measured, and the one line that says how the run ended;
    returns the exit code (with `fail_on_divergence`, DIVERGED for a clean run whose greedy texts
    differ across rungs)."""
    code = run.returncode if run.returncode in EXIT_CODES else INTERRUPTED  # killed, crashed
    errors = run_errors(run)
    ended = ended_by(run)
    if ended is not None:
        code = ended[0]
        if run.started_at is None:  # nothing ran: no table
            print(f"{PROG}: error: {ended[1]}", file=sys.stderr)
            return code
    elif run.stopped_by is not None or run.time_limit is not None:
        code = INTERRUPTED
        cause = (
            signal.Signals(run.stopped_by).name
            if run.stopped_by is not None
            else f"its time limit ({run.time_limit:g} s)"
        )
        stopped = "Locust was stopped" if run.truth_log is None else "Locust and the simulator were stopped"
        print(f"{PROG}: stopped by {cause}: {stopped}", file=sys.stderr)
    elif code == BAD_INPUT:
        refused = [e.message for e in errors if e.exit_code == BAD_INPUT]
        cause = refused[-1] if refused else f"locust exited with code {run.returncode}; see {run.log}"
        print(f"{PROG}: error: {cause}", file=sys.stderr)
        return BAD_INPUT
    elif run.returncode not in EXIT_CODES:
        tail = run.log.read_text(errors="replace").splitlines()[-15:] if run.log.exists() else []
        print("\n".join(tail), file=sys.stderr)
        print(f"{PROG}: locust exited with code {run.returncode}; its output: {run.log}", file=sys.stderr)
    try:
        result = load_run(run.files, start_child=PythonChild)
    except RecordFileError as exc:
        ladder = unmeasured(run) if code in (INTERRUPTED, WRITE_FAILED) else None
        if ladder is not None:  # stopped before the first record: the ladder, every rung marked
            print(render_run(ladder, fmt))
        print(f"{PROG}: no measured request to tabulate ({exc})", file=sys.stderr)
        if ended is not None:
            print(f"{PROG}: error: {ended[1]}", file=sys.stderr)
        return code
    print(render_run(result, fmt))
    for line in [] if fmt == "table" else run_notes(result):  # never inside data made to paste or parse
        print(line, file=sys.stderr)
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for error in errors:  # a write failure other than the one said last followed from it
        if ended is None or (error.message != ended[1] and error.exit_code != WRITE_FAILED):
            print(f"{PROG}: {error.message}", file=sys.stderr)
    if fail_on_divergence and code == OK and diverged(result.divergence):
        code = DIVERGED
    if ended is not None:  # the last line: what stopped the run
        print(f"{PROG}: error: {ended[1]}", file=sys.stderr)
    elif code == INTERRUPTED:
        print(f"{PROG}: the run did not finish every rung (exit code {code})", file=sys.stderr)
    return code


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
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
        "--sim", type=_sim_flag, action="append", default=[], help="simulator flag KEY=VALUE, repeatable"
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
            run_dir = args.run_dir or fresh_folder(default_run_dir())
            simulator = check_input(args, run_dir, locust_args)
            records = records_at(run_dir, locust_args, args.host or "")
            folder = claim_run_folder("--run-dir", run_dir, records, overwrite=args.overwrite)
        except ConfigError as e:
            print(f"{PROG}: error: {one_line(str(e))}", file=sys.stderr)
            return BAD_INPUT
        with folder:  # held until the run is reported: no other run writes into it meanwhile
            if STOPS.first is not None:  # while checking: nothing started yet
                name = signal.Signals(STOPS.first).name
                print(f"{PROG}: stopped by {name} before anything started", file=sys.stderr)
                return INTERRUPTED
            target = args.host or "the simulator"
            print(f"{PROG}: sweeping {target}; files in {run_dir}", file=sys.stderr)
            run = run_sweep(
                host=args.host or None,
                run_dir=run_dir,
                locust_args=locust_args,
                sim_args=simulator,
                endpoint=args.endpoint,
                progress=True,
                records=records,
            )
            return report(run, args.format, fail_on_divergence=args.fail_on_divergence)
