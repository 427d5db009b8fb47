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
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from llmload.servers.build_guard import tail

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if a GET on url answers 2xx within timeout. An https URL is asked without checking the
    certificate: this only asks whether a server this process started on loopback is up (the
    load generator checks the certificate as the user asked)."""
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:  # noqa: S310 (loopback only)
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
    """The server process exited (`returncode`) or did not become healthy in time (None)."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


class StartCancelled(Exception):
    """The process's `cancel()` said to give up while it started (a stop was asked for)."""


STOP_POLL_S = 0.05  # how often a wait looks at `cancel` / `hurry`


class ManagedProcess(StartStop):
    """A server subprocess in its own process group, logged to a file, stopped by PID.

    Use as a context manager: `with ManagedProcess(cmd, health_url, log_path) as proc: ...`.
    `health_url` may be a function that returns None until the URL is known (a server that binds
    a port the OS picks and says which).
    """

    def __init__(
        self,
        cmd: Sequence[str],
        health_url: str | Callable[[], str | None],
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
        self.pass_fds: tuple[int, ...] = ()  # set before start(): file descriptors the process inherits
        # set before start(): asked while waiting for health; True stops the process and raises
        # StartCancelled (the launcher's stop signals are read here, never raised from a handler)
        self.cancel: Callable[[], bool] | None = None

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
                pass_fds=self.pass_fds,
                preexec_fn=die_with_parent if self.dies_with_parent else None,
            )
        finally:
            log.close()
        try:
            return self._wait_healthy()
        except BaseException:  # not healthy, cancelled or interrupted while waiting: no orphan
            self.stop(hurry=self.cancel)  # cancelled: SIGKILL if SIGTERM is not enough at once
            raise

    def _wait_healthy(self) -> ManagedProcess:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.cancel is not None and self.cancel():
                raise StartCancelled(f"{self.cmd[0]}: stopped while it started")
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.cmd[0]} exited with code {self.proc.returncode} before it was healthy; "
                    f"see {self.log_path}:\n{self.log_tail()}",
                    self.proc.returncode,
                )
            url = self.health_url() if callable(self.health_url) else self.health_url
            if url is not None and http_ok(url, timeout=1.0):
                return self
            time.sleep(STOP_POLL_S)
        where = (self.health_url() if callable(self.health_url) else self.health_url) or "a port never named"
        raise ServerStartError(
            f"{self.cmd[0]} not healthy at {where} after {self.start_timeout:.0f} s; "
            f"see {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        return tail(self.log_path, lines)

    def stop(self, grace: float = 10.0, hurry: Callable[[], bool] | None = None) -> int | None:
        """SIGTERM the process (by PID), SIGKILL after `grace` seconds, or as soon as `hurry()`
        says so (checked every STOP_POLL_S); returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            if not wait_or_hurry(self.proc, grace, hurry):
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=grace)
        return self.proc.returncode


def wait_or_hurry(proc: subprocess.Popen[bytes], timeout: float, hurry: Callable[[], bool] | None) -> bool:
    """Wait up to `timeout` s for proc to exit; False if it did not, or `hurry()` turned True first."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(STOP_POLL_S, left)))
            return True
        except subprocess.TimeoutExpired:
            if left <= 0 or (hurry is not None and hurry()):
                return False
