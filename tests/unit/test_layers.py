"""The layer rules of docs/architecture.md hold (import-linter contracts in pyproject.toml), and
the check really fails when a forbidden import is planted in a copy of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS = "layers: cli > loadgen > output > analysis > core"
LOADGEN = "loadgen rooms: plugin > webui|monitor > request > run > workload|transport > stream"
ANALYSIS = "analysis rooms: twin > commands (budget, compare...) > run > identity"


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
        ("analysis/compare.py", "import tabulate", "analysis renders nothing: it never imports tabulate"),
        ("core/files/records.py", "import llmload.analysis", "core imports nothing of llmload outside core"),
        ("sim/engine.py", "import llmload.core.stats", "the simulator stands alone"),
        # one upward import across each boundary of the layer order
        ("core/stats.py", "import llmload.analysis.run.metrics", LAYERS),
        ("analysis/run/metrics.py", "import llmload.output.table", LAYERS),
        ("output/table.py", "import llmload.loadgen.workload.payload", LAYERS),
        ("loadgen/workload/payload.py", "import llmload.cli.table", LAYERS),
        # one upward import in each room order, and one between two independent rooms
        ("loadgen/stream/sse.py", "import llmload.loadgen.transport.exchange", LOADGEN),
        ("loadgen/transport/exchange.py", "import llmload.loadgen.request.client", LOADGEN),
        ("loadgen/run/ladder.py", "import llmload.loadgen.request.users", LOADGEN),
        ("loadgen/webui/live_sweep.py", "import llmload.loadgen.monitor.run_monitor", LOADGEN),
        ("analysis/identity/text_identity.py", "import llmload.analysis.run.metrics", ANALYSIS),
        ("analysis/run/metrics.py", "import llmload.analysis.compare", ANALYSIS),
        ("analysis/compare.py", "import llmload.analysis.soak.verdict", ANALYSIS),
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
