"""A what-if twin of a measured run: the simulator's step model fitted to its records, replayed.

    llmload twin reports/sweep-X                               # fit, replay, measured vs twin
    llmload twin reports/sweep-X --component-ms 0.8 --speedup 470   # and what that change gains
    llmload twin reports/sweep-X --rungs 16,32                 # rungs the run did not measure
    llmload twin reports/sweep-X --step-scale 0.8 --accept-len 5
    llmload twin reports/sweep-X --fit-only --format json      # the parameters, no replay
    llmload twin reports/sweep-X --saves-ms 10 --at 8,12 --worth 10   # the decision, stated
    llmload twin seed.csv --accept-len 4.5 --component-ms 0.8 --speedup 470 --at 10   # a table

RUN is a finished run (prefix, records file or folder) with its run file. The fit
(llmload.analysis.twin.fit) estimates base_ms, per_seq_ms, prefill_ms_per_token, accept_len and
max_num_seqs from the records; the replay runs the run's own ladder and workload (its run file's
config) with `llmload sweep` on the simulator with those parameters, and prints measured vs twin
per rung with the verdict (llmload.analysis.twin.replay). A change (--component-ms/--speedup, --config,
--step-scale, --accept-len) or --rungs adds a prediction, run beside the replay (at the same
time), and printed only when the twin fits. The twin's files go to reports/twin-<time>/
(--run-dir): twin_sim.yaml (the fitted simulator settings: `llmload sweep --sim-file`), the
ladders, and each replay's run folder.

With a change, the decision follows the tables (llmload.analysis.twin.decision): per production
rung (--at, default every rung) the Amdahl bound on the measured step, the predicted gain with
its interval, and a verdict against --worth PCT (default 5); also written to decision.json and
decision.html in --run-dir. A sweep table typed in by hand (CSV, markdown, plain) has no records:
the twin then states what the bound alone decides (--accept-len is the table's acceptance).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from llmload.analysis.budget import budget_rows, parse_sweep_table
from llmload.analysis.knee import knee_of, sweep_points
from llmload.analysis.run.steps import measure_run
from llmload.analysis.twin.calibration import solve_setting
from llmload.analysis.twin.decision import decision_exit_code
from llmload.analysis.twin.fit import TwinFitError
from llmload.analysis.twin.gains import run_decision, table_decision
from llmload.analysis.twin.measured import fit_run, ladder_of, load_measured
from llmload.analysis.twin.replay import (
    Change,
    apply_change,
    bootstrap_spreads,
    judge,
    prediction_intervals,
    prediction_rows,
    replay_rows,
    run_figures,
)
from llmload.cli.budget import component_config
from llmload.cli.twin_args import PROG, change_of, parse_args
from llmload.core.command_line import command, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, NO_FIT, OK
from llmload.core.files.output_paths import check_output_folder
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import names_a_table
from llmload.output.twin_output import Shown, render_fit, render_twin, write_decision
from llmload.output.twin_report import decision_table, render_json
from llmload.runner.twin_replays import (
    TWIN_SIM,
    ReplayEnded,
    Stopped,
    calibrate,
    replay_runs,
    sim_pairs,
    simulator_takes,
    write_yaml,
)
from llmload.servers.python_child import PythonChild


def table_decision_of(args: argparse.Namespace, change: Change) -> int:
    """What a table alone answers, printed: the bound on its steps (conc x --accept-len / agg tok/s)."""
    found = component_config(args, required=True) if change.cost is not None else None
    if found is None:
        raise ConfigError(
            f"{args.run}: a sweep table has no records to fit the twin to; the bound needs a component "
            "(--component-ms with --speedup, --saves-ms or --config); the predicted figures need a run"
        )
    cfg, given_as = found
    points = parse_sweep_table(Path(args.run).read_text(), args.run)
    rows = budget_rows(points, cfg.cost, cfg.accept_len, cfg.speedup, given_as)
    try:
        decision = table_decision(rows, args.at, args.worth)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    print(
        render_json({"decision": decision.as_dict()})
        if args.format == "json"
        else decision_table(decision, args.format)
    )
    return decision_exit_code(decision, fits=True)


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    assert __doc__ is not None
    args = parse_args(list(sys.argv[1:] if argv is None else argv), __doc__)
    run_dir = args.run_dir or Path("reports") / time.strftime("twin-%Y%m%d-%H%M%S")
    try:
        change = change_of(args)
        if args.fit_only and not change.empty:
            raise ConfigError(
                f"--fit-only fits and replays nothing; the change ({change.describe()}) needs the replay: "
                "drop --fit-only, or the change"
            )
        if names_a_table(args.run):
            return table_decision_of(args, change)
        result, info = load_measured(args.run, PythonChild)
        fit = fit_run(result)
        predicted = apply_change(fit.params, change) if not change.empty else fit.params
        replay_ladder = ladder_of(info)
        predict_ladder = ladder_of(info, args.rungs) if args.rungs or not change.empty else None
        check_output_folder("--run-dir", run_dir)
        if not args.fit_only:  # else each sweep would refuse it, in its log
            for what, params in (("the fitted", fit.params), ("the changed", predicted)):
                simulator_takes(what, sim_pairs(params, info.model))
    except TwinFitError as exc:
        print(f"{PROG}: error: {args.run}: cannot fit the model: {exc}", file=sys.stderr)
        return BAD_INPUT
    except (ConfigError, RecordFileError, OSError) as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    sim_file = run_dir / TWIN_SIM
    if args.fit_only:
        write_yaml(sim_file, fit.params.sim_settings())
        print(render_fit(args.format, fit, sim_file))
        return OK if fit.fits else NO_FIT
    print(f"{PROG}: calibrating and replaying on the simulator; files in {run_dir}", file=sys.stderr)
    try:
        fit.params, draws = calibrate(run_dir / "calibrate", replay_ladder, fit.params, info.model)
        predicted = apply_change(fit.params, change) if not change.empty else fit.params
        if change.accept_len is not None and draws:  # the same offline replay of the draws
            setting = solve_setting(draws, change.accept_len, fit.params.max_draft)
            predicted = replace(predicted, sim_accept_len=setting)
        write_yaml(sim_file, fit.params.sim_settings())
        jobs = {"replay": (replay_ladder, sim_pairs(fit.params, info.model))}
        if predict_ladder is not None:
            jobs["predict"] = (predict_ladder, sim_pairs(predicted, info.model))
        results = replay_runs(run_dir, jobs)
    except Stopped:
        print(f"{PROG}: stopped by a signal: the replays were stopped", file=sys.stderr)
        return INTERRUPTED
    except ReplayEnded as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.code
    except (RecordFileError, ConfigError) as exc:  # a replay refused its ladder, or measured nothing
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    measured = run_figures(result)
    rows = replay_rows(measured, run_figures(results["replay"]))
    prediction = prediction_rows(measured, run_figures(results["predict"])) if "predict" in results else None
    verdict = judge(fit, rows, prediction or ())
    steps = {s.rung: s for s in measure_run(result.iter_records(), result.prefix)}
    boot = None
    if "predict" in results:
        predicted_rows = {row.rung: row.interval for row in results["predict"].rows}
        boot = bootstrap_spreads(results["predict"].record_rungs(), intervals=predicted_rows)
    intervals = prediction_intervals(rows, prediction or [], predicted, boot)
    decision = None
    if not change.empty:
        try:
            done = {
                row.conc: row.requests - row.failures for row in reversed(result.rows)
            }  # first rung of a conc
            limit = fit.params.max_num_seqs  # the knee beside the batch limit the fit measured
            knee = knee_of(sweep_points(result.rows), limit, "the twin's fit, max_num_seqs")
            decision = run_decision(
                change, measured, prediction, intervals, steps, verdict.fits, args.at, args.worth, done, knee
            )
        except ValueError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return BAD_INPUT
        write_decision(run_dir, decision, args.run)
    shown = Shown(rows, verdict, prediction, predicted, change, sim_file, steps, intervals, decision)
    print(render_twin(args.format, fit, shown, args.wide))
    return (
        decision_exit_code(decision, verdict.fits) if decision is not None else OK if verdict.fits else NO_FIT
    )
