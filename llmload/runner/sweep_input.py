"""What a sweep checks before any process starts, shared by `llmload sweep` and `llmload capacity`.

`split_argv`: the command's own arguments and those after `--` (Locust's); `sim_flag`, `sim_args`,
`sim_file_flags`: the simulator's `--sim KEY=VALUE` and `--sim-file` settings, checked with the
simulator's own parser; `locust_options`: the Locust command line as Locust's own parser reads it;
`records_at`: where the run's records will land; `check_input`: all of it, the host, the API key
and the ladder file included; `claim`: the run folder made (a fresh reports/<kind>-<time>/ unless
--run-dir), checked and locked for the run (`llmload.core.files.output_paths.claim_run_folder`).
Each raises ConfigError (one line) for bad input, before anything runs.
"""

from __future__ import annotations

import argparse
import os
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from llmload.core.config import ConfigError, load_config
from llmload.core.files.output_paths import RunFolder, check_output_folder, claim_run_folder, fresh_folder
from llmload.core.files.run_files import RunFiles
from llmload.core.schema import shown
from llmload.loadgen.argparse_adapter import parser_actions
from llmload.loadgen.locust_args import parse_locust_args
from llmload.loadgen.options import check_api_key, check_host, run_config
from llmload.runner.sweep_run import LOCUSTFILES, default_run_dir, locust_command
from llmload.sim.__main__ import SimFlagError, build_parser, config_from_args

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


def sim_flag(text: str) -> tuple[str, str]:
    """`--sim KEY=VALUE` (an argparse type): (key with _ for -, value)."""
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


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the command's own arguments, those after `--`: Locust's unchanged)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run's folder, claimed: where its files go, the simulator's flags, where its records land."""

    run_dir: Path
    simulator: list[str]
    records: RunFiles
    folder: RunFolder  # held (a lock) until closed: `with claimed.folder:` while the run is reported


def claim(args: argparse.Namespace, locust_args: Sequence[str]) -> Claimed:
    """Check the input (`check_input`) and claim the run folder (--run-dir, default a fresh
    reports/sweep-<time>/) for this run; ConfigError (one line) for bad input or a folder in use."""
    run_dir = args.run_dir or fresh_folder(default_run_dir())
    simulator = check_input(args, run_dir, locust_args)
    records = records_at(run_dir, locust_args, args.host or "")
    folder = claim_run_folder("--run-dir", run_dir, records, overwrite=args.overwrite)
    return Claimed(run_dir, simulator, records, folder)
