"""Start and stop a local server process: free loopback port, wait for health, stop by PID.

Shared by the simulator launcher (`llmload.servers.simulator`), the real llama.cpp server launcher
(`llmload.servers.llama_cpp`) and the tests, so every server the project starts is bound to 127.0.0.1,
on a port the OS says is free, and is stopped by its own PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if a GET on url answers 2xx within timeout."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback only)
            return bool(200 <= resp.status < 300)
    except (urllib.error.URLError, OSError, ValueError):
        return False


PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None  # loaded before any fork


def die_with_parent() -> None:
    """In a child between fork and exec: SIGTERM from the kernel when the process that started it
    dies (Linux prctl PR_SET_PDEATHSIG), so even a SIGKILLed launcher leaves no orphan."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class StartStop:
    """`with obj:` calls `obj.start()` (which returns obj) and, on the way out, `obj.stop()`."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> int | None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServerStartError(RuntimeError):
    """The server process exited or did not become healthy in time."""


class ManagedProcess(StartStop):
    """A server subprocess in its own process group, logged to a file, stopped by PID.

    Use as a context manager: `with ManagedProcess(cmd, health_url, log_path) as proc: ...`.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        health_url: str,
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.cmd = list(cmd)
        self.health_url = health_url
        self.log_path = Path(log_path)
        self.env = env
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.dies_with_parent = False  # set before start(): SIGTERM when this process dies (Linux)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("process not started")
        return self.proc.pid

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,
                preexec_fn=die_with_parent if self.dies_with_parent else None,
            )
        finally:
            log.close()
        try:
            return self._wait_healthy()
        except BaseException:  # not healthy, or interrupted (Ctrl+C, SIGTERM) while waiting: no orphan
            self.stop()
            raise

    def _wait_healthy(self) -> ManagedProcess:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.cmd[0]} exited with code {self.proc.returncode} before it was healthy; "
                    f"see {self.log_path}:\n{self.log_tail()}"
                )
            if http_ok(self.health_url, timeout=1.0):
                return self
            time.sleep(0.05)
        raise ServerStartError(
            f"{self.cmd[0]} not healthy at {self.health_url} after {self.start_timeout:.0f} s; "
            f"see {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the process (by PID), SIGKILL after `grace` seconds; returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=grace)
        return self.proc.returncode
