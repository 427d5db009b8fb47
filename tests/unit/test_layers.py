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


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the package under `root`, with the contracts of the repository."""
    env = {**os.environ, "PYTHONPATH": str(root)}
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


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("analysis/sweep_rows.py", "import gevent", "analysis and output never import gevent or Locust"),
        ("output/table.py", "import locust", "analysis and output never import gevent or Locust"),
        ("core/records.py", "import llmload.analysis", "core imports nothing of llmload outside core"),
        ("sim/engine.py", "import llmload.core.stats", "the simulator stands alone"),
    ],
)
def test_a_planted_forbidden_import_breaks_the_check(
    tmp_path: Path, module: str, planted: str, contract: str
) -> None:
    shutil.copytree(REPO / "llmload", tmp_path / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "llmload" / module
    path.write_text(path.read_text() + f"\n{planted}  # planted by the test\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout
