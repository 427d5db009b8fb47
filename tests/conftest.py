"""Shared pytest fixtures. Simulator fixtures are named `sim_*`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmload.servers.simulator import SimulatorProcess


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
