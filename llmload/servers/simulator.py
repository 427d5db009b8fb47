"""Launch the simulator (`python -m llmload.sim`) as a subprocess for tests and local runs.

    with SimulatorProcess(base_ms=5, faults={"http_500": 0.2}, truth_log=p, log_path=l) as sim:
        urllib.request.urlopen(sim.url + "/health")

Keyword arguments become CLI flags: `base_ms=5` -> `--base-ms 5`, `ignore_eos_unsupported=True`
-> `--ignore-eos-unsupported` (False omits it), `faults={"drop": 0.1}` -> `--fault drop=0.1`;
`extra_args=[...]` is appended verbatim (for flags already in CLI form, e.g. from a command line).
The simulator binds a port the OS picks (`--port 0`) and writes it to a port file in a private
temporary folder; `url` and `port` are known once `start()` returns. No port is chosen first and
bound later, so two test runs or sweeps on one machine never take each other's port. The health
wait and stop-by-PID come from `llmload.servers.process`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmload.servers.process import LOOPBACK, ManagedProcess, StartStop


def sim_flags(faults: Mapping[str, float] | None = None, **flags: object) -> list[str]:
    """CLI arguments for the simulator from Python keyword arguments."""
    args: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        option = "--" + name.replace("_", "-")
        args += [option] if value is True else [option, str(value)]
    for kind, rate in (faults or {}).items():
        args += ["--fault", f"{kind}={rate}"]
    return args


def _value_of(cmd: Sequence[str], flag: str) -> str | None:
    """The value of the last `flag VALUE` or `flag=VALUE` in cmd, or None."""
    found = None
    for i, arg in enumerate(cmd):
        if arg == flag and i + 1 < len(cmd):
            found = cmd[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


class SimulatorProcess(StartStop):
    """The simulator on a free loopback port; a context manager that stops it by PID."""

    def __init__(
        self,
        *,
        truth_log: Path | None = None,
        log_path: Path,
        start_timeout: float = 30.0,
        extra_args: Sequence[str] = (),
        **sim: Any,
    ) -> None:
        for reserved in ("host", "port", "port_file"):
            if reserved in sim:
                raise TypeError(f"SimulatorProcess chooses {reserved!r} itself")
        self.port = 0  # the port the simulator bound, once started
        self.url = ""  # its base URL, once started
        self.truth_log = Path(truth_log) if truth_log is not None else None
        self._folder = Path(tempfile.mkdtemp(prefix="llmload-sim-"))
        self._port_file = self._folder / "port"
        cmd = [sys.executable, "-m", "llmload.sim", "--host", LOOPBACK, "--port", "0"]
        cmd += ["--port-file", str(self._port_file)]
        cmd += sim_flags(truth_log=self.truth_log, **sim) + list(extra_args)
        self.certfile = _value_of(cmd, "--ssl-certfile")  # the simulator serves HTTPS with it
        self.process = ManagedProcess(cmd, self._health_url, Path(log_path), start_timeout=start_timeout)

    def _health_url(self) -> str | None:
        """The health URL once the simulator has written its port (atomically), else None."""
        try:
            self.port = int(self._port_file.read_text())
        except FileNotFoundError:
            return None
        self.url = f"{'https' if self.certfile else 'http'}://{LOOPBACK}:{self.port}"
        return f"{self.url}/health"

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> SimulatorProcess:
        self.process.start()
        return self

    def stop(self, grace: float = 10.0, hurry: Callable[[], bool] | None = None) -> int | None:
        """SIGTERM (then SIGKILL after grace seconds, or once `hurry()` is True) by PID; returns
        the exit code."""
        try:
            return self.process.stop(grace, hurry)
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
