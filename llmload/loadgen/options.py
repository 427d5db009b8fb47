"""llmload's Locust command-line options (also environment variables and web-UI form fields).

The options that override a key of the ladder file come from the key's declaration in
llmload.core.config; an option left unset keeps the file's value. `run_config(parsed_options)`
returns the validated configuration of the run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import unicodedata
from argparse import Namespace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.core.config import ConfigError, SweepConfig, load_config
from llmload.core.files.output_paths import check_output_file
from llmload.core.schema import add_flags, flag_overrides, shown
from llmload.loadgen.argparse_adapter import parser_actions


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
    live = {  # the run's live metrics (llmload.loadgen.monitor.live_metrics)
        "--metrics-port": (
            "PORT",
            metrics_port,
            0,
            "serve the run's live metrics for Prometheus at http://<master>:PORT/metrics",
        ),
        "--otlp": (
            "URL",
            otlp_url,
            "",
            "push the run's live metrics to this OTLP/HTTP collector URL (pip install 'llmload[otlp]')",
        ),
    }
    for flag, (metavar, check, off, what) in live.items():
        env_var = "LOCUST_" + flag.removeprefix("--").upper().replace("-", "_")
        group.add_argument(
            flag,
            metavar=metavar,
            type=check,
            default=off,
            env_var=env_var,
            include_in_web_ui=False,
            help=f"{what}; default: off",
        )


def metrics_port(text: str) -> int:
    """--metrics-port: a port in 1-65535 that this machine can serve now (0: off)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (1-65535), got {shown(text)}") from None
    if port == 0:
        return 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{shown(text)}: a port is 1-65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError as e:
            raise argparse.ArgumentTypeError(f"port {port} cannot be served: {e.strerror or e}") from None
    return port


def otlp_url(text: str) -> str:
    """--otlp: an http(s) URL with a host (empty: off), and the OpenTelemetry extra installed."""
    if not text:
        return text
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - ValueError when not a number or out of range
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected http(s)://HOST[:PORT][/PATH], got {shown(text)}")
    if not otlp_exporter_installed():
        raise argparse.ArgumentTypeError(
            "the OpenTelemetry SDK is not installed: pip install 'llmload[otlp]'"
        )
    return text


def otlp_exporter_installed() -> bool:
    """Whether OpenTelemetry's SDK and its OTLP/HTTP exporter (the extra `llmload[otlp]`) are installed."""
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:
        return False


class _PlainArguments:
    """Takes `add_argument` calls meant for Locust's parser into a plain argparse group, dropping
    the Locust-only keywords (env_var, include_in_web_ui, is_secret)."""

    def __init__(self, group: Any, without: tuple[str, ...] = ()) -> None:
        self.group = group
        self.without = without

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        if any(flag in self.without for flag in flags):
            return
        env_var = kwargs.pop("env_var", None)
        kwargs.pop("include_in_web_ui", None)
        kwargs.pop("is_secret", None)
        if env_var:
            kwargs["help"] = f"{kwargs.get('help', '')} [env {env_var}]"
        self.group.add_argument(*flags, **kwargs)


def options_help(width: int = 100, without: tuple[str, ...] = ()) -> str:
    """The llmload options as a help section (Locust prints --help before it loads a locustfile,
    so `locust -f ... --help` cannot list them; `llmload sweep --help` shows this), leaving out
    the flags in `without` (a command's own option of the same name)."""
    parser = argparse.ArgumentParser(
        prog="locust", add_help=False, formatter_class=lambda prog: argparse.HelpFormatter(prog, width=width)
    )
    group = parser.add_argument_group("llmload options (locust -f <llmload locustfile>, and the web UI form)")
    add_arguments(_PlainArguments(group, without))
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


def shown_host(host: str) -> str:
    """The host as an error may show it: any `user:password@` replaced by `***@`, cut to 100
    characters (a URL pasted with its credentials must not land in a terminal's scrollback)."""
    scheme, sep, rest = host.partition("://")
    if not sep:
        scheme, rest = "", host
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc = rest[:end]
    if "@" in netloc:
        rest = "***@" + netloc.rpartition("@")[2] + rest[end:]
    shown = f"{scheme}{sep}{rest}"
    return shown if len(shown) <= 100 else shown[:100] + "..."


def check_host(host: str) -> None:
    """ConfigError unless host is an http(s) URL with a host name and, if any, a port in 1-65535,
    and nothing the users' requests would drop or send elsewhere: no credentials, query or
    fragment. The message never shows the credentials."""
    what = "expected http://HOST[:PORT] or https://HOST[:PORT], scheme included"
    where = f"--host {shown_host(host)!r}"
    try:
        parts = urlsplit(host)
        port = parts.port  # ValueError when not a number or out of range
    except ValueError as e:
        raise ConfigError(f"{where}: {e} ({what})") from None  # the port's text: never the userinfo
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {what}")
    if port == 0:
        raise ConfigError(f"{where}: port 0 is not a server port ({what})")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{where}: credentials in the URL are not sent; give the key with --api-key / LOCUST_API_KEY"
        )
    if "?" in host:
        raise ConfigError(f"{where}: a query string is not sent with the requests ({what})")
    if "#" in host:
        raise ConfigError(f"{where}: a fragment is not part of a server address ({what})")


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


# Locust's output options and llmload's (dest -> flag); for --csv the value is a prefix
OUTPUT_OPTIONS = {
    "csv_prefix": "--csv",
    "html_file": "--html",
    "json_file": "--json-file",
    "logfile": "--logfile",
    "records": "--records",
}


def output_file(dest: str, value: str) -> Path:
    """The file an output option names: for --csv (a prefix) its first CSV, else the value."""
    return Path(f"{value}_stats.csv") if dest == "csv_prefix" else Path(value)


def check_output_options(options: Any) -> None:
    """ConfigError for the first output option (--csv, --html, --json-file, --logfile, --records)
    whose file cannot be written; options left unset are skipped."""
    for dest, flag in OUTPUT_OPTIONS.items():
        value = getattr(options, dest, None)
        if isinstance(value, str) and value:
            check_output_file(flag, output_file(dest, value), value)


def _output_type(dest: str, flag: str) -> Any:
    def check(text: str) -> str:
        if not text:  # the default of --records (argparse converts string defaults too)
            return text
        try:
            check_output_file(flag, output_file(dest, text), text)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(f"{flag} ")) from None
        return text

    return check


def guard_output_paths(parser: Any) -> None:
    """Locust creates the folders of --csv, --html and --json-file before any plugin can look, and
    a file in the way or a folder it cannot write is its traceback (and --records fails only once
    the run began): check them while the command line is parsed (one `locust: error: argument
    --csv: ...` line, exit 2)."""
    for action in parser_actions(parser):
        if action.dest in OUTPUT_OPTIONS and action.type is None:
            action.type = _output_type(action.dest, OUTPUT_OPTIONS[action.dest])


def register_options(parser: Any) -> None:
    """Everything llmload adds to Locust's parser (`init_command_line_parser`): its options, and
    the output paths checked while parsing."""
    add_arguments(parser)
    guard_output_paths(parser)
