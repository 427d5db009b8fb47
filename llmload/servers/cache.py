"""llmload's download and build cache: where it is, its file locks, and pip downloads into it.

Everything lives under `$LLMLOAD_CACHE` or `~/.cache/llmload`, outside the repository. Callers
that may run concurrently (two test sessions, a test run and `llmload llama-server build`) take
a file lock per job, and every file is put in place by a rename, so an interrupted download or
build never looks like a finished one.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llmload.servers.build_guard import BuildError, run_logged

PIP_TIMEOUT_S = 900.0


def cache_dir() -> Path:
    """Root of llmload's download and build cache: `$LLMLOAD_CACHE` or `~/.cache/llmload`."""
    env = os.environ.get("LLMLOAD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llmload"


@contextmanager
def file_lock(name: str, timeout: float) -> Iterator[None]:
    """Exclusive fcntl lock on `<cache>/locks/<name>.lock`, waiting at most `timeout` seconds.

    The kernel drops the lock when its holder dies, so a killed holder never blocks the next one.
    """
    lock_path = cache_dir() / "locks" / f"{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BuildError(f"timed out after {timeout:.0f} s waiting for {lock_path}") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pip_download(package: str, version: str, pip_args: Sequence[str], suffix: str, log_path: Path) -> Path:
    """The file of package==version in `<cache>/dl/<package>-<version>/`, fetched with `pip download`.

    pip saves into a temporary folder first and the file is renamed into place, so an interrupted
    download never looks like a cached one; each package has its own folder, so concurrent
    downloads of different packages do not see each other's files.
    """
    dl_dir = cache_dir() / "dl" / f"{package}-{version}"
    cached = sorted(dl_dir.glob(f"*{suffix}"))
    if cached:
        return cached[0]
    dl_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=dl_dir) as tmp:
        requirement = f"{package}=={version}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *pip_args, requirement, "-d", tmp]
        run_logged(cmd, log_path, PIP_TIMEOUT_S, f"pip download {requirement}")
        saved = sorted(Path(tmp).glob(f"*{suffix}"))
        if len(saved) != 1:
            raise BuildError(f"pip download {requirement} saved no single *{suffix} file; see {log_path}")
        target = dl_dir / saved[0].name
        os.replace(saved[0], target)
    return target
