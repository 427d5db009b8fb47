"""The layer rules of docs/architecture.md hold (import-linter contracts in pyproject.toml, and the
rule on urllib's I/O modules, which import-linter cannot tell from urllib.parse, over the syntax),
and each check really fails when a forbidden import is planted in a copy of the package;
importing llmload never loads matplotlib (only drawing a plot does)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS = "layers: cli > runner > loadgen > output > analysis > core"
NO_NUMPY = "the command layer does no numeric work: no numpy in cli"
LOADGEN = "loadgen rooms: plugin > webui|monitor > request > run > workload|transport > stream"
ANALYSIS = "analysis rooms: twin > commands (budget, compare...) > run > identity, sessions"
IO = "I/O at the edges: analysis and core never open a connection or start a process"
URLLIB_IO = ("urllib.request", "urllib.error")  # urllib.parse is pure
TABLES = "one table layout: only llmload.output.toolkit.grid imports tabulate"
FIGURES = "one figure helper: only llmload.output.toolkit.figure imports matplotlib"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the package under `root`, with the contracts of the repository."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}  # a contract name on one line
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_layer_contracts_hold() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{LAYERS} KEPT" in result.stdout  # the layer order is one of the contracts checked


def urllib_io_imports(package: Path) -> list[str]:
    """`path:line` of every import of urllib's I/O modules in `package`'s analysis/ and core/
    (in functions too; `from urllib import request` counts)."""
    found = []
    for path in sorted([*(package / "analysis").rglob("*.py"), *(package / "core").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            if any(n == m or n.startswith(m + ".") for n in names for m in URLLIB_IO):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    return found


def test_analysis_and_core_import_no_urllib_io() -> None:
    assert urllib_io_imports(REPO / "llmload") == []


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of the package for every planted import (each test restores the file it changed)."""
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(REPO / "llmload", root / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("analysis/run/sweep_rows.py", "import gevent", "analysis and output never import gevent or Locust"),
        ("output/table.py", "import locust", "analysis and output never import gevent or Locust"),
        ("analysis/compare.py", "import tabulate", TABLES),
        ("output/table.py", "from tabulate import tabulate", TABLES),
        ("cli/trace_stats.py", "import tabulate", TABLES),
        ("output/capacity.py", "import matplotlib", FIGURES),
        # an import inside a function counts too (the figure helper's own are all inside functions)
        ("output/soak_output.py", "def _draw() -> None:\n    import matplotlib.pyplot", FIGURES),
        ("core/files/records.py", "import llmload.analysis", "core imports nothing of llmload outside core"),
        ("sim/engine.py", "import llmload.core.stats", "the simulator stands alone"),
        ("cli/table.py", "import numpy", NO_NUMPY),
        # one upward import across each boundary of the layer order
        ("core/stats.py", "import llmload.analysis.run.metrics", LAYERS),
        ("analysis/run/metrics.py", "import llmload.output.table", LAYERS),
        ("output/table.py", "import llmload.loadgen.workload.payload", LAYERS),
        ("loadgen/workload/payload.py", "import llmload.runner.sweep_run", LAYERS),
        ("runner/progress.py", "import llmload.cli.table", LAYERS),
        # one upward import in each room order, and one between two independent rooms
        ("loadgen/stream/sse.py", "import llmload.loadgen.transport.exchange", LOADGEN),
        ("loadgen/transport/exchange.py", "import llmload.loadgen.request.client", LOADGEN),
        ("loadgen/run/ladder.py", "import llmload.loadgen.request.users", LOADGEN),
        ("loadgen/webui/live_sweep.py", "import llmload.loadgen.monitor.run_monitor", LOADGEN),
        ("analysis/identity/text_identity.py", "import llmload.analysis.run.metrics", ANALYSIS),
        ("analysis/run/metrics.py", "import llmload.analysis.compare", ANALYSIS),
        ("analysis/compare.py", "import llmload.analysis.soak.verdict", ANALYSIS),
        # I/O at the edges: each forbidden module, in each layer, and one reached through servers/
        ("analysis/run/metrics.py", "import subprocess", IO),
        ("core/stats.py", "import socket", IO),
        ("analysis/compare.py", "import http.client", IO),
        ("core/files/jsonl.py", "import multiprocessing", IO),
        ("analysis/run/postprocess.py", "import llmload.servers.python_child", IO),
    ],
)
def test_a_planted_forbidden_import_breaks_the_check(
    package_copy: Path, module: str, planted: str, contract: str
) -> None:
    path = package_copy / "llmload" / module
    original = path.read_text()
    path.write_text(original + f"\n{planted}  # planted by the test\n")
    try:
        result = lint_imports(package_copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        ("analysis/run/sweep_rows.py", "import urllib.request"),
        ("core/stats.py", "import urllib.request"),
        ("core/config.py", "from urllib import error"),
        ("analysis/run/steps.py", "def f():\n    from urllib.request import urlopen"),
    ],
)
def test_a_planted_urllib_io_import_breaks_the_check(package_copy: Path, module: str, planted: str) -> None:
    path = package_copy / "llmload" / module
    original = path.read_text()
    path.write_text(original + f"\n{planted}  # planted by the test\n")
    try:
        found = urllib_io_imports(package_copy / "llmload")
    finally:
        path.write_text(original)
    assert len(found) == 1 and found[0].startswith(module + ":")


# every module of the package imported in a fresh interpreter (but the __main__ modules, which run
# their command), then the names of the matplotlib modules that came with them
_IMPORT_ALL = """
import importlib, pkgutil, sys
import llmload
for m in pkgutil.walk_packages(llmload.__path__, "llmload."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
print(sum(name.startswith("llmload.") for name in sys.modules))
print(" ".join(name for name in sys.modules if name.split(".")[0] == "matplotlib"))
"""


def test_importing_every_module_does_not_import_matplotlib() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    imported, matplotlib_modules = (result.stdout.splitlines() + [""])[:2]
    assert int(imported) > 100  # the walk found the package's modules
    assert matplotlib_modules == ""
