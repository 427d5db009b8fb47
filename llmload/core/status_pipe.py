"""Why a child process stopped, told to the command that started it over a pipe, not a file.

A run's files (the records, Locust's log, the simulator's log) may be on the disk that just
failed, so a reason written there may never be read. `llmload sweep` makes a `StatusPipe`, hands
its write end to Locust and the simulator (its number in `LLMLOAD_STATUS_FD`; `child_env` and
`pass_fds`), and reads what they `tell` while they run. A process started otherwise (plain
`locust`, `llmload sim` in a terminal) has no such variable: `tell` does nothing.

Each message is one JSON line: who (`locust`, `simulator`), the kind of error
(`llmload.core.files.run_errors.KINDS`), its one-line message and the exit code it set. The write
end is non-blocking: a reader that stopped reading never blocks a writer (the message is lost,
never the run).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any

STATUS_FD_ENV = "LLMLOAD_STATUS_FD"
_MAX_MESSAGE = 2000  # characters of one message: a pipe write of up to 4 KiB is never split


@dataclass(frozen=True, slots=True)
class Status:
    """One message a child told: who, the kind of error, the line, the exit code it set."""

    source: str
    kind: str
    message: str
    exit_code: int | None


def tell(source: str, kind: str, message: str, exit_code: int | None = None) -> None:
    """Tell the starting command why this process stops (nothing without `STATUS_FD_ENV`)."""
    fd = os.environ.get(STATUS_FD_ENV, "")
    if not fd.isdigit():
        return
    line = {"source": source, "kind": kind, "message": message[:_MAX_MESSAGE], "exit_code": exit_code}
    with contextlib.suppress(OSError):  # closed, full, or not a pipe: the message is lost
        os.write(int(fd), json.dumps(line).encode() + b"\n")


class StatusPipe:
    """The reading end the starting command keeps, and the write end its children inherit."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._pending = b""
        self.received: list[Status] = []

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """For `subprocess.Popen(pass_fds=...)`: the write end stays open in the child."""
        return () if self._write < 0 else (self._write,)

    def child_env(self) -> dict[str, str]:
        """The environment variable that names the write end in a child."""
        return {} if self._write < 0 else {STATUS_FD_ENV: str(self._write)}

    def read(self) -> list[Status]:
        """The messages told since the last read (also kept in `received`), in order."""
        while self._read >= 0:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._pending += chunk
        lines, _, self._pending = self._pending.rpartition(b"\n")
        new = [status for line in lines.split(b"\n") if (status := _status(line)) is not None]
        self.received += new
        return new

    def close(self) -> None:
        """Read what is left, then close both ends."""
        self.read()
        for fd in (self._read, self._write):
            if fd >= 0:
                os.close(fd)
        self._read = self._write = -1

    def __enter__(self) -> StatusPipe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _status(line: bytes) -> Status | None:
    try:
        data: Any = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        return None
    code = data.get("exit_code")
    return Status(
        str(data.get("source", "")),
        str(data.get("kind", "")),
        data["message"],
        code if type(code) is int else None,
    )
