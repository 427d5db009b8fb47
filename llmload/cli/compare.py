"""Compare two runs rung by rung: change in agg tok/s, per-request tok/s, TTFT and TPOT, with a
bootstrap interval and a verdict per rung (improved / regressed / within noise).

    llmload compare reports/base reports/cand [--threshold 0.05] [--fail-on-regression]

Exit status: 0; 1 with --fail-on-regression when a rung regressed; 2 when a run cannot be read.
"""

from __future__ import annotations

import argparse
import sys

from llmload.analysis.compare import compare_runs, render_comparison
from llmload.analysis.postprocess import load_run
from llmload.core.checks import any_integer, flag_type, integer, non_negative_number, open_unit_interval
from llmload.core.exit_codes import BAD_INPUT, OK, REGRESSED
from llmload.core.records import RecordFileError
from llmload.core.run_files import RunFiles


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmload compare", description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the baseline run (prefix, records file, or run folder)")
    p.add_argument("cand", help="the candidate run")
    # checked as the ladder file's keys of the same kind (a confidence as capacity.confidence)
    p.add_argument(
        "--threshold",
        type=flag_type(non_negative_number, "threshold"),
        default=0.05,
        help="smallest change called a verdict (0.05 = 5 %%)",
    )
    p.add_argument(
        "--confidence",
        type=flag_type(open_unit_interval, "confidence"),
        default=0.95,
        help="interval confidence (default 0.95)",
    )
    p.add_argument(
        "--resamples",
        type=flag_type(integer(1), "resamples"),
        default=1000,
        help="bootstrap resamples (default 1000)",
    )
    p.add_argument(
        "--seed", type=flag_type(any_integer, "seed"), default=0, help="bootstrap seed (default 0)"
    )
    p.add_argument("--format", choices=["table", "markdown"], default="table")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any rung regressed (CI)")
    args = p.parse_args(argv)
    try:
        base, cand = (load_run(RunFiles.find(run), keep_records=True) for run in (args.base, args.cand))
    except RecordFileError as exc:
        print(f"llmload compare: error: {exc}", file=sys.stderr)
        return BAD_INPUT
    result = compare_runs(
        base,
        cand,
        resamples=args.resamples,
        confidence=args.confidence,
        threshold=args.threshold,
        seed=args.seed,
    )
    print(render_comparison(result, args.format))
    return REGRESSED if args.fail_on_regression and result.regressed else OK
