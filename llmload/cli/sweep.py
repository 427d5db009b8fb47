"""Run the concurrency sweep and print its table: the main job, in one command.

    llmload sweep                          # against a fresh simulator
    llmload sweep --host http://127.0.0.1:8000 [--ladder config/sweep.yaml]
    llmload sweep --rungs 1,2 --max-tokens 16             # any ladder option of the locustfile
    llmload sweep --sim accept_len=1 --sim base_ms=10 -- --rungs 1,2,4

Without --host it starts the simulator on a free loopback port and stops it afterwards.
Options this command does not know (the ladder options: --rungs, --max-tokens, ...; see
`locust -f "$(llmload locustfile)" --help`) and arguments after `--` go to locust unchanged. The run's files land in reports/sweep-<time>/
(run_records.jsonl, run_stats.csv, run_failures.csv, run_run.json, locust.log).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmload.analysis.determinism import EXIT_DIVERGENCE, diverged
from llmload.analysis.postprocess import load_run, render_run
from llmload.cli.sweep_run import default_run_dir, run_sweep
from llmload.core.records import RecordFileError


def _sim_flag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. accept_len=1), got {text!r}")
    return key.replace("-", "_"), value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        prog="llmload sweep",
        description=__doc__.split("\n\n")[0],
        epilog="Other options (--rungs, --max-tokens, --requests-per-user, ...) go to locust.",
    )
    p.add_argument(
        "--host", default="", help="server URL, e.g. http://127.0.0.1:8000 (default: the simulator)"
    )
    p.add_argument("--ladder", default="", help="ladder file (default: the built-in ladder)")
    p.add_argument(
        "--run-dir", type=Path, default=None, help="where the run's files go (default: reports/sweep-<time>)"
    )
    p.add_argument(
        "--sim", type=_sim_flag, action="append", default=[], help="simulator flag KEY=VALUE, repeatable"
    )
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    p.add_argument(
        "--fail-on-divergence",
        action="store_true",
        help=f"exit {EXIT_DIVERGENCE} when the greedy-determinism check finds a rung whose texts differ",
    )
    args, passed_on = p.parse_known_args(own)
    locust_args = [*passed_on, *locust_args]
    if args.ladder:
        locust_args = ["--ladder", args.ladder, *locust_args]
    run_dir = args.run_dir or default_run_dir()
    target = args.host or "the simulator"
    print(f"llmload sweep: sweeping {target}; files in {run_dir}", file=sys.stderr)
    run = run_sweep(
        host=args.host or None,
        run_dir=run_dir,
        locust_args=locust_args,
        sim=dict(args.sim),
        endpoint=args.endpoint,
    )
    if run.returncode != 0:
        print(
            f"llmload sweep: locust exited with code {run.returncode}; last lines of {run.log}:", file=sys.stderr
        )
        print("\n".join(run.log.read_text(errors="replace").splitlines()[-15:]), file=sys.stderr)
    try:
        result = load_run(run.prefix)
    except RecordFileError as exc:
        print(f"llmload sweep: error: {exc}", file=sys.stderr)
        return run.returncode or 2
    print(render_run(result, args.format))
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if args.fail_on_divergence and diverged(result.divergence) and run.returncode == 0:
        return EXIT_DIVERGENCE
    return run.returncode
