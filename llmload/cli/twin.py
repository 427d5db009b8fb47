"""A what-if twin of a measured run: the simulator's step model fitted to its records, replayed.

    llmload twin reports/sweep-X                               # fit, replay, measured vs twin
    llmload twin reports/sweep-X --component-ms 0.8 --speedup 470   # and what that change gains
    llmload twin reports/sweep-X --rungs 16,32                 # rungs the run did not measure
    llmload twin reports/sweep-X --step-scale 0.8 --accept-len 5
    llmload twin reports/sweep-X --fit-only --format json      # the parameters, no replay

RUN is a finished run (prefix, records file or folder) with its run file. The fit
(llmload.analysis.twin.fit) estimates base_ms, per_seq_ms, prefill_ms_per_token, accept_len and
max_num_seqs from the records; the replay runs the run's own ladder and workload (its run file's
config) with `llmload sweep` on the simulator with those parameters, and prints measured vs twin
per rung with the verdict (llmload.analysis.twin.replay). A change (--component-ms/--speedup, --config,
--step-scale, --accept-len) or --rungs adds a prediction, run beside the replay (at the same
time), and printed only when the twin fits. The twin's files go to reports/twin-<time>/
(--run-dir): twin_sim.yaml (the fitted simulator settings: `llmload sweep --sim-file`), the
ladders, and each replay's run folder.

Exit status: 0 the twin fits; 1 it does not fit (the verdict names why); 2 bad input or a run
the model cannot be fitted to; 4 a replay was stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from llmload.analysis.budget import CostModel, load_budget_config
from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.analysis.run.server_metrics import load_server_metrics, metrics_path, read_samples
from llmload.analysis.twin.fit import TwinFit, TwinFitError, TwinParams, fit_accept_len, fit_twin, usable
from llmload.analysis.twin.replay import (
    Change,
    Verdict,
    apply_change,
    judge,
    prediction_rows,
    replay_rows,
    row_dict,
    run_figures,
)
from llmload.cli.budget import add_component_arguments
from llmload.cli.sweep import sim_args
from llmload.core.checks import flag_type, folder_path, number
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.config import MAX_USERS_PER_RUNG, ConfigError, parse_config
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, NO_FIT, OK
from llmload.core.files.output_paths import check_output_folder
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.core.schema import shown
from llmload.core.stop_signals import STOPS
from llmload.output.twin_report import fit_lines, params_line, prediction_table, render_json, replay_table
from llmload.servers.process import die_with_parent

PROG = "llmload twin"
STOP_POLL_S = 0.2
CALIBRATION_STEP_MS = 2.0


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
    return p.parse_args(argv)


def change_of(args: argparse.Namespace) -> Change:
    """The change the flags (and the budget file) ask for."""
    cfg = load_budget_config(args.config) if args.config else None
    cost: CostModel | None = None
    if args.component_ms is not None:
        cost = CostModel(
            args.component or (cfg.cost.name if cfg else "component"), constant_ms=args.component_ms
        )
    elif cfg is not None:
        cost = cfg.cost
    speedup = args.speedup if args.speedup is not None else (cfg.speedup if cfg else None)
    if cost is None and speedup is not None:
        raise ConfigError("--speedup: of which component? give --component-ms MS or --config FILE")
    if cost is not None and speedup is None:
        raise ConfigError("--component-ms: give --speedup K too (the component K times faster)")
    return Change(cost=cost, speedup=speedup, step_scale=args.step_scale, accept_len=args.accept_len)


# --- the run and its fit ----------------------------------------------------------------------


def load_measured(source: str) -> tuple[RunResult, dict[str, Any]]:
    files = RunFiles.find(source)
    result = load_run(files, with_metrics=True)
    info = result.run_info
    if not info or not isinstance(info.get("config"), dict):
        raise RecordFileError(f"{files.run}: no run file: the twin replays the ladder it names")
    config = parse_config(info["config"], source=str(files.run))
    if config.mode == "capacity":
        raise ConfigError(f"{files.run}: a capacity search is not a ladder to replay; give a sweep")
    return result, info


def fit_run(result: RunResult, info: dict[str, Any]) -> TwinFit:
    server = load_server_metrics(result.prefix, info, result.iter_records())
    path = metrics_path(result.prefix)
    scrapes = [s.values for s in read_samples(path)[1]] if path.exists() else []
    return fit_twin(
        result.iter_records(),
        accept_from_counters=None if server is None else server.run_accept_len,
        scrapes=scrapes,
    )


def ladder_of(info: dict[str, Any], rungs: list[int | float] | None, source: str) -> dict[str, Any]:
    """The run's own ladder (its run file's config), with other rungs when asked; checked (a bad
    --rungs is named as the flag)."""
    config = dict(info["config"])
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


def calibrate(folder: Path, ladder: dict[str, Any], params: TwinParams, model: Any) -> TwinParams:
    """The simulator's accept_len that realizes the fitted one on this workload. The simulator
    draws each prompt's accepted tokens from a generator seeded by the prompt, so a run of few
    prompts realizes a mean off its setting; a first replay of the same ladder with 2 ms steps
    (acceptance does not depend on timing) measures the realized mean, and the setting is moved
    by the ratio of the draft parts. Skipped when every replay draws other prompts
    (unique_prompts) or there is nothing to draw (accept_len 1)."""
    if ladder.get("unique_prompts") or params.accept_len <= 1.0:
        return params
    fast = replace(
        params, base_ms=CALIBRATION_STEP_MS, per_seq_ms=0.0, prefill_ms_per_token=0.0, max_num_seqs=None
    )
    if not wait_all([start_sweep(folder, ladder, sim_pairs(fast, model))]):
        raise Stopped
    realized = fit_accept_len(
        [(r.output_tokens, len(r.chunk_times)) for r in replayed(folder).iter_records() if usable(r)]
    )
    if realized <= 1.0:
        return params
    m = params.accept_len
    return replace(params, sim_accept_len=1.0 + (m - 1.0) * (m - 1.0) / (realized - 1.0))


def simulator_takes(what: str, pairs: list[str]) -> None:
    """ConfigError (one line) unless the simulator accepts these settings (`llmload sweep --sim`'s
    check): a change that takes a step out of the simulator's range is refused before any replay."""
    try:
        sim_args([tuple(pair.split("=", 1)) for pair in pairs])  # type: ignore[misc]
    except ConfigError as e:
        raise ConfigError(f"{what} simulator is out of its range: {e}") from None


def replayed(folder: Path) -> RunResult:
    try:
        return load_run(RunFiles(folder / "run" / "run"), with_metrics=True)
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
        result, info = load_measured(args.run)
        fit = fit_run(result, info)
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
    model = info.get("model")
    if args.fit_only:
        write_yaml(sim_file, dict(fit.params.sim_settings()))
        return _print_fit(args.format, fit, sim_file)
    print(f"{PROG}: calibrating and replaying on the simulator; files in {run_dir}", file=sys.stderr)
    try:
        changed = apply_change(fit.params, change) if not change.empty else fit.params
        for what, params in (("the fitted", fit.params), ("the changed", changed)):
            simulator_takes(what, sim_pairs(params, model))  # else each sweep would refuse it, in its log
    except ConfigError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    try:
        fit.params = calibrate(run_dir / "calibrate", replay_ladder, fit.params, model)
        predicted_params = apply_change(fit.params, change) if not change.empty else fit.params
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
    _print(args.format, fit, rows, verdict, prediction, predicted_params, change, sim_file)
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


def _print(
    fmt: str,
    fit: TwinFit,
    rows: list[Any],
    verdict: Verdict,
    prediction: list[Any] | None,
    predicted: TwinParams,
    change: Change,
    sim_file: Path,
) -> None:
    shown_prediction = prediction if verdict.fits else None
    if fmt == "json":
        doc: dict[str, Any] = {
            "fit": fit.as_dict(),
            "sim_file": str(sim_file),
            "rows": [row_dict(r, "twin") for r in rows],
            "verdict": {"fits": verdict.fits, "breaks": verdict.breaks},
        }
        if prediction is not None:
            doc["prediction"] = {
                "change": change.describe(),
                "parameters": predicted.as_dict(),
                "rows": [row_dict(r, "predicted") for r in shown_prediction] if shown_prediction else None,
            }
        print(render_json(doc))
        return
    lines = fit_lines(fit, sim_file) + ["", "measured vs twin (replay of the run's ladder):"]
    lines += [replay_table(rows, fmt), verdict.line()]
    if prediction is not None:
        lines.append("")
        if shown_prediction is None:
            lines.append(f"no prediction ({change.describe()}): the twin does not fit the run")
        else:
            lines.append(f"predicted with {change.describe()}: {params_line(predicted)}")
            lines.append(prediction_table(shown_prediction, predicted, change, fmt))
            if change.cost is not None:
                lines.append("amdahl%: llmload budget's bound (the component serial in every step)")
    print("\n".join(lines))
