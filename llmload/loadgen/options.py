"""llmload's Locust command-line options (also environment variables and web-UI form fields).

The options that override a key of the ladder file come from the key's declaration in
llmload.core.config; an option left unset keeps the file's value. `run_config(parsed_options)`
returns the validated configuration of the run.
"""

from __future__ import annotations

import argparse
import os
import unicodedata
from argparse import Namespace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.core.config import ConfigError, SweepConfig, load_config
from llmload.core.schema import add_flags, flag_overrides


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (call from `init_command_line_parser`): --ladder,
    one flag per overridable config key (declared in llmload.core.config), then the run options
    that are not config keys (key, TLS, files, metrics scraping)."""
    # Locust's own parser (not an argument group) understands include_in_web_ui / is_secret
    group = parser
    group.add_argument(
        "--ladder",
        default="",
        env_var="LOCUST_LADDER",
        help="YAML ladder/config file (default: the built-in ladder, as in config/sweep.yaml)",
    )
    add_flags(group, SweepConfig)
    group.add_argument(
        "--api-key",
        default="",
        env_var="LOCUST_API_KEY",
        is_secret=True,
        help="API key sent as a Bearer token (or set OPENAI_API_KEY)",
    )
    group.add_argument(
        "--records",
        default="",
        env_var="LOCUST_RECORDS",
        include_in_web_ui=False,
        help="per-request records file (default: <csv prefix>_records.jsonl)",
    )
    group.add_argument(
        "--ca-bundle",
        default="",
        env_var="LOCUST_CA_BUNDLE",
        include_in_web_ui=False,
        help="CA bundle for verifying the server's TLS certificate",
    )
    group.add_argument(
        "--tls-insecure",
        action="store_true",
        default=False,
        env_var="LOCUST_TLS_INSECURE",
        include_in_web_ui=False,
        help="do not verify the server's TLS certificate",
    )
    group.add_argument(
        "--metrics-url",
        default="",
        env_var="LOCUST_METRICS_URL",
        include_in_web_ui=False,
        help="server Prometheus URL scraped during the run (default: <host>/metrics, if it answers)",
    )
    group.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        env_var="LOCUST_SCRAPE_INTERVAL",
        include_in_web_ui=False,
        help="seconds between /metrics scrapes, besides one at every rung boundary; 0: off (default: 1)",
    )


class _PlainArguments:
    """Takes `add_argument` calls meant for Locust's parser into a plain argparse group, dropping
    the Locust-only keywords (env_var, include_in_web_ui, is_secret)."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        env_var = kwargs.pop("env_var", None)
        kwargs.pop("include_in_web_ui", None)
        kwargs.pop("is_secret", None)
        if env_var:
            kwargs["help"] = f"{kwargs.get('help', '')} [env {env_var}]"
        self.group.add_argument(*flags, **kwargs)


def options_help(width: int = 100) -> str:
    """The llmload options as a help section (Locust prints --help before it loads a locustfile,
    so `locust -f ... --help` cannot list them; `llmload sweep --help` shows this)."""
    parser = argparse.ArgumentParser(
        prog="locust", add_help=False, formatter_class=lambda prog: argparse.HelpFormatter(prog, width=width)
    )
    group = parser.add_argument_group("llmload options (locust -f <llmload locustfile>, and the web UI form)")
    add_arguments(_PlainArguments(group))
    return parser.format_help().split("\n\n", 1)[1]


def run_config(options: Namespace) -> SweepConfig:
    """The ladder file given with --ladder (else the built-in ladder, never a file looked up in the
    current directory) plus the options. Each option is validated on its own first, so a bad
    value's error names its flag."""
    ladder = getattr(options, "ladder", "")
    base = load_config(ladder) if ladder else SweepConfig()
    overrides = flag_overrides(options, SweepConfig, error=ConfigError)
    for key, (value, flag) in overrides.items():
        base.with_overrides(source=flag, **{key: value})
    if getattr(options, "host", None):
        check_host(options.host)
    check_api_key(api_key(options))
    return base.with_overrides(**{key: value for key, (value, _) in overrides.items()})


def api_key(options: Namespace) -> str:
    """The API key from --api-key / LOCUST_API_KEY, else OPENAI_API_KEY, else empty."""
    return getattr(options, "api_key", "") or os.environ.get("OPENAI_API_KEY", "")


def check_host(host: str) -> None:
    """ConfigError unless host is an http(s) URL with a host name and, if any, a port in 1-65535."""
    what = "expected http://HOST[:PORT] or https://HOST[:PORT], scheme included"
    try:
        parts = urlsplit(host)
        port = parts.port  # ValueError when not a number or out of range
    except ValueError as e:
        raise ConfigError(f"--host {host!r}: {e} ({what})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--host {host!r}: {what}")
    if port == 0:
        raise ConfigError(f"--host {host!r}: port 0 is not a server port ({what})")


def check_api_key(key: str) -> None:
    """ConfigError when the key holds a character an HTTP header cannot carry (not Latin-1, or a
    control character). The message names the character and its position, never the key."""
    for i, ch in enumerate(key, start=1):
        code = ord(ch)
        if code > 0xFF or code < 0x20 or code == 0x7F:
            name = unicodedata.name(ch, "a control character")
            raise ConfigError(
                f"--api-key / LOCUST_API_KEY / OPENAI_API_KEY: character {i} of the API key is "
                f"U+{code:04X} ({name}), which an HTTP header cannot carry "
                "(a pasted typographic quote or line break?)"
            )


def blocking_file(path: Path) -> Path | None:
    """The file at `path` or above it that keeps `path` from being (or becoming) a folder."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _output_path(text: str) -> str:
    blocker = blocking_file(Path(text).parent)
    if blocker is not None:
        raise argparse.ArgumentTypeError(f"{text}: {blocker} is a file, not a folder")
    return text


def guard_output_paths(parser: Any) -> None:
    """Locust creates the folders of --csv, --html and --json-file before any plugin can look, and
    a file in the way is its traceback: check them while the command line is parsed (one
    `locust: error: argument --csv: ...` line, exit 2)."""
    for action in getattr(parser, "_actions", ()):
        if action.dest in ("csv_prefix", "html_file", "json_file") and action.type is None:
            action.type = _output_path
