"""Output paths a user names (a flag's file or folder), checked before anything is written.

`check_output_folder(flag, folder)` and `check_output_file(flag, path)` raise ConfigError with one
line naming the flag and the path when the run could not write there: a file where a folder must
be, a folder that cannot be created, one this process cannot create files in (read-only, another
user's), an existing file it cannot append to. The folder is created, as the run would create it.

`claim_run_folder(flag, folder, files)` claims a run's folder for this process: refused while
another run holds it, and while it holds an earlier run's files unless they may be replaced
(`--overwrite`); `fresh_folder(base)` makes a folder of that name that did not exist.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from llmload.core.checks import ConfigError
from llmload.core.files.chunk_index import index_path
from llmload.core.files.run_files import LOCUST_LOG, RUN_SUFFIXES, SIM_LOG, SIM_TRUTH, RunFiles


def blocking_file(path: Path) -> Path | None:
    """The file at `path` or above it that keeps `path` from being (or becoming) a folder."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _shown(text: str | Path) -> str:
    text = str(text)
    return text if len(text) <= 100 else text[:100] + "..."


def check_output_folder(flag: str, folder: Path, value: str | Path | None = None) -> None:
    """ConfigError (one line naming the flag and the path) unless `folder` is, or can become, a
    folder this process can create files in. It is created (as the run would create it); a probe
    file is made in it and removed, so a read-only mount or a root-only folder is found here too."""
    where = f"{flag} {_shown(folder if value is None else value)}"
    blocker = blocking_file(folder)
    if blocker is not None:
        raise ConfigError(f"{where}: {_shown(blocker)} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{where}: cannot create {_shown(folder)}: {e.strerror or e}") from None
    probe = folder / f".llmload-write-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{where}: cannot write in {_shown(folder)}: {e.strerror or e}") from None


def check_output_file(flag: str, path: Path, value: str | Path | None = None) -> None:
    """ConfigError (one line naming the flag and the path) unless the file at `path` can be
    written: its folder as `check_output_folder`, and the file itself, when it exists, a
    writable file (opened for appending, so nothing in it is lost)."""
    where = f"{flag} {_shown(path if value is None else value)}"
    if path.is_dir():
        raise ConfigError(f"{where}: {_shown(path)} is a folder, not a file")
    check_output_folder(flag, path.parent, path if value is None else value)
    if path.exists():
        try:
            with path.open("ab"):
                pass
        except OSError as e:
            raise ConfigError(f"{where}: cannot write {_shown(path)}: {e.strerror or e}") from None


LOCK_FILE = ".llmload.lock"  # in a run's folder: held (flock) by the command running into it
SIMULATOR_FILES = (SIM_TRUTH, SIM_LOG, LOCUST_LOG)  # the sweep's own files beside the run's


class RunFolder:
    """A run's folder, claimed by this process until `close()` (or its end): an advisory lock on
    its LOCK_FILE that another claim of the same folder finds held."""

    def __init__(self, folder: Path, lock: IO[bytes]) -> None:
        self.folder = folder
        self._lock: IO[bytes] | None = lock

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # the lock goes with the file
            self._lock = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def earlier_run(folder: Path, files: RunFiles) -> list[Path]:
    """The files of an earlier run that a run into `folder` with `files` would replace or mix
    with: the run's own (`RUN_SUFFIXES`: records, run file, health, Locust's CSVs, ...), the
    records file and its chunk index, the simulator's truth log and the sweep's logs. (Reports
    written beside a run, `<prefix>_report.html`, ..., are left: they say which run they are of.)"""
    written = [files.records, index_path(files.records)]
    written += [Path(f"{files.prefix}{suffix}") for suffix in RUN_SUFFIXES]
    written += [folder / name for name in SIMULATOR_FILES]
    return [p for p in dict.fromkeys(written) if p.is_file()]  # the records first


def claim_run_folder(flag: str, folder: Path, files: RunFiles, *, overwrite: bool = False) -> RunFolder:
    """Claim `folder` for a run whose files are `files`; ConfigError (one line naming the flag)
    when another run holds it (its lock), or when it holds an earlier run's files (`earlier_run`:
    its records, run file, truth log...) and `overwrite` is False. With `overwrite`, those files
    are removed first, so nothing of the earlier run is appended to or read as this run's."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = (folder / LOCK_FILE).open("ab")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise ConfigError(f"{flag} {_shown(folder)}: in use by another run; give another folder") from None
    earlier = earlier_run(folder, files)
    if earlier and not overwrite:
        lock.close()
        raise ConfigError(
            f"{flag} {_shown(folder)}: holds an earlier run ({_shown(earlier[0])}); give a new folder, "
            "or --overwrite to replace it"
        )
    for path in earlier:
        path.unlink(missing_ok=True)
    return RunFolder(folder, lock)


def fresh_folder(base: Path) -> Path:
    """`base`, or `base-2`, `base-3`, ...: the first that did not exist, made now (two commands
    started in the same second get two folders)."""
    for n in range(1, 1000):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise ConfigError(f"{_shown(base)}: 999 folders of that name exist; give --run-dir")
