"""Every command the README and the docs show exists as written: its program, its subcommand or
make target, every flag it uses; and the quick ones (tables, reports of a finished run) run.

A command is a line in a fenced code block that starts with `make`, `llmload`, `locust` or
`python` (with or without `.venv/bin/`); `\\` continues it on the next line; `# ...` comments and a
trailing `&` are dropped.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.cli import COMMANDS
from llmload.loadgen.options import options_help

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = re.compile(r"^(\.venv/bin/)?(make|llmload|locust|python3?)\s")
OUTPUT = re.compile(r"^\S+ [\w-]+:")  # a line a command printed, e.g. "llmload sweep: error: ..."
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
FIXTURE_RUN = REPO / "tests" / "fixtures" / "report_run"


def doc_commands() -> list[tuple[str, str]]:
    """(page:line, command) for every command in a fenced block of the README and the docs."""
    found = []
    for page in PAGES:
        fence, pending, start = False, "", 0
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            if line.startswith("```"):
                fence = not fence
                continue
            if not fence:
                continue
            text = line.strip()
            if pending:
                pending += " " + text.rstrip("\\").strip()
            elif PROGRAMS.match(text) and not re.match(
                r"^\S+ [\w-]+:", text
            ):  # not output ("llmload sweep: ...")
                pending, start = text.rstrip("\\").strip(), number
            if pending and not text.endswith("\\"):
                command = re.sub(r"\s+#.*$", "", pending).rstrip(" &")
                found.append((f"{page.relative_to(REPO)}:{start}", command))
                pending = ""
    return found


@cache
def help_text(*program: str) -> str:
    proc = subprocess.run(
        [*program, "--help"], capture_output=True, text=True, timeout=120, check=False, cwd=REPO
    )
    assert proc.returncode == 0, f"{program} --help: {proc.stderr}"
    return proc.stdout


def known_flags(words: list[str]) -> str:
    """The help text in which the command's flags must appear."""
    program = words[0].removeprefix(".venv/bin/")
    if program == "llmload":
        sub = words[1]
        assert sub in COMMANDS, f"no llmload command {sub!r}"
        nested = [w for w in words[2:3] if not w.startswith(("-", "reports/"))]  # e.g. `llama-server serve`
        return help_text(sys.executable, "-m", "llmload", sub, *nested)
    if program == "locust":
        locust = str(Path(sys.executable).parent / "locust")
        return help_text(locust) + options_help()
    script = next(w for w in words[1:] if w.endswith(".py"))
    assert (REPO / script).is_file(), f"no such script {script}"
    return help_text(sys.executable, str(REPO / script))


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), flags=re.M))


COMMANDS_IN_DOCS = doc_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS_IN_DOCS) > 20


@pytest.mark.parametrize(("where", "command"), COMMANDS_IN_DOCS, ids=[w for w, _ in COMMANDS_IN_DOCS])
def test_every_documented_command_exists_as_written(where: str, command: str) -> None:
    words = shlex.split(command)
    program = words[0].removeprefix(".venv/bin/")
    if program == "make":
        targets = [w for w in words[1:] if "=" not in w]
        assert set(targets) <= make_targets(), f"{where}: no make target {targets}"
        return
    locustfile = words[words.index("-f") + 1] if program == "locust" and "-f" in words else ""
    if locustfile.startswith("locustfiles/"):  # ours (not "$(llmload locustfile)", not the user's own)
        assert (REPO / locustfile).is_file(), f"{where}: no locustfile"
    text = known_flags(words)
    missing = [flag for flag in FLAG.findall(command) if flag not in text]
    assert not missing, f"{where}: {command!r} uses unknown flags {missing}"


QUICK = re.compile(r"^(\.venv/bin/)?llmload (table|report|locustfile)\b")


@pytest.mark.parametrize(
    ("where", "command"),
    [(w, c) for w, c in COMMANDS_IN_DOCS if QUICK.match(c)],
    ids=[w for w, c in COMMANDS_IN_DOCS if QUICK.match(c)],
)
def test_the_quick_commands_run(where: str, command: str, tmp_path: Path) -> None:
    """Run on a finished run copied to the folder the command names (the docs' placeholder)."""
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))  # optional [--flags] left out
    run_arg = next((w for w in words[2:] if w.startswith("reports/")), None)
    if run_arg is not None:
        prefix = tmp_path / run_arg
        folder = prefix if not prefix.name.startswith("run") and "sweep-" in prefix.name else prefix.parent
        stem = "run" if folder != prefix.parent else prefix.name
        folder.mkdir(parents=True, exist_ok=True)
        for src in FIXTURE_RUN.iterdir():
            shutil.copy(src, folder / src.name.replace("run", stem, 1))
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", *words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{where}: {command}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
