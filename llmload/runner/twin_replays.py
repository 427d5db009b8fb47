"""The twin's replays: `llmload sweep` on the simulator as child processes, one folder each.

`start_sweep(folder, ladder, pairs)` writes the ladder (`folder/ladder.yaml`) and starts
`llmload sweep` with the simulator settings `pairs` (`--sim KEY=VALUE`), its run in `folder/run/`
and its stderr in `folder/sweep.log`. `wait_all` waits for the sweeps; a stop signal to this
process (recorded by `llmload.core.stop_signals.STOPS`) goes to each running sweep once as
SIGTERM, which the sweep handles as its own stop (it stops Locust and the simulator, within
their grace times: `llmload.runner.sweep_run`); then `Stopped` is raised. A sweep is in its own
session (a terminal's Ctrl+C reaches the twin, which passes it on once) and dies with the twin.

`calibrate` runs the calibration replay (`llmload.analysis.twin.calibration`); `replay_runs` the
replay of the run's ladder and, with a change or other rungs, the prediction, side by side;
`replayed(folder, code)` reads one replay's run: a replay whose sweep did not exit 0 raises
`ReplayEnded` with that sweep's own last line (how it ended, said by `llmload.runner.run_outcome`
in the child), and one that measured nothing RecordFileError naming its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.analysis.twin.calibration import (
    Draws,
    calibration_params,
    draws_of,
    needs_calibration,
    solve_setting,
)
from llmload.analysis.twin.fit import TwinParams
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, INTERRUPTED, OK, WRITE_FAILED
from llmload.core.files import run_files
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.core.stop_signals import STOPS
from llmload.runner.sweep_input import sim_args
from llmload.servers.process import die_with_parent
from llmload.servers.python_child import PythonChild
from llmload.sim.truth import load_truth

LADDER = "ladder.yaml"  # in a replay's folder: the ladder it ran
SWEEP_LOG = "sweep.log"  # in a replay's folder: its `llmload sweep`'s stderr
RUN_DIR = "run"  # in a replay's folder: its sweep's --run-dir
TWIN_SIM = "twin_sim.yaml"  # in the twin's folder: the fitted simulator settings (`llmload sweep --sim-file`)
WAIT_POLL_S = 0.2  # how often the twin looks at its sweeps and its stop signals


class Stopped(Exception):
    """A stop signal ended the replays."""


class ReplayEnded(Exception):
    """A replay's `llmload sweep` did not finish cleanly: `code` is the exit code the twin takes
    (the sweep's own when it is bad input, a failed write or a stop; else INTERRUPTED: the replay
    did not run to a clean end), the message the sweep's own last line (`run_outcome`'s)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def sim_pairs(params: TwinParams, model: str | None) -> list[str]:
    """The simulator settings of `params` (and the run's model name) as `--sim KEY=VALUE` pairs."""
    pairs = [f"{k}={v}" for k, v in params.sim_settings().items()]
    if model:
        pairs.append(f"model={model}")
    return pairs


def simulator_takes(what: str, pairs: list[str]) -> None:
    """ConfigError (one line) unless the simulator accepts these settings (`llmload sweep --sim`'s
    check): a change that takes a step out of the simulator's range is refused before any replay."""
    try:
        sim_args([tuple(pair.split("=", 1)) for pair in pairs])  # type: ignore[misc]
    except ConfigError as e:
        raise ConfigError(f"{what} simulator is out of its range: {e}") from None


def write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))


def start_sweep(folder: Path, ladder: Mapping[str, Any], pairs: list[str]) -> subprocess.Popen[bytes]:
    """`llmload sweep` of `ladder` on the simulator with `pairs`, its files in folder/run/."""
    folder.mkdir(parents=True, exist_ok=True)
    write_yaml(folder / LADDER, ladder)
    cmd = [sys.executable, "-m", "llmload", "sweep", "--ladder", str(folder / LADDER)]
    cmd += ["--run-dir", str(folder / RUN_DIR), "--overwrite"]  # the twin's own folder: a rerun replaces it
    cmd += ["--endpoint", str(ladder.get("endpoint", "completions"))]
    cmd += ["--format", "json"] + [a for pair in pairs for a in ("--sim", pair)]
    with (folder / SWEEP_LOG).open("wb") as log:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl+C reaches the twin, which passes it on once
            preexec_fn=die_with_parent,
        )


def _log_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def wait_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Wait for every sweep; a stop signal to the twin goes to each once (SIGTERM); Stopped when
    one came."""
    passed = 0
    while any(p.poll() is None for p in procs):
        while passed < len(STOPS.received):
            passed += 1
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGTERM)
        time.sleep(WAIT_POLL_S)
    if STOPS.received:
        raise Stopped


def replayed(folder: Path, code: int | None = OK) -> RunResult:
    """A replay's run, read, after its sweep exited with `code`: ReplayEnded when that sweep did not
    finish cleanly (its own line, from its log), RecordFileError naming its log when it measured
    nothing."""
    if code != OK:
        said = [line for line in _log_lines(folder / SWEEP_LOG) if line.strip()]
        why = said[-1].strip() if said else f"exit code {code}"
        taken = code if code in (BAD_INPUT, WRITE_FAILED, INTERRUPTED) else INTERRUPTED
        raise ReplayEnded(f"the replay in {folder} did not finish: {why} (see {folder / SWEEP_LOG})", taken)
    try:
        return load_run(RunFiles(folder / RUN_DIR / "run"), with_metrics=True, start_child=PythonChild)
    except RecordFileError as exc:
        raise RecordFileError(
            f"the replay in {folder} measured nothing ({exc}); see {folder / SWEEP_LOG}"
        ) from None


def calibrate(
    folder: Path, ladder: Mapping[str, Any], params: TwinParams, model: str | None
) -> tuple[TwinParams, Draws]:
    """The fit's parameters with the simulator's accept_len that realizes the fitted one on this
    workload, and the draws it was solved on (none when there is nothing to calibrate:
    `llmload.analysis.twin.calibration`), from a replay of the ladder in `folder`."""
    if not needs_calibration(ladder, params):
        return params, []
    fast = calibration_params(params)
    sweep = start_sweep(folder, {**ladder, "warmup_requests": 0}, sim_pairs(fast, model))
    wait_all([sweep])
    run = replayed(folder, sweep.returncode)
    truth_path = folder / RUN_DIR / run_files.SIM_TRUTH
    truth = load_truth(truth_path)[0] if truth_path.exists() else {}
    draws = draws_of(run.iter_records(), truth)
    if not draws:
        return params, []
    return replace(params, sim_accept_len=solve_setting(draws, params.accept_len, params.max_draft)), draws


def replay_runs(
    run_dir: Path, jobs: Mapping[str, tuple[Mapping[str, Any], list[str]]]
) -> dict[str, RunResult]:
    """Each job (name: its ladder and simulator settings) as a sweep in run_dir/<name>, side by
    side; their runs by name once every one has ended."""
    sweeps = {name: start_sweep(run_dir / name, ladder, pairs) for name, (ladder, pairs) in jobs.items()}
    wait_all(list(sweeps.values()))
    return {name: replayed(run_dir / name, sweep.returncode) for name, sweep in sweeps.items()}
