"""Judge a soak run from its files (finished, still running or crashed) and print its windows.

    llmload soak-report reports/soak [--config config/soak.yaml] [--format table|csv|json]
        [--no-files] [--no-png]

Reads <prefix>_run.json (start time, duration, the soak thresholds it ran with; --config replaces
them), <prefix>_records.jsonl and, when present, <prefix>_health.jsonl. Writes <prefix>_soak.json,
_soak.xml (JUnit), _soak_windows.csv and _soak.png unless --no-files.

Exit status: 0 pass, 1 a threshold breached, 2 could not judge (no records, no soak config, no full
window) or the run did not reach its duration.
"""

from __future__ import annotations

import json
import sys

from llmload.analysis.soak.verdict import EXIT_NOT_RUN, soak_report
from llmload.core.checks import file_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ConfigError
from llmload.core.files.records import RecordFileError
from llmload.output.soak_output import render_text, windows_csv, write_outputs


@command("llmload soak-report")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload soak-report", description=__doc__.split("\n\n")[0])
    p.add_argument("prefix", help="the run's --csv prefix, e.g. reports/soak")
    p.add_argument(
        "--config", type=file_path, default=None, help="soak config to judge with (default: the run's own)"
    )
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--no-files", action="store_true", help="print only; write no _soak.* files")
    p.add_argument("--no-png", action="store_true", help="write the files but not the PNG")
    args = p.parse_args(argv)
    try:
        report = soak_report(args.prefix, config_path=args.config)
    except (ConfigError, RecordFileError) as exc:
        print(f"llmload soak-report: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_NOT_RUN
    if not args.no_files:
        write_outputs(report, png=not args.no_png)
    if args.format == "csv":
        print(windows_csv(report), end="")
    elif args.format == "json":
        print(json.dumps(report.summary(), indent=1))
    else:
        print(render_text(report))
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return report.exit_code
