"""Every command's one error boundary, and the argument parser its flags are read with.

- `ArgumentParser`: argparse's own, but its refusals (`invalid choice`, `unrecognized
  arguments`, `invalid int value`, ...) are one line, without the usage block, each value cut to
  about 100 characters (a line break in a value is shown as `\\n`).
- `command(prog)`: the decorator every `main(argv) -> int` of an llmload command wears (`llmload
  sim` too). What the command did not turn into a line itself becomes one line and an exit code,
  never a traceback: a refused configuration (`ConfigError`, `RecordFileError`), a file or folder
  it cannot read or write (`OSError`: the flag that gave the path named, the path cut), TLS
  material it cannot load (`ssl.SSLError`), an address it cannot use (`socket.gaierror`). The
  exit code is BAD_INPUT, or WRITE_FAILED when the disk refused (full, over quota, a file larger
  than the process may write). A closed pipe (`| head`) is left to `llmload.cli.run_command`.

`one_line(text)` is the cut every message goes through; `path_text(path)` the cut of a path
(its head and its tail kept: both say which file it is).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import re
import socket
import ssl
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from llmload.core.exit_codes import BAD_INPUT, WRITE_FAILED
from llmload.core.status_pipe import tell

VALUE_CHARS = 100  # of a value echoed in a message
LINE_CHARS = 600  # of the whole message: a few values and the words around them
# the disk's refusals (not the input's): a run or a report that cannot write exits WRITE_FAILED
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def cut(text: str, limit: int = VALUE_CHARS) -> str:
    """`text` cut to about `limit` characters, its head and its tail kept (`...` marks a cut)."""
    if len(text) <= limit:
        return text
    head = (limit - 3) * 2 // 3
    return f"{text[:head]}...{text[len(text) - (limit - 3 - head) :]}"


def path_text(path: Any) -> str:
    """A path for a message: its text cut to about 100 characters, a line break shown as `\\n`."""
    return cut(str(path).replace("\r", "\\r").replace("\n", "\\n"))


def one_line(message: str) -> str:
    """A message as one line of bounded length: line breaks shown as `\\n`, every quoted value cut
    to about 100 characters, the whole to LINE_CHARS."""
    text = message.replace("\r", "\\r").replace("\n", "\\n")
    text = _QUOTED.sub(lambda m: m.group(0) if len(m.group(0)) <= VALUE_CHARS else cut(m.group(0)), text)
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 3] + "..."


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose refusals echo each value cut (module docstring)."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        parsed: argparse.Namespace
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # argparse would join them all into one message, however many and long
            shown = " ".join(cut(repr(a) if not a.strip() or "\n" in a else a, 60) for a in extras[:4])
            more = f" (and {len(extras) - 4} more)" if len(extras) > 4 else ""
            self.error(f"unrecognized arguments: {shown}{more}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """One line, without argparse's usage block (`--help` shows it)."""
        tell(self.prog, "refused", one_line(message), BAD_INPUT)
        self.exit(BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")


def _flag_values(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) of every `--flag value` and `--flag=value` of argv; (``, value) for a value
    that follows no flag (a positional argument)."""
    pairs: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "=" in arg:
            flag, _, value = arg.partition("=")
            pairs.append((flag, value))
        elif not arg.startswith("-") or arg == "-":
            before = argv[i - 1] if i else ""
            flag = before if before.startswith("--") and "=" not in before else ""
            pairs.append((flag, arg))
    return pairs


def _named(path: str, argv: Sequence[str]) -> str:
    """How a message names the input that gave `path`: `--flag VALUE` (with the file under it,
    when the path is one the command made inside the flag's folder), else the path itself."""
    best: tuple[int, str, str] | None = None
    for flag, value in _flag_values(argv):
        if not value or not (path == value or path.startswith(value.rstrip("/") + "/")):
            continue
        if best is None or len(value) > best[0]:
            best = (len(value), flag, value)
    if best is None:
        return path_text(path)
    _, flag, value = best
    head = f"{flag} {path_text(value)}" if flag else path_text(value)
    return head if path == value else f"{head}: {path_text(path)}"


def errno_text(error: OSError) -> str:
    """The system's reason with its errno and name: `[Errno 28 ENOSPC] No space left on device`."""
    reason = one_line(error.strerror or str(error) or type(error).__name__)
    if not isinstance(error.errno, int) or isinstance(error, socket.gaierror):
        return reason
    return f"[Errno {error.errno} {errno.errorcode.get(error.errno, '?')}] {reason}"


def os_error_line(error: OSError, argv: Sequence[str] = ()) -> str:
    """One line for an OSError: the input that gave its path (`_named`), then `errno_text`."""
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the address: {errno_text(error)}"
    if error.filename is None:
        return errno_text(error)
    where = _named(str(error.filename), argv)
    if error.filename2 is not None:
        where += f" -> {_named(str(error.filename2), argv)}"
    return f"{where}: {errno_text(error)}"


def exit_code_of(error: OSError) -> int:
    """WRITE_FAILED when the disk refused (DISK_ERRNOS), else BAD_INPUT."""
    return WRITE_FAILED if error.errno in DISK_ERRNOS else BAD_INPUT


def command(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """The error boundary of a command's `main(argv=None) -> int` (module docstring)."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def bounded(argv: Sequence[str] | None = None) -> int:
            given = list(sys.argv[1:] if argv is None else argv)
            try:
                return main(argv)
            except BrokenPipeError:
                raise  # `| head`: llmload.cli.run_command ends the command quietly
            except ssl.SSLError as e:
                return _refuse(prog, f"TLS: {e.reason or e}", BAD_INPUT)
            except OSError as e:
                return _refuse(prog, os_error_line(e, given), exit_code_of(e))
            except ValueError as e:  # ConfigError, RecordFileError and the like: their own line
                if type(e).__name__ not in REFUSALS:
                    raise
                return _refuse(prog, str(e), BAD_INPUT)

        bounded.__llmload_boundary__ = prog  # type: ignore[attr-defined]
        return bounded

    return wrap


# the one-line refusals of llmload's readers (each a ValueError whose message names the input);
# by name, so this module imports none of them (the simulator imports it too)
REFUSALS = frozenset({"ConfigError", "RecordFileError", "SimFlagError", "LocustCsvError", "TwinFitError"})


def _refuse(prog: str, message: str, code: int) -> int:
    """The line on stderr, and told to the command that started this one (if any: it may not read
    this process's output, on a disk that failed)."""
    line = one_line(message)
    tell(prog, "refused", line, code)
    with contextlib.suppress(OSError):
        print(f"{prog}: error: {line}", file=sys.stderr)
    return code
