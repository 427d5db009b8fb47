"""Run a whole sweep as one command: start the simulator unless a host is named, run Locust
headless over the ladder, stop the simulator by PID, and leave the run's files in one folder.

Used by `llmload sweep` (`make sweep`) and by the end-to-end tests, so what the tests
check is exactly what a user runs: a real `locust` process talking to a real server over loopback.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.locustfiles import ENDPOINT_LOCUSTFILES, locustfile_path
from llmload.servers.process import free_port
from llmload.servers.simulator import SimulatorProcess

LOCUSTFILES = {endpoint: locustfile_path(endpoint) for endpoint in ENDPOINT_LOCUSTFILES}


@dataclass(frozen=True, slots=True)
class SweepRun:
    """Where a finished run left its files."""

    prefix: Path  # Locust's --csv prefix; records are <prefix>_records.jsonl
    returncode: int
    truth_log: Path | None  # the simulator's ground truth, when the simulator was used
    log: Path  # Locust's output

    @property
    def records(self) -> Path:
        return Path(f"{self.prefix}_records.jsonl")


def default_run_dir() -> Path:
    """reports/sweep-<time>/ under the current directory (where Locust's own --csv files go too)."""
    return Path("reports") / time.strftime("sweep-%Y%m%d-%H%M%S")


@contextlib.contextmanager
def target(host: str | None, run_dir: Path, sim: Mapping[str, Any]) -> Iterator[tuple[str, Path | None]]:
    """Yield (host, truth log): the given host, or a simulator started for the run."""
    if host:
        yield host, None
        return
    truth = run_dir / "sim_truth.jsonl"
    with SimulatorProcess(truth_log=truth, log_path=run_dir / "sim.log", **sim) as server:
        yield server.url, truth


def local_master_port(extra: Sequence[str]) -> list[str]:
    """With --processes, a free port for the master and its forked workers (Locust's default, 5557,
    is taken by any other local distributed run on the machine), unless the command names one."""
    if "--processes" not in extra or any(a.startswith("--master-bind-port") for a in extra):
        return []
    port = str(free_port())
    return ["--master-bind-port", port, "--master-port", port]


def locust_command(host: str, prefix: Path, locustfile: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--host",
        host,
        "--csv",
        str(prefix),
        "--only-summary",
        *local_master_port(extra),
        *extra,
    ]


def run_sweep(
    *,
    host: str | None = None,
    run_dir: Path | None = None,
    locust_args: Sequence[str] = (),
    sim: Mapping[str, Any] | None = None,
    endpoint: str = "completions",
    timeout: float = 1800.0,
) -> SweepRun:
    """Run the ladder headless against host (or a fresh simulator with the `sim` flags, e.g.
    {"accept_len": 1, "faults": {"drop": 0.2}}) and return where it wrote."""
    run_dir = Path(run_dir or default_run_dir())
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = run_dir / "run"
    log = run_dir / "locust.log"
    with target(host, run_dir, sim or {}) as (url, truth), log.open("wb") as out:
        cmd = locust_command(url, prefix, LOCUSTFILES[endpoint], locust_args)
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    return SweepRun(prefix, proc.returncode, truth, log)
