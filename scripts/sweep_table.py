#!/usr/bin/env python3
"""Sweep table (and optional latency metrics) of a run, from `<prefix>_records.jsonl`, cross-checked
against Locust's `<prefix>_stats.csv` / `<prefix>_failures.csv` when they exist.

    python scripts/sweep_table.py reports/x [--format table|markdown|csv|json] [--metrics]
        [--percentiles 50,90,99] [--slo-ttft-ms X] [--slo-tpot-ms X] [--slo-e2el-ms X]
        [--requests-per-user N] [--wide]

Exit status: 0 on success, 2 when the records file is missing or holds no measured record.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:
    import llmload  # noqa: F401  (installed in the repo's venv)
except ModuleNotFoundError:
    # run by an interpreter without llmload (plain `python` outside the venv): use the repo's venv
    venv = Path(__file__).resolve().parents[1] / ".venv"
    if (venv / "bin" / "python").exists() and Path(sys.prefix) != venv:
        os.execv(venv / "bin" / "python", [str(venv / "bin" / "python"), __file__, *sys.argv[1:]])
    raise

from llmload.locust_csv import cross_check
from llmload.metrics import SLO_KEYS, all_rung_metrics
from llmload.records import RecordFileError, read_records
from llmload.sweep import group_rungs, sweep_rows
from llmload.table import FORMATS, render


def _percentiles(text: str) -> list[float]:
    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from exc
    if not values or not all(0 <= p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"percentiles must be in [0, 100]: {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sweep_table", description=__doc__.split("\n\n")[0])
    p.add_argument("prefix", help="the run's --csv prefix, e.g. reports/x")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--metrics", action="store_true", help="add latency (TTFT/TPOT/ITL/E2EL) and rate tables")
    p.add_argument("--percentiles", type=_percentiles, default=[50.0, 90.0, 99.0], help="e.g. 50,90,99")
    p.add_argument("--slo-ttft-ms", type=float, help="goodput SLO on TTFT (ms)")
    p.add_argument("--slo-tpot-ms", type=float, help="goodput SLO on TPOT (ms)")
    p.add_argument("--slo-e2el-ms", type=float, help="goodput SLO on E2EL (ms)")
    p.add_argument("--requests-per-user", type=int, help="flag rungs with fewer requests as partial")
    p.add_argument("--wide", action="store_true", help="add rung, requests, partial_tokens, failure kinds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    records_path = f"{args.prefix}_records.jsonl"
    try:
        records, skipped = read_records(records_path)
    except RecordFileError as exc:
        print(f"sweep_table: error: {exc}", file=sys.stderr)
        return 2
    rungs = group_rungs(records)
    if not rungs:
        print(f"sweep_table: error: {records_path}: no measured records", file=sys.stderr)
        return 2
    slo = {k: v for k in SLO_KEYS if (v := getattr(args, f"slo_{k}")) is not None}
    rows = sweep_rows(rungs, requests_per_user=args.requests_per_user)
    with_metrics = args.metrics or args.format == "json"
    metrics = all_rung_metrics(rungs, percentiles=args.percentiles, slo=slo) if with_metrics else None
    print(render(rows, args.format, metrics=metrics, percentiles=args.percentiles, wide=args.wide))
    warnings = cross_check(args.prefix, rungs)
    if skipped:
        warnings.insert(
            0, f"{records_path}: skipped {len(skipped)} unreadable lines: {', '.join(map(str, skipped))}"
        )
    # machine-readable formats keep stdout clean; human formats print the warnings under the table
    out = sys.stderr if args.format in ("csv", "json") else sys.stdout
    for line in warnings:
        print(f"warning: {line}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
