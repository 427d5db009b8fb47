"""Write a run's report: PNG plots and one self-contained HTML page, beside the run's files.

    llmload report reports/sweep-20250101-120000        # a run folder (one run in it)
    llmload report reports/x [--out reports/x-report]   # or the run's --csv prefix

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
from llmload.output.html_report import write_report


@command("llmload report")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload report", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="the run's --csv prefix, its records file, or a folder holding one run")
    p.add_argument(
        "--out", type=folder_path, default=None, help="output folder (default: beside the run's files)"
    )
    args = p.parse_args(argv)
    try:
        if args.out is not None:
            check_output_folder("--out", args.out)
        page, plots = write_report(args.run, args.out)
    except (RecordFileError, ConfigError) as exc:
        print(f"llmload report: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    for path in (page, *plots):
        print(path)
    return OK
