"""llmload as a user gets it from `pip install`: a wheel in a fresh venv, used from a fresh
directory that is not the checkout. Nothing may depend on the repository or the current folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.untimed]

TINY = ("--rungs", "1,2", "--max-tokens", "16")


def llmload(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "llmload"), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def swept(wheel_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny sweeps against the simulator, run from an empty directory: (cwd, its reports/)."""
    cwd = tmp_path_factory.mktemp("user")
    for name in ("a", "b"):
        proc = llmload(wheel_venv, cwd, "sweep", "--run-dir", f"reports/{name}", *TINY)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].split()[:2] == ["conc", "agg_tok/s"]
        assert [line.split()[0] for line in lines[1:3]] == ["1", "2"]
        log = (cwd / "reports" / name / "locust.log").read_text()
        assert "spawn rate is very high" not in log  # the ladder's spawn rate is Locust's limit
    return cwd, cwd / "reports"


def test_the_installed_package_has_no_checkout_behind_it(wheel_venv: Path, tmp_path: Path) -> None:
    code = "import llmload, pathlib; print(pathlib.Path(llmload.__file__).resolve())"
    out = subprocess.run(
        [str(wheel_venv / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert "site-packages" in out


def test_table_report_and_compare_work_on_the_sweeps_output(
    wheel_venv: Path, swept: tuple[Path, Path]
) -> None:
    cwd, reports = swept
    table = llmload(wheel_venv, cwd, "table", "reports/a", "--metrics")  # the run's folder
    assert table.returncode == 0, table.stderr
    assert "ttft" in table.stdout.lower()
    report = llmload(wheel_venv, cwd, "report", "reports/a")
    assert report.returncode == 0, report.stderr
    assert any(reports.joinpath("a").rglob("*.html"))
    compare = llmload(wheel_venv, cwd, "compare", "reports/a/run", "reports/b/run")
    assert compare.returncode == 0, compare.stderr
    assert compare.stdout.strip()


def test_sweep_help_lists_the_ladder_options(wheel_venv: Path, tmp_path: Path) -> None:
    """Locust prints --help before it loads a locustfile, so `llmload sweep --help` lists them."""
    proc = llmload(wheel_venv, tmp_path, "sweep", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--rungs" in proc.stdout and "--max-tokens" in proc.stdout and "LOCUST_MAX_TOKENS" in proc.stdout
