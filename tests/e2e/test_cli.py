"""The `llmload` command as a user types it: the subcommands and their help, `python -m llmload`,
the checkout's scripts, and output piped into a reader that stops early."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.cli import COMMANDS, SIGPIPE_EXIT

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

LLMLOAD = [sys.executable, "-m", "llmload"]
FIXTURE_RUN = REPO / "tests" / "fixtures" / "report_run" / "run"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LLMLOAD, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_help_lists_every_command() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in proc.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_complete_help(name: str) -> None:
    proc = run(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: llmload {name}")
    assert "Traceback" not in proc.stderr


def test_unknown_command_is_one_line_and_exit_2() -> None:
    proc = run("swep")
    assert proc.returncode == 2
    assert proc.stderr.startswith("llmload: unknown command 'swep'")
    assert "Traceback" not in proc.stderr


def test_the_packaged_locustfile_is_found_from_any_directory(tmp_path: Path) -> None:
    proc = run("locustfile", "chat", cwd=tmp_path)
    assert proc.returncode == 0
    path = Path(proc.stdout.strip())
    assert path.is_file() and path.name == "chat.py"
    assert "ChatUser" in path.read_text()


def test_a_checkout_script_runs_the_same_command() -> None:
    script = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "sweep_table.py"), str(FIXTURE_RUN)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    command = run("table", str(FIXTURE_RUN))
    assert script.returncode == command.returncode == 0
    assert script.stdout == command.stdout


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`llmload table RUN | head -0`: the reader is gone before the table is written."""
    proc = subprocess.Popen(
        [*LLMLOAD, "table", str(FIXTURE_RUN), "--metrics"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # what `head` does once it has its lines
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == SIGPIPE_EXIT
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
