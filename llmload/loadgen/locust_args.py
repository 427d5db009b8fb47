"""Locust's own verdict on a command line, asked in-process before anything starts.

`parse_locust_args(argv)` builds Locust's argument parser as `locust -f <llmload locustfile>`
builds it (Locust's options, its configuration files and LOCUST_* variables, then llmload's
options: `llmload.loadgen.options.register_options`) and parses `argv` with it. A command line
Locust would refuse raises ConfigError with Locust's reason on one line, so `llmload sweep` can
say it on the terminal before the simulator starts, instead of "locust exited with code 2".

Importing Locust patches the standard library for gevent unless LOCUST_SKIP_MONKEY_PATCH is set.
The process that only checks a command line (the sweep, which then waits on subprocesses and
handles signals itself) must stay unpatched, so the first import here skips the patch; a process
that imported Locust already (a Locust process, a test) keeps what it has.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

from llmload.core.config import ConfigError
from llmload.loadgen.options import register_options

SKIP_PATCH = "LOCUST_SKIP_MONKEY_PATCH"


def _locust_parser_module() -> Any:
    """`locust.argument_parser`, imported without gevent's patching when Locust is not loaded yet."""
    if "locust" in sys.modules:
        import locust.argument_parser as module

        return module
    previous = os.environ.get(SKIP_PATCH)
    os.environ[SKIP_PATCH] = "1"
    try:
        import locust.argument_parser as module
    finally:  # the Locust the sweep starts later is patched as usual
        if previous is None:
            os.environ.pop(SKIP_PATCH, None)
        else:
            os.environ[SKIP_PATCH] = previous
    return module


def locust_parser() -> Any:
    """Locust's parser with llmload's options, as `locust -f <llmload locustfile>` has it."""
    module = _locust_parser_module()
    parser = module.get_empty_argument_parser(add_help=True)
    module.setup_parser_arguments(parser)
    register_options(parser)
    parser.prog = "locust"
    return parser


def parse_locust_args(argv: Sequence[str]) -> Namespace | None:
    """Locust's options parsed from `argv` (what follows `locust`), or None when Locust would only
    print something and exit 0 (--help, --version). ConfigError "locust: <Locust's reason>" (one
    line) for a command line Locust refuses."""
    parser = locust_parser()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return parser.parse_args(list(argv))  # type: ignore[no-any-return]
    except SystemExit as stop:
        if not stop.code:
            return None
        lines = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
        reason = " ".join(
            line.removeprefix("locust: error: ") for line in lines if not line.startswith("usage")
        )
        raise ConfigError(f"locust: {reason or f'refused the command line (exit {stop.code})'}") from None
    except Exception as e:  # Locust's own error report can fail (on an empty unknown argument)
        blank = any(not arg.strip() for arg in argv)
        reason = "an empty argument ('')" if blank else f"{type(e).__name__}: {str(e)[:100]}"
        raise ConfigError(f"locust: cannot parse the command line: {reason}") from None
