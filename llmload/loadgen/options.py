"""llmload's Locust command-line options (also environment variables and web-UI form fields).

Each option overrides the matching key of the ladder file; an option left unset keeps the file's
value. `run_config(parsed_options)` returns the validated configuration of the run.
"""

from __future__ import annotations

import argparse
import os
import unicodedata
from argparse import Namespace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.core.config import ENDPOINTS, ConfigError, SweepConfig, load_config


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (call from `init_command_line_parser`)."""
    # Locust's own parser (not an argument group) understands include_in_web_ui / is_secret
    group = parser
    group.add_argument(
        "--ladder",
        default="",
        env_var="LOCUST_LADDER",
        help="YAML ladder/config file (default: the built-in ladder, as in config/sweep.yaml)",
    )
    group.add_argument(
        "--rungs",
        default="",
        env_var="LOCUST_RUNGS",
        help="comma-separated concurrency ladder, e.g. 1,4,8,10 (overrides the file)",
    )
    group.add_argument(
        "--requests-per-user",
        type=int,
        default=None,
        env_var="LOCUST_REQUESTS_PER_USER",
        help="requests each user sends per rung",
    )
    group.add_argument(
        "--rung-duration",
        type=float,
        default=None,
        env_var="LOCUST_RUNG_DURATION",
        help="seconds per rung (time-based rungs instead of request counts)",
    )
    group.add_argument(
        "--warmup-requests",
        type=int,
        default=None,
        env_var="LOCUST_WARMUP_REQUESTS",
        help="warm-up requests per user before the first rung (not measured)",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        env_var="LOCUST_MAX_TOKENS",
        help="output tokens per request (max_tokens, with ignore_eos)",
    )
    group.add_argument(
        "--model",
        default="",
        env_var="LOCUST_MODEL",
        help="model name (default: the first one listed by GET /v1/models)",
    )
    group.add_argument(
        "--endpoint",
        default="",
        choices=["", *ENDPOINTS],
        env_var="LOCUST_ENDPOINT",
        help="completions or chat (default: from the ladder file)",
    )
    group.add_argument(
        "--stream",
        default="",
        choices=["", "true", "false"],
        env_var="LOCUST_STREAM",
        help="stream responses over SSE (default: from the ladder file, true)",
    )
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


def _rungs_option(text: str) -> list[int | float] | None:
    """User counts (1,4,8) or, in rate mode, request rates (0.5,2,5); the config validates which."""
    if not text.strip():
        return None
    try:
        return [float(p) if "." in p else int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        raise ConfigError(f"--rungs: expected comma-separated numbers like 1,4,8,10, got {text!r}") from None


def _number_option(options: Namespace, name: str, kind: type[int] | type[float]) -> int | float | None:
    """A numeric option; the web UI's start form passes text ('' for a field left empty)."""
    value = getattr(options, name, None)
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return kind(value)
    except ValueError:
        flag = "--" + name.replace("_", "-")
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{flag}: expected {what}, got {value!r}") from None


def run_config(options: Namespace) -> SweepConfig:
    """The ladder file given with --ladder (else the built-in ladder, never a file looked up in the
    current directory) plus the options. Each option is validated on its own first, so a bad
    value's error names its flag."""
    ladder = getattr(options, "ladder", "")
    base = load_config(ladder) if ladder else SweepConfig()
    stream = getattr(options, "stream", "")
    overrides = {  # config key -> (value or None, the option that gave it)
        "rungs": (_rungs_option(getattr(options, "rungs", "") or ""), "--rungs"),
        "requests_per_user": (_number_option(options, "requests_per_user", int), "--requests-per-user"),
        "duration": (_number_option(options, "rung_duration", float), "--rung-duration"),
        "warmup_requests": (_number_option(options, "warmup_requests", int), "--warmup-requests"),
        "max_tokens": (_number_option(options, "max_tokens", int), "--max-tokens"),
        "model": (getattr(options, "model", "") or None, "--model"),
        "endpoint": (getattr(options, "endpoint", "") or None, "--endpoint"),
        "stream": (None if not stream else stream == "true", "--stream"),
    }
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
