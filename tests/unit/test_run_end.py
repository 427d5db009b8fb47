"""The exit code and last line of a process that runs the ladder more than once (the web UI: one
run per start): they are the last run's, and an error before the first run is kept."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from llmload.core import exit_codes
from llmload.loadgen.run.run_end import RunEnd


def test_the_next_run_of_the_process_forgets_the_last_ones_error(tmp_path: Path, capsys) -> None:
    env = SimpleNamespace(process_exit_code=None)
    end = RunEnd(env)
    end.begin(env, tmp_path / "one_run.json")
    end.fail("no_workers", "no worker is connected to this master")
    assert env.process_exit_code == exit_codes.BAD_INPUT
    end.begin(env, tmp_path / "two_run.json")  # the web UI's next start
    assert env.process_exit_code is None and end.error == ""
    end.on_quit()
    assert "no worker" not in capsys.readouterr().err
    end.fail("stalled_rung", "rung01 c2 stalled", exit_codes.BAD_INPUT)
    end.on_quit()
    assert capsys.readouterr().err == "llmload: error: rung01 c2 stalled\n"


def test_an_error_before_the_first_run_is_kept(tmp_path: Path) -> None:
    env = SimpleNamespace(process_exit_code=None)
    end = RunEnd(env)
    end.cannot_write(OSError(28, "No space left on device", str(tmp_path / "stats.csv")))
    end.begin(env, tmp_path / "run.json")
    assert env.process_exit_code == exit_codes.WRITE_FAILED and "stats.csv" in end.error
