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

Exit status: 0 the twin fits (with a change: worth it); 1 it does not fit (the verdict names
why); 2 bad input or a run the model cannot be fitted to; 4 a replay was stopped; with a change,
7 not worth it and 8 cannot tell.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from llmload.analysis.budget import (
    amdahl_gain,
    budget_rows,
    parse_sweep_table,
)
from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.analysis.run.server_metrics import load_server_metrics, metrics_path, read_samples
from llmload.analysis.run.steps import RungSteps, measure_run, stepped
from llmload.analysis.twin.decision import NOT_WORTH, WORTH, Decision, RungDecision, decide, production
from llmload.analysis.twin.fit import TwinFit, TwinFitError, TwinParams, fit_accept_len, fit_twin
from llmload.analysis.twin.replay import (
    Change,
    Verdict,
    amdahl_bound,
    apply_change,
    bootstrap_spreads,
    judge,
    prediction_intervals,
    prediction_rows,
    replay_rows,
    row_dict,
    run_figures,
)
from llmload.cli.budget import add_component_arguments, component_config
from llmload.cli.sweep import sim_args
from llmload.core.checks import flag_type, folder_path, number
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import MAX_USERS_PER_RUNG, ConfigError, parse_config
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, NO_FIT, NOT_WORTH_IT, OK, UNDECIDED
from llmload.core.files import run_files
from llmload.core.files.output_paths import check_output_folder
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo
from llmload.core.schema import shown
from llmload.core.stop_signals import STOPS
from llmload.output.twin_report import (
    decision_html,
    decision_table,
    fit_lines,
    params_line,
    prediction_table,
    render_json,
    replay_table,
)
from llmload.servers.process import die_with_parent
from llmload.servers.python_child import PythonChild
from llmload.sim.engine import steps_to_generate
from llmload.sim.truth import load_truth

PROG = "llmload twin"
STOP_POLL_S = 0.2
CALIBRATION_STEP_MS = 2.0
SOLVE_STEPS = 20  # bisection steps of a setting in [1, 1 + max_draft]: 7 / 2**20, under its rounding


def _rungs(text: str) -> list[int | float]:
    items = text.replace(" ", "").split(",")
    try:
        rungs = [float(p) if "." in p else int(p) for p in items]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 8,16, got {shown(text)}"
        ) from None
    if not all(0 < rung <= MAX_USERS_PER_RUNG for rung in rungs):  # NaN too
        raise argparse.ArgumentTypeError(f"each rung must be in (0, {MAX_USERS_PER_RUNG}], got {shown(text)}")
    return rungs


def _concs(text: str) -> list[int]:
    """--at: comma-separated concurrencies."""
    try:
        values = [int(p) for p in text.replace(" ", "").split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected concurrencies like 8,12, got {shown(text)}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected concurrencies >= 1, got {shown(text)}")
    return values


def _percent(text: str) -> float:
    """--worth: a finite percentage >= 0, as a share."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5, got {shown(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite percentage >= 0, got {shown(text)}")
    return value / 100.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a finished run: its prefix, records file or folder")
    p.add_argument(
        "--run-dir",
        type=folder_path,
        default=None,
        help="where the twin's files go (default: reports/twin-<time>)",
    )
    p.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    p.add_argument("--fit-only", action="store_true", help="fit and write twin_sim.yaml; no replay")
    add_component_arguments(p)  # --accept-len: predict with it (a better draft model)
    p.add_argument(
        "--step-scale",
        type=flag_type(number(0, 1_000, above=True), "step_scale"),
        default=None,
        help="every step cost times S (a faster GPU or kernel: S < 1)",
    )
    p.add_argument(
        "--rungs",
        type=_rungs,
        default=None,
        help="predict these rungs (e.g. 8,16; extrapolated where not measured)",
    )
    p.add_argument(
        "--at", type=_concs, default=None, help="the production rungs of the decision (default: all)"
    )
    p.add_argument(
        "--worth", type=_percent, default=0.05, help="the decision's threshold: a gain of at least PCT %% (5)"
    )
    return p.parse_args(argv)


def change_of(args: argparse.Namespace) -> Change:
    """The change the flags (and the budget file) ask for."""
    found = component_config(args, required=False)
    cost = speedup = None
    if found is not None:
        cfg, _ = found
        cost, speedup = cfg.cost, cfg.speedup
    elif args.speedup is not None:
        raise ConfigError("--speedup: of which component? give --component-ms MS or --config FILE")
    if cost is not None and speedup is None:
        raise ConfigError("--component-ms: give --speedup K too (the component K times faster; inf: free)")
    return Change(cost=cost, speedup=speedup, step_scale=args.step_scale, accept_len=args.accept_len)


def is_table(source: str) -> bool:
    """A sweep table typed in by hand (a file that is not a records file), not a run."""
    path = Path(source)
    return path.is_file() and not path.name.endswith(run_files.RECORDS) and path.suffix != ".jsonl"


def step_bound(change: Change, step_ms: float, batch: float) -> float | None:
    """The most the change can gain on a step of `step_ms` at `batch` (the Amdahl bound of a
    component made faster; 1 / S - 1 for every step scaled by S; none for other changes)."""
    if change.cost is not None and change.speedup is not None:
        cost = change.cost.cost_ms(batch)
        return amdahl_gain(step_ms, cost, change.speedup) if cost < step_ms else None
    if change.step_scale is not None and change.accept_len is None:
        return 1.0 / change.step_scale - 1.0
    return None


def table_decision(args: argparse.Namespace, change: Change) -> int:
    """What a table alone answers: the bound on its steps (conc x --accept-len / agg tok/s)."""
    if change.cost is None:
        raise ConfigError(
            f"{args.run}: a sweep table has no records to fit the twin to; the bound needs a component "
            "(--component-ms with --speedup, --saves-ms or --config); the predicted figures need a run"
        )
    found = component_config(args, required=True)
    assert found is not None
    cfg, given_as = found
    points = parse_sweep_table(Path(args.run).read_text(), args.run)
    rows = budget_rows(points, cfg.cost, cfg.accept_len, cfg.speedup, given_as)
    try:
        at = production([r.conc for r in rows], args.at)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    rungs = [
        RungDecision(
            r.conc, r.step_ms, r.component_ms, r.gain_speedup if r.gain_speedup is not None else r.gain_free
        )
        for r in rows
        if r.conc in at
    ]
    why = "a table holds no records: the predicted figures need a run (llmload twin RUN)"
    return _show_decision(args, decide(rungs, args.worth, why), None)


def run_decision(
    args: argparse.Namespace,
    change: Change,
    measured: list[Any],
    prediction: list[Any] | None,
    intervals: dict[int, dict[str, tuple[float, float, float]]],
    steps: dict[int, RungSteps],
    fits: bool,
) -> Decision:
    """The decision at the production rungs from the measured steps and the prediction."""
    concs = [r.conc for r in measured] + [r.conc for r in prediction or []]
    try:
        at = production(concs, args.at)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    by_conc = {r.conc: r for r in reversed(prediction or [])}
    rungs = []
    for conc in at:
        s = steps.get(conc)
        step_ms = s.step_ms if s is not None else None
        mean_ms = s.step_mean_ms if s is not None else None
        bound = None if mean_ms is None or s is None or not s.batch else step_bound(change, mean_ms, s.batch)
        cost = change.cost.cost_ms(s.batch) if change.cost is not None and s is not None and s.batch else None
        row = by_conc.get(conc) if fits else None
        gain = low = high = None
        figures: dict[str, tuple[float, float, float]] = {}
        if row is not None:
            figures = intervals.get(row.rung, {})
            meas = (row.measured or {}).get("agg_tok_s")
            if meas and "agg_tok_s" in figures:
                v, lo, hi = figures["agg_tok_s"]
                gain, low, high = v / meas - 1.0, lo / meas - 1.0, hi / meas - 1.0
        rungs.append(RungDecision(conc, step_ms, cost, bound, gain, low, high, figures))
    why = None if fits else "the twin does not fit the run (the verdict above says why)"
    return decide(rungs, args.worth, why)


def _decision_code(decision: Decision, fits: bool) -> int:
    if decision.verdict == WORTH:
        return OK
    if decision.verdict == NOT_WORTH:
        return NOT_WORTH_IT
    return UNDECIDED if fits else NO_FIT


def _show_decision(args: argparse.Namespace, decision: Decision, run_dir: Path | None) -> int:
    """A table's decision, printed (its exit code)."""
    if args.format == "json":
        print(render_json({"decision": decision.as_dict()}))
    else:
        print(decision_table(decision, args.format))
    return _decision_code(decision, fits=True)


def write_decision(run_dir: Path, decision: Decision, source: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / run_files.DECISION).write_text(render_json(decision.as_dict()) + "\n")
    (run_dir / run_files.DECISION_HTML).write_text(
        decision_html(decision, f"llmload twin: the decision on {source}")
    )


# --- the run and its fit ----------------------------------------------------------------------


def load_measured(source: str) -> tuple[RunResult, RunInfo]:
    files = RunFiles.find(source)
    result = load_run(files, with_metrics=True, start_child=PythonChild)
    info = result.run_info
    if not info or not info.has_config:
        raise RecordFileError(f"{files.run}: no run file: the twin replays the ladder it names")
    config = info.sweep_config()
    if config.mode == "capacity":
        raise ConfigError(f"{files.run}: a capacity search is not a ladder to replay; give a sweep")
    return result, info


def fit_run(result: RunResult) -> TwinFit:
    server = load_server_metrics(result.prefix, result.iter_records())
    path = metrics_path(result.prefix)
    scrapes = [s.values for s in read_samples(path)[1]] if path.exists() else []
    return fit_twin(
        result.iter_records(),
        accept_from_counters=None if server is None else server.run_accept_len,
        scrapes=scrapes,
    )


def ladder_of(info: RunInfo, rungs: list[int | float] | None, source: str) -> dict[str, Any]:
    """The run's own ladder (its run file's config), with other rungs when asked; checked (a bad
    --rungs is named as the flag)."""
    config = dict(info.config)
    if rungs is not None:
        config["rungs"] = rungs
    try:
        parse_config(config, source=source)
    except ConfigError as e:
        if rungs is None:
            raise
        given = ",".join(map(str, rungs))
        raise ConfigError(f"--rungs {given}: {str(e).removeprefix(source + ': ')}") from None
    return config


def sim_pairs(params: TwinParams, model: Any) -> list[str]:
    pairs = [f"{k}={v}" for k, v in params.sim_settings().items()]
    if isinstance(model, str) and model:
        pairs.append(f"model={model}")
    return pairs


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


# --- the replays --------------------------------------------------------------------------------


def start_sweep(folder: Path, ladder: dict[str, Any], pairs: list[str]) -> subprocess.Popen[bytes]:
    """`llmload sweep` of `ladder` on the simulator with `pairs`, its files in folder/run/."""
    folder.mkdir(parents=True, exist_ok=True)
    write_yaml(folder / "ladder.yaml", ladder)
    cmd = [sys.executable, "-m", "llmload", "sweep", "--ladder", str(folder / "ladder.yaml")]
    cmd += ["--run-dir", str(folder / "run"), "--overwrite"]  # the twin's own folder: a rerun replaces it
    cmd += ["--endpoint", str(ladder.get("endpoint", "completions"))]
    cmd += ["--format", "json"] + [a for pair in pairs for a in ("--sim", pair)]
    with (folder / "sweep.log").open("wb") as log:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl+C reaches the twin, which passes it on once
            preexec_fn=die_with_parent,
        )


def wait_all(procs: list[subprocess.Popen[bytes]]) -> bool:
    """Wait for every sweep; a stop signal to the twin goes to each once (SIGTERM). True unless stopped."""
    passed = 0
    while any(p.poll() is None for p in procs):
        while passed < len(STOPS.received):
            passed += 1
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGTERM)
        time.sleep(STOP_POLL_S)
    return not STOPS.received


class Stopped(Exception):
    """A stop signal ended the replays."""


Draws = list[tuple[int, int]]  # (output tokens, the simulator's accept_seed) of each replayed request


def calibrate(
    folder: Path, ladder: dict[str, Any], params: TwinParams, model: Any
) -> tuple[TwinParams, Draws]:
    """The simulator's accept_len that realizes the fitted one on this workload. The simulator
    draws each prompt's accepted tokens from a generator seeded by the prompt, so a run of few
    prompts realizes a mean off its setting, and not in proportion to it (one prompt's draws are
    one sequence of uniforms: the realized mean is a step function of the setting). A first replay
    of the same ladder with 2 ms steps (acceptance does not depend on timing) records each
    request's seed in the simulator's truth log (`accept_seed`); the draws are then replayed
    offline (llmload.sim.engine.steps_to_generate) to find the setting whose realized mean is the
    fitted one (`solve_setting`). Skipped when every replay draws other prompts (unique_prompts)
    or there is nothing to draw (accept_len 1)."""
    if ladder.get("unique_prompts") or params.accept_len <= 1.0:
        return params, []
    fast = replace(
        params, base_ms=CALIBRATION_STEP_MS, per_seq_ms=0.0, prefill_ms_per_token=0.0, max_num_seqs=None
    )
    if not wait_all([start_sweep(folder, {**ladder, "warmup_requests": 0}, sim_pairs(fast, model))]):
        raise Stopped
    truth_path = folder / "run" / run_files.SIM_TRUTH
    truth = load_truth(truth_path)[0] if truth_path.exists() else {}
    draws = [
        (r.output_tokens, int(truth[r.request_id]["accept_seed"]))
        for r in replayed(folder).iter_records()
        if stepped(r) and isinstance(truth.get(r.request_id, {}).get("accept_seed"), int)
    ]
    if not draws:
        return params, []
    return replace(params, sim_accept_len=solve_setting(draws, params.accept_len, params.max_draft)), draws


def solve_setting(draws: Draws, target: float, max_draft: int) -> float:
    """The simulator's accept_len whose draws, replayed for these requests, realize `target` as
    the fit reads it (`fit_accept_len` of their tokens and steps). The realized mean never falls
    as the setting rises, in steps (a request takes a whole number of steps): of the two plateaus
    around the target, the one whose mean is closer, at its middle (a setting rounded to the
    simulator's four decimals stays on it)."""

    def realized(setting: float) -> float:
        steps = {d: steps_to_generate(d[1], d[0], setting, max_draft) for d in set(draws)}
        return fit_accept_len([(d[0], steps[d]) for d in draws], max_draft)

    def first(reaches: Callable[[float], bool]) -> float:
        """The smallest setting for which `reaches` holds (1 + max_draft if none)."""
        lo, hi = 1.0, 1.0 + max_draft
        for _ in range(SOLVE_STEPS):
            mid = (lo + hi) / 2.0
            lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
        return hi

    up = first(lambda s: realized(s) >= target)
    r_up = realized(up)
    plateaus = [(r_up, up, first(lambda s: realized(s) > r_up))]
    if up > 1.0 + 1e-9:
        r_down = realized(max(1.0, up - 1e-6))
        plateaus.append((r_down, first(lambda s: realized(s) >= r_down), up))
    _, start, end = min(plateaus, key=lambda p: abs(p[0] - target))
    return (start + end) / 2.0


def simulator_takes(what: str, pairs: list[str]) -> None:
    """ConfigError (one line) unless the simulator accepts these settings (`llmload sweep --sim`'s
    check): a change that takes a step out of the simulator's range is refused before any replay."""
    try:
        sim_args([tuple(pair.split("=", 1)) for pair in pairs])  # type: ignore[misc]
    except ConfigError as e:
        raise ConfigError(f"{what} simulator is out of its range: {e}") from None


def replayed(folder: Path) -> RunResult:
    try:
        return load_run(RunFiles(folder / "run" / "run"), with_metrics=True, start_child=PythonChild)
    except RecordFileError as exc:
        raise RecordFileError(
            f"the replay in {folder} measured nothing ({exc}); see {folder / 'sweep.log'}"
        ) from None


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    run_dir = args.run_dir or Path("reports") / time.strftime("twin-%Y%m%d-%H%M%S")
    try:
        change = change_of(args)
        if args.fit_only and not change.empty:
            raise ConfigError(
                f"--fit-only fits and replays nothing; the change ({change.describe()}) needs the replay: "
                "drop --fit-only, or the change"
            )
        if is_table(args.run):
            return table_decision(args, change)
        result, info = load_measured(args.run)
        fit = fit_run(result)
        predicted_params = apply_change(fit.params, change) if not change.empty else fit.params
        replay_ladder = ladder_of(info, None, "the run file")
        predict_ladder = (
            ladder_of(info, args.rungs, "the run file") if args.rungs or not change.empty else None
        )
        check_output_folder("--run-dir", run_dir)
    except TwinFitError as exc:
        print(f"{PROG}: error: {args.run}: cannot fit the model: {exc}", file=sys.stderr)
        return BAD_INPUT
    except (ConfigError, RecordFileError, OSError) as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    sim_file = run_dir / "twin_sim.yaml"
    model = info.model
    if args.fit_only:
        write_yaml(sim_file, dict(fit.params.sim_settings()))
        return _print_fit(args.format, fit, sim_file)
    print(f"{PROG}: calibrating and replaying on the simulator; files in {run_dir}", file=sys.stderr)
    try:
        for what, params in (("the fitted", fit.params), ("the changed", predicted_params)):
            simulator_takes(what, sim_pairs(params, model))  # else each sweep would refuse it, in its log
    except ConfigError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    try:
        fit.params, draws = calibrate(run_dir / "calibrate", replay_ladder, fit.params, model)
        predicted_params = apply_change(fit.params, change) if not change.empty else fit.params
        if change.accept_len is not None and draws:  # the same offline replay of the draws
            setting = solve_setting(draws, change.accept_len, fit.params.max_draft)
            predicted_params = replace(predicted_params, sim_accept_len=setting)
    except Stopped:
        print(f"{PROG}: stopped by a signal: the replays were stopped", file=sys.stderr)
        return INTERRUPTED
    except (RecordFileError, ConfigError) as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return INTERRUPTED
    write_yaml(sim_file, dict(fit.params.sim_settings()))
    jobs = {"replay": (replay_ladder, sim_pairs(fit.params, model))}
    if predict_ladder is not None:
        jobs["predict"] = (predict_ladder, sim_pairs(predicted_params, model))
    procs = [start_sweep(run_dir / name, ladder, pairs) for name, (ladder, pairs) in jobs.items()]
    if not wait_all(procs):
        print(f"{PROG}: stopped by a signal: the replays were stopped", file=sys.stderr)
        return INTERRUPTED
    try:
        results = {name: replayed(run_dir / name) for name in jobs}
    except RecordFileError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return INTERRUPTED
    measured = run_figures(result)
    rows = replay_rows(measured, run_figures(results["replay"]))
    prediction = prediction_rows(measured, run_figures(results["predict"])) if "predict" in results else None
    verdict = judge(fit, rows, prediction or ())
    steps: dict[int, RungSteps] = {}
    for s in measure_run(result.iter_records(), result.prefix):
        steps.setdefault(s.conc, s)
    boot = bootstrap_spreads(results["predict"].record_rungs()) if "predict" in results else None
    intervals = prediction_intervals(rows, prediction or [], predicted_params, boot)
    decision = None
    if not change.empty:
        try:
            decision = run_decision(args, change, measured, prediction, intervals, steps, verdict.fits)
        except ConfigError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return BAD_INPUT
        write_decision(run_dir, decision, args.run)
    shown = Shown(rows, verdict, prediction, predicted_params, change, sim_file, steps, intervals, decision)
    _print(args.format, fit, shown, args.wide)
    if decision is not None:
        return _decision_code(decision, verdict.fits)
    return OK if verdict.fits else NO_FIT


# --- output -------------------------------------------------------------------------------------


def _print_fit(fmt: str, fit: TwinFit, sim_file: Path) -> int:
    if fmt == "json":
        print(render_json({"fit": fit.as_dict(), "sim_file": str(sim_file)}))
    else:
        print("\n".join(fit_lines(fit, sim_file)))
        if fit.problems:
            print("the model does not hold: " + "; ".join(fit.problems))
    return OK if fit.fits else NO_FIT


@dataclass(frozen=True, slots=True)
class Shown:
    """What the twin prints after its replays."""

    rows: list[Any]
    verdict: Verdict
    prediction: list[Any] | None
    predicted: TwinParams
    change: Change
    sim_file: Path
    steps: dict[int, RungSteps]
    intervals: dict[int, dict[str, tuple[float, float, float]]]
    decision: Decision | None


def _print(fmt: str, fit: TwinFit, shown: Shown, wide: bool) -> None:
    verdict, prediction, change = shown.verdict, shown.prediction, shown.change
    shown_prediction = prediction if verdict.fits else None
    if fmt == "json":
        doc: dict[str, Any] = {
            "fit": fit.as_dict(),
            "sim_file": str(shown.sim_file),
            "rows": [row_dict(r, "twin") for r in shown.rows],
            "verdict": {"fits": verdict.fits, "breaks": verdict.breaks},
            "steps": {str(c): s.as_dict() for c, s in shown.steps.items()},
        }
        if prediction is not None:
            rows = None
            if shown_prediction:
                rows = [
                    row_dict(r, "predicted")
                    | {
                        "interval": {
                            k: [lo, hi] for k, (_, lo, hi) in shown.intervals.get(r.rung, {}).items()
                        }
                    }
                    | {"amdahl_pct": _bound_pct(r, shown)}
                    for r in shown_prediction
                ]
            doc["prediction"] = {
                "change": change.describe(),
                "parameters": shown.predicted.as_dict(),
                "rows": rows,
            }
        if shown.decision is not None:
            doc["decision"] = shown.decision.as_dict()
        print(render_json(doc))
        return
    lines = fit_lines(fit, shown.sim_file) + ["", "measured vs twin (replay of the run's ladder):"]
    lines += [replay_table(shown.rows, fmt, wide), verdict.line()]
    if prediction is not None:
        lines.append("")
        if shown_prediction is None:
            lines.append(f"no prediction ({change.describe()}): the twin does not fit the run")
        else:
            lines.append(f"predicted with {change.describe()}: {params_line(shown.predicted)}")
            lines.append(prediction_table(shown_prediction, shown.predicted, change, fmt, shown.steps, wide))
            if change.cost is not None:
                lines.append("amdahl%: the bound on the rung's measured step (llmload budget)")
    if shown.decision is not None:
        lines += ["", decision_table(shown.decision, fmt)]
    print("\n".join(lines))


def _intervals(figures: dict[str, tuple[float, float, float]]) -> dict[str, list[float]]:
    return {k: [lo, hi] for k, (_, lo, hi) in figures.items()}


def _bound_pct(row: Any, shown: Shown) -> float | None:
    bound = amdahl_bound(row, shown.predicted, shown.change, shown.steps.get(row.conc))
    return None if bound is None else bound * 100.0
