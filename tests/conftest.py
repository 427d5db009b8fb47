"""Shared pytest fixtures. Simulator fixtures are named `sim_*`.

Hypothesis profiles (selected by HYPOTHESIS_PROFILE, default `dev`): `ci` runs every fuzzed
surface's full count of examples (`.ci/run` sets it), `dev` far fewer, so the unit tier stays
quick locally; both derandomized (`tests/fixtures/fuzzing.py`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fixtures.fuzzing import CI_EXAMPLES, DEV_EXAMPLES
from fixtures.paths import REPO
from fixtures.shards import deal, parse_shard
from hypothesis import settings

from llmload.servers.simulator import SimulatorProcess

settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=True, database=None)
settings.register_profile("dev", max_examples=DEV_EXAMPLES, derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def sim_start(tmp_path: Path) -> Iterator[Callable[..., SimulatorProcess]]:
    """Factory: `sim_start(base_ms=1, ...)` starts a simulator with a truth log in tmp_path.

    Every simulator started through it is stopped by PID when the test ends.
    """
    started: list[SimulatorProcess] = []

    def start(**flags: object) -> SimulatorProcess:
        n = len(started)
        sim = SimulatorProcess(
            truth_log=tmp_path / f"sim{n}_truth.jsonl", log_path=tmp_path / f"sim{n}.log", **flags
        )
        started.append(sim)
        return sim.start()

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the repository with llmload installed from a wheel built from
    this checkout (its dependencies from the package index): what `pip install llmload` gives a
    user. Returns the venv's bin/ folder."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(root / "dist"), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = (root / "dist").glob("llmload-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    bin_dir = root / "venv" / "bin"
    subprocess.run([str(bin_dir / "pip"), "install", "--quiet", str(wheel)], check=True, timeout=900)
    return bin_dir


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the collected tests in reverse order (each test must pass whatever ran before it)",
    )
    parser.addoption(
        "--shard",
        metavar="K/N",
        help="run only the K-th of N shards of the collected test files (tests/fixtures/shards.py)",
    )


@pytest.hookimpl(trylast=True)  # after `-m`: shards deal the files the marker selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shard := config.getoption("--shard"):
        try:
            k, n = parse_shard(shard)
        except ValueError as err:
            raise pytest.UsageError(str(err)) from None
        files = list(dict.fromkeys(item.path.relative_to(REPO).as_posix() for item in items))
        mine = set(deal(files, n)[k - 1])
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            (kept if item.path.relative_to(REPO).as_posix() in mine else dropped).append(item)
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if config.getoption("--reverse"):
        items.reverse()
