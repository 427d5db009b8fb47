"""Print the sweep table (and optionally latency metrics) of a run from its files:
`<prefix>_records.jsonl`, cross-checked against Locust's `<prefix>_stats.csv` / `_failures.csv`.

    llmload table reports/x [--format table|markdown|csv|json] [--metrics]
        [--percentiles 50,90,99] [--slo-ttft-ms X] [--slo-tpot-ms X] [--slo-e2el-ms X]
        [--requests-per-user N] [--wide]

Exit status: 0 on success, 2 (`llmload.core.exit_codes.BAD_INPUT`) when the records file is missing
or holds no measured record, 5 (`DIVERGED`) with --fail-on-divergence when a rung's greedy texts
differ from the reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from llmload.analysis.identity.determinism import diverged
from llmload.analysis.run.metrics import SLO_KEYS
from llmload.analysis.run.postprocess import load_run
from llmload.core.checks import flag_type, list_text
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import SloConfig, SweepConfig
from llmload.core.exit_codes import BAD_INPUT, DIVERGED, OK
from llmload.core.files.records import RecordFileError, being_written
from llmload.core.files.run_files import RunFiles
from llmload.core.schema import key_check
from llmload.output.run_table import render_run, run_notes
from llmload.output.table import FORMATS
from llmload.servers.python_child import PythonChild


def _key_type(cls: type, key: str, shown: str | None = None, **kwargs: Any) -> Any:
    """The argparse type of a flag checked by the check of its ladder-file twin `key`."""
    return flag_type(key_check(cls, key), shown or key, **kwargs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = ArgumentParser(prog="llmload table", description=__doc__.split("\n\n")[0])
    p.add_argument("prefix", help="the run's --csv prefix (reports/x), its records file, or the run's folder")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--metrics", action="store_true", help="add latency (TTFT/TPOT/ITL/E2EL) and rate tables")
    # each flag is checked by the check of its ladder-file twin (the key named in its errors)
    p.add_argument(
        "--percentiles",
        type=_key_type(SweepConfig, "percentiles", parse=list_text),
        default=[50.0, 90.0, 99.0],
        help="e.g. 50,90,99",
    )
    for key, what in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2el_ms", "E2EL")):
        flag = "--slo-" + key.replace("_", "-")
        p.add_argument(flag, type=_key_type(SloConfig, key, f"slo.{key}"), help=f"goodput SLO on {what} (ms)")
    p.add_argument(
        "--requests-per-user",
        type=_key_type(SweepConfig, "requests_per_user"),
        help="flag rungs with fewer requests as partial",
    )
    p.add_argument("--wide", action="store_true", help="add rung, requests, partial_tokens, failure kinds")
    p.add_argument(
        "--fail-on-divergence",
        action="store_true",
        help=f"exit {DIVERGED} when the greedy-determinism check finds a rung whose texts differ",
    )
    return p.parse_args(argv)


@command("llmload table")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    slo = {k: v for k in SLO_KEYS if (v := getattr(args, f"slo_{k}")) is not None}
    try:
        result = load_run(
            RunFiles.find(args.prefix),
            with_metrics=args.metrics or args.format == "json",
            percentiles=args.percentiles,
            slo=slo or None,  # none on the command line: the run's config `slo:`
            requests_per_user=args.requests_per_user,
            start_child=PythonChild,
        )
    except RecordFileError as exc:
        print(f"llmload table: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    if being_written(result.records_file or RunFiles(Path(result.prefix)).records):
        print(
            "llmload table: the run is still in progress (its records are being written): this is what it "
            "has measured so far",
            file=sys.stderr,
        )
    print(render_run(result, args.format, percentiles=args.percentiles, wide=args.wide))
    # formats made to paste or parse (markdown, csv, json) keep stdout data only: notes and
    # warnings go to stderr; the table format prints them under the table
    out = sys.stdout if args.format == "table" else sys.stderr
    for line in [] if args.format == "table" else run_notes(result):
        print(line, file=out)
    for line in result.warnings:
        print(f"warning: {line}", file=out)
    return DIVERGED if args.fail_on_divergence and diverged(result.divergence) else OK
