"""End to end: `llmload twin`'s bad input is one line and exit 2 (`BAD_INPUT`), whether it is found
before the replays (a run file without its ladder, a capacity search, a bad --rungs) or by them (a
replay that cannot run measures nothing); and two rungs of one concurrency keep their own steps.
The ground truth is the run's own ladder and the files each case edits, never the twin's output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures.twin_runs import sweep, twin

from llmload.core.exit_codes import BAD_INPUT
from llmload.core.files.run_files import RunFiles
from llmload.runner.sweep_run import SweepRun

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

LADDER: dict[str, Any] = {"rungs": [1, 2, 2], "max_tokens": 32, "prompt_tokens": 100, "requests_per_user": 2}
SIM: dict[str, Any] = {"base_ms": 10.0, "per_seq_ms": 3.0, "accept_len": 2.0}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SweepRun:
    return sweep(tmp_path_factory.mktemp("run"), SIM, LADDER)


def copy_of(run: SweepRun, folder: Path, **config: Any) -> SweepRun:
    """The run's files copied to `folder`, its run file's config changed (None: a key removed)."""
    shutil.copytree(run.prefix.parent, folder)
    copied = SweepRun(folder / run.prefix.name, run.returncode, None, folder / "locust.log")
    path = RunFiles(copied.prefix).run
    data = json.loads(path.read_text())
    for key, value in config.items():
        if value is None:
            data.pop(key, None)
        else:
            data["config"][key] = value
    path.write_text(json.dumps(data))
    return copied


def one_error(code: int, err: str, says: str) -> None:
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert code == BAD_INPUT, err
    assert len(errors) == 1 and says in errors[0], err


def test_two_rungs_of_one_concurrency_keep_their_own_steps(run, tmp_path):
    """Rungs 1 and 2 both run 2 users: the steps shown are by rung index, three of them."""
    code, doc, err = twin(run, tmp_path / "twin", "--step-scale", "0.8")
    assert code != BAD_INPUT, err
    assert {rung: s["conc"] for rung, s in doc["steps"].items()} == {"0": 1, "1": 2, "2": 2}
    assert doc["steps"]["1"] != doc["steps"]["2"]  # each rung's own measure


def test_a_run_file_without_its_ladder_is_bad_input(run, tmp_path):
    copied = copy_of(run, tmp_path / "copy", config=None)
    code, _, err = twin(copied, tmp_path / "twin")
    one_error(code, err, "no run file: the twin replays the ladder it names")


def test_a_capacity_search_is_bad_input(run, tmp_path):
    copied = copy_of(run, tmp_path / "copy", mode="capacity", slo={"tpot_ms": 50})
    code, _, err = twin(copied, tmp_path / "twin")
    one_error(code, err, "a capacity search is not a ladder to replay")


@pytest.mark.parametrize(("rungs", "says"), [("0,4", "--rungs"), ("2,x", "--rungs")])
def test_a_bad_rungs_flag_is_bad_input(run, tmp_path, rungs, says):
    code, _, err = twin(run, tmp_path / "twin", "--rungs", rungs)
    one_error(code, err, says)


def test_a_replay_that_cannot_run_is_bad_input_not_a_stop(run, tmp_path):
    """The replay's --run-dir is a file: its sweep refuses it; the twin says so with the sweep's
    own line (how it ended), naming the replay's log, and exits 2 as the sweep did (it exited 4,
    the interrupted code, before; then said only that the replay measured nothing)."""
    folder = tmp_path / "twin"
    (folder / "replay").mkdir(parents=True)
    (folder / "replay" / "run").write_text("not a folder")
    code, _, err = twin(run, folder)
    one_error(code, err, "did not finish: llmload sweep: error: --run-dir")
    assert "is a file, not a folder" in err
    assert str(folder / "replay" / "sweep.log") in err
