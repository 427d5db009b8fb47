"""Compare two runs rung by rung: change in agg tok/s, per-request tok/s, TTFT and TPOT, with a
bootstrap interval and a verdict per rung (improved / regressed / within noise), and whether the
candidate's greedy texts are the base's (outputs identical / changed / cannot be matched).

    llmload compare reports/base reports/cand [--threshold 0.05] [--fail-on-regression]
                                              [--fail-on-output-change] [--format json]

Exit status: 0; 6 with --fail-on-output-change when a matched request's text changed (first),
2 with it when the outputs cannot be matched; 1 with --fail-on-regression when a judged rung
regressed (a rung flagged saturated or machine-busy in either run has its verdict withheld and
never fails it; nor does a rung of too few requests to judge); 2 when a run cannot be read.
"""

from __future__ import annotations

import json
import sys

from llmload.analysis.compare import compare_runs, comparison_dict
from llmload.analysis.output_identity import output_identity
from llmload.analysis.run.postprocess import load_run
from llmload.core.checks import flag_type, integer, number, open_unit_interval
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.exit_codes import BAD_INPUT, OK, OUTPUT_CHANGED, REGRESSED
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.output.compare_report import render_comparison, render_outputs

MAX_RESAMPLES = (
    10_000  # a 95 % interval is stable long before; each is a pass over a rung (docs/measurements.md)
)


@command("llmload compare")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload compare", description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the baseline run (prefix, records file, or run folder)")
    p.add_argument("cand", help="the candidate run")
    # checked as the ladder file's keys of the same kind (a confidence as capacity.confidence)
    p.add_argument(
        "--threshold",
        type=flag_type(number(0, 100), "threshold"),
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
        type=flag_type(integer(1, MAX_RESAMPLES), "resamples"),
        default=1000,
        help="bootstrap resamples (default 1000)",
    )
    p.add_argument(
        "--seed",
        type=flag_type(number(-(2**63), 2**63 - 1, integer=True), "seed"),
        default=0,
        help="bootstrap seed (default 0)",
    )
    p.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    p.add_argument("--wide", action="store_true", help="every figure (default: the table fits 100 columns)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any rung regressed (CI)")
    p.add_argument(
        "--fail-on-output-change",
        action="store_true",
        help=f"exit {OUTPUT_CHANGED} when a matched request's greedy text differs from the base's (CI)",
    )
    args = p.parse_args(argv)
    try:
        base, cand = (load_run(RunFiles.find(run), keep_records=True) for run in (args.base, args.cand))
    except RecordFileError as exc:
        print(f"llmload compare: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    result = compare_runs(
        base,
        cand,
        resamples=args.resamples,
        confidence=args.confidence,
        threshold=args.threshold,
        seed=args.seed,
    )
    outputs = output_identity(base, cand)
    if args.format == "json":
        print(json.dumps({**comparison_dict(result), "outputs": outputs.as_dict()}, indent=2))
    else:
        print(
            "\n".join(
                [
                    render_comparison(result, args.format, wide=args.wide),
                    *render_outputs(outputs, args.format),
                ]
            )
        )
    if args.fail_on_output_change and outputs.reasons:
        # a gate that could not look must not pass: the outputs were not checked
        print(f"llmload compare: error: --fail-on-output-change: {outputs.summary()}", file=sys.stderr)
        return BAD_INPUT
    if args.fail_on_output_change and outputs.changed:
        return OUTPUT_CHANGED
    return REGRESSED if args.fail_on_regression and result.regressed else OK
