"""Write a run's report: PNG plots and one self-contained HTML page, beside the run's files.

    llmload report reports/sweep-20250101-120000        # a run folder (one run in it)
    llmload report reports/x [--out reports/x-report]   # or the run's --csv prefix
    llmload report reports/x --decision reports/twin-x  # with llmload twin's decision (its --run-dir)

Exit status: 0 on success, 2 when the run's records are missing or hold no measured record.
"""

from __future__ import annotations

import sys

from llmload.core.checks import folder_path
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.files.output_paths import check_output_folder
from llmload.core.files.records import RecordFileError
from llmload.output.html_report import read_decision, write_report
from llmload.servers.python_child import PythonChild


@command("llmload report")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload report", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="the run's --csv prefix, its records file, or a folder holding one run")
    p.add_argument(
        "--out", type=folder_path, default=None, help="output folder (default: beside the run's files)"
    )
    p.add_argument(
        "--decision",
        type=folder_path,
        default=None,
        help="show llmload twin's decision: its decision.json, or the twin's --run-dir holding it "
        "(default: a decision.json beside the run's files, if any)",
    )
    args = p.parse_args(argv)
    try:
        if args.out is not None:
            check_output_folder("--out", args.out)
        decision = None if args.decision is None else read_decision(args.decision, "--decision")
        page, plots = write_report(args.run, args.out, decision, start_child=PythonChild)
    except (RecordFileError, ConfigError) as exc:
        print(f"llmload report: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    for path in (page, *plots):
        print(path)
    return OK
