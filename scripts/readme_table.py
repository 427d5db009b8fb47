#!/usr/bin/env python3
"""Rewrite the example output of README.md and docs/index.md from a real run of the README's first
command, `make sweep`: `llmload sweep --ladder config/sweep.yaml` against the embedded simulator.

What the command printed (stdout and stderr in one stream, as a terminal shows them) replaces the
block between the `sweep-output` markers of both pages. tests/e2e/test_sweep_e2e.py runs the same
command and checks the block against what it prints: after a change to the table or its notes,
run this once (about 3 minutes: each rung is held until its agg tok/s is known to +-5 %) and commit
the pages.

    .venv/bin/python scripts/readme_table.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "README.md", REPO / "docs" / "index.md")
LADDER = "config/sweep.yaml"  # the Makefile's `sweep` target without HOST, LADDER or ARGS
START = "<!-- sweep-output:start"
END = "<!-- sweep-output:end -->"
FENCE = "```"


def run_command(cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`make sweep`'s command run in `cwd` (its reports/ folder lands there): its output, stdout and
    stderr in one unbuffered stream, in the order a terminal shows them."""
    return subprocess.run(
        [sys.executable, "-m", "llmload", "sweep", "--ladder", str(REPO / LADDER)],
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


def block(page: str) -> list[str]:
    """The lines of the page's example output (inside the fence between the markers)."""
    _, found, rest = page.partition(START)
    if not found or END not in rest:
        raise ValueError(f"no {START} ... {END} block")
    inside = rest.partition(END)[0].splitlines()[1:]  # the marker's own line is a comment
    if len(inside) < 2 or inside[0] != FENCE or inside[-1] != FENCE:
        raise ValueError("the block between the markers is not one fenced code block")
    return inside[1:-1]


def render(page: str, output: str) -> str:
    """The page with its example block replaced by `output`."""
    head, _, rest = page.partition(START)
    marker_line, _, rest = rest.partition("\n")
    _, _, tail = rest.partition(END)
    lines = [line.rstrip() for line in output.strip("\n").splitlines()]
    body = "\n".join([FENCE, *lines, FENCE])
    return f"{head}{START}{marker_line}\n{body}\n{END}{tail}"


def main() -> int:
    argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    with tempfile.TemporaryDirectory(prefix="llmload-readme-") as tmp:
        proc = run_command(Path(tmp))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        print(
            f"readme_table.py: the sweep exited {proc.returncode}; the pages are unchanged", file=sys.stderr
        )
        return 1
    for page in PAGES:
        page.write_text(render(page.read_text(), proc.stdout))
    names = ", ".join(str(p.relative_to(REPO)) for p in PAGES)
    print(f"{names}: example output of `make sweep` rewritten ({len(proc.stdout.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
