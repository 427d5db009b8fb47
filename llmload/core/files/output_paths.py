"""Output paths a user names (a flag's file or folder), checked before anything is written.

`check_output_folder(flag, folder)` and `check_output_file(flag, path)` raise ConfigError with one
line naming the flag and the path when the run could not write there: a file where a folder must
be, a folder that cannot be created, one this process cannot create files in (read-only, another
user's), an existing file it cannot append to. The folder is created, as the run would create it.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmload.core.checks import ConfigError


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
