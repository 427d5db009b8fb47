"""The run configuration: the YAML ladder file and its schema, each key declared once.

`load_config(path)` returns a validated `SweepConfig` or raises `ConfigError` whose message is
one line naming the file, the key and what was expected. Nothing is started before the whole
file has been validated. Each key is a `setting(...)` (llmload.core.schema): its check, help,
command-line flag (with its environment variable and web UI field) and row in the docs'
configuration reference all come from that one declaration.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from llmload.core.checks import ConfigError as ConfigError  # re-exported: callers catch it here
from llmload.core.checks import (
    any_integer,
    boolean,
    expect,
    integer,
    non_empty,
    non_negative_number,
    number,
    number_list,
    one_of,
    open_unit_interval,
    optional,
    positive_number,
    ratio,
    section,
    string,
)
from llmload.core.schema import parse_section, setting, settings, shown
from llmload.core.workload.lengths import Lengths, length_flag, length_key, parse_scenario
from llmload.core.workload.prompt_files import PROMPT_FORMATS
from llmload.core.workload.reply_shapes import function_names, schema_key, tools_key

DEFAULT_PROMPT = (
    "Write a detailed technical explanation of how continuous batching and speculative decoding "
    "work together in a modern LLM inference server."
)
ENDPOINTS = ("completions", "chat", "responses")
# which request field carries the output length (`max_tokens_field`): `auto` is the endpoint's own
MAX_TOKENS_FIELDS = ("auto", "max_tokens", "max_completion_tokens")
MODES = ("concurrency", "rate", "capacity", "trace")  # users, request rates, a search, or a trace file
CAPACITY_VARIABLES = ("concurrency", "rate")  # what a capacity search varies
THINK_TIMES = ("constant", "exponential")  # sessions: the pause between a reply and the next turn
# concurrency rungs that no count or duration ends run until their agg tok/s is known to +- this
# many percent (or a cap): a held rung's end by default (docs/precision.md)
DEFAULT_PRECISION = 5.0
RUNG_END_KEYS = ("mode", "sessions", "soak", "duration", "requests_per_user", "precision")  # rung_precision's
MAX_FAN_OUT = 16  # agent sessions: the most sub-agents one turn may start (sessions.fan_out)
ARRIVALS = ("poisson", "gamma")
CONNECTION_KEEP_ALIVE, CONNECTION_CLOSE = "keep-alive", "close"
CONNECTIONS = (CONNECTION_KEEP_ALIVE, CONNECTION_CLOSE)

# How many users (streams held open at once) a run may ask for. Each stream holds a socket and
# about 60 KB in the process running it; Locust raises a process's open-file limit to 10,000, so
# 5,000 streams leave room for the process's other files and for the connections `close` opens,
# at ~300 MB. A rung may spread over 20 such processes: 100,000 streams, far more than any
# inference deployment batches at once; an absurd count is refused instead of ramping forever.
MAX_USERS_PER_PROCESS = 5_000
MAX_USERS_PER_RUNG = 100_000
USERS_CEILING = (
    f"at most {MAX_USERS_PER_RUNG} users a rung ({MAX_USERS_PER_RUNG // MAX_USERS_PER_PROCESS} "
    f"processes of {MAX_USERS_PER_PROCESS} streams: more than any server batches); "
    "for more, split the load over several llmload runs"
)


def parse_rungs(text: str) -> list[int | float]:
    """--rungs: user counts (1,4,8) or, in rate mode, request rates (0.5,2,5); the one parse of
    the flag (the sweep's, through `rungs`' setting below, and the twin's, `rungs_flag`)."""
    items = text.replace(" ", "").split(",")
    if "" in items:
        raise ConfigError(
            f"--rungs: an empty item in {text[:100]!r}; expected comma-separated numbers like 1,4,8,10"
        )
    try:
        return [float(p) if "." in p else int(p) for p in items]
    except ValueError:
        what = "comma-separated numbers like 1,4,8,10"
        raise ConfigError(f"--rungs: expected {what}, got {shown(text)}") from None


def _rungs(source: str, key: str, value: Any) -> tuple[float, ...]:
    """User counts or request rates (> 0); `_check_mode` requires integers in concurrency mode."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    expect(source, key, value, (list, tuple), "a list of user counts, e.g. [1, 4, 8, 10]")
    if not value:
        raise ConfigError(f"{source}: '{key}' is empty; give at least one user count, e.g. [1, 4, 8, 10]")
    whole = integer()
    return tuple(
        positive_number(source, f"{key}[{i}]", v) if isinstance(v, float) else whole(source, f"{key}[{i}]", v)
        for i, v in enumerate(value)
    )


def rungs_flag(text: str) -> list[int | float]:
    """A --rungs flag read outside a ladder (`llmload twin`): parsed as the sweep parses it and
    checked as the ladder's `rungs` key; ConfigError (one line naming --rungs) otherwise."""
    return list(_rungs("--rungs", "rungs", parse_rungs(text)))


def check_users(source: str, key: str, users: int) -> int:
    """`users` unless it is beyond MAX_USERS_PER_RUNG (ConfigError saying the ceiling and why)."""
    if users > MAX_USERS_PER_RUNG:
        count = str(users) if users < 10**12 else f"~10^{int(math.log10(users))}"
        raise ConfigError(f"{source}: '{key}' asks {count} users; {USERS_CEILING}")
    return users


def _user_count(source: str, key: str, value: Any) -> int:
    """A user count: an integer >= 1, within the ceiling."""
    return check_users(source, key, integer()(source, key, value))


def _status_codes(source: str, key: str, value: Any) -> tuple[int, ...]:
    what = "a list of HTTP status codes, e.g. [429, 503]"
    expect(source, key, value, (list, tuple), what)
    if not all(isinstance(s, int) and not isinstance(s, bool) and 400 <= s <= 599 for s in value):
        raise ConfigError(f"{source}: '{key}' must be {what} (400-599), got {shown(value)}")
    return tuple(value)


SLO_MS = number(0, 86_400_000, above=True)  # a latency bound, ms: at most a day


MAX_URL_CHARS = 2048
NVML = "nvml"  # gpu_metrics: the local GPUs through NVML instead of an exporter


def _gpu_metrics_url(source: str, key: str, value: Any) -> str:
    """An http(s) URL with a host (a DCGM exporter), an absolute path on the run's host, or `nvml`."""
    what = "an http(s) URL such as http://HOST:9400/metrics, a path on the host such as /gpu/metrics, or nvml"
    text = str(expect(source, key, value, (str,), what)).strip()
    if text == NVML:
        return text
    if not text or len(text) > MAX_URL_CHARS or any(ord(c) < 0x21 or c == "\x7f" for c in text):
        raise ConfigError(f"{source}: '{key}' must be {what}, got {shown(value)}")
    if text.startswith("/") and not text.startswith("//"):
        return text
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (ValueError when not a number or out of range)
    except ValueError:
        raise ConfigError(f"{source}: '{key}' must be {what}, got {shown(value)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{source}: '{key}' must be {what}, got {shown(value)}")
    return text


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Service-level objectives for goodput; a None bound is not checked."""

    ttft_ms: float | None = setting(None, help="TTFT bound, ms", check=optional(SLO_MS))
    tpot_ms: float | None = setting(None, help="TPOT bound, ms", check=optional(SLO_MS))
    e2el_ms: float | None = setting(None, help="end-to-end latency bound, ms", check=optional(SLO_MS))
    itl_ms: float | None = setting(
        None,
        help="inter-token latency bound, ms: capacity search only (pooled ITLs; not in goodput)",
        check=optional(SLO_MS),
    )


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    """Client timeouts in seconds."""

    connect: float = setting(10.0, help="TCP (and TLS) connect, s", check=positive_number)
    first_token: float = setting(
        120.0, help="the longest silence tolerated: headers, then between chunks, s", check=positive_number
    )
    total: float = setting(900.0, help="a whole request, first byte to last, s", check=positive_number)


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retries of failed requests: none unless `max` > 0. Each attempt is its own record."""

    max: int = setting(0, help="retries after the first attempt (0: none)", check=integer(0))
    on_status: tuple[int, ...] = setting(
        (429, 503), help="HTTP statuses that are retried", check=_status_codes
    )
    backoff_s: float = setting(
        1.0,
        help="wait before retry n when the server sends no Retry-After: `backoff_s * 2**(n-1)`",
        check=positive_number,
    )


@dataclass(frozen=True, slots=True)
class SoakConfig:
    """A soak run's windows and pass/fail thresholds (see llmload.analysis.soak.verdict); a None threshold
    is not checked."""

    window_s: float = setting(300.0, help="windows by request end time, s", check=positive_number)
    settle_windows: int = setting(
        1, help="first windows left out of the drift fit (ramp-up)", check=integer(0)
    )
    confidence: float = setting(0.95, help="two-sided level of the drift intervals", check=open_unit_interval)
    min_agg_tok_s: float | None = setting(
        None, help="alarm below this aggregate tok/s", check=optional(non_negative_number)
    )
    max_ttft_p99_ms: float | None = setting(
        None, help="alarm above this TTFT p99, ms", check=optional(non_negative_number)
    )
    max_tpot_p99_ms: float | None = setting(
        None, help="alarm above this TPOT p99, ms", check=optional(non_negative_number)
    )
    max_failure_ratio: float | None = setting(
        None, help="alarm above this share of failed requests", check=optional(ratio())
    )
    max_tok_s_drift_pct_per_h: float | None = setting(
        None, help="alarm when tok/s falls faster than this, %/h", check=optional(non_negative_number)
    )
    max_ttft_drift_pct_per_h: float | None = setting(
        None, help="alarm when TTFT grows faster than this, %/h", check=optional(non_negative_number)
    )


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """Token reconciliation limits (llmload.analysis.run.reconcile): a rung beyond one fails the run."""

    max_stopped_early_ratio: float = setting(
        0.0, help="of completed requests stopped before max_tokens (checked with ignore_eos)", check=ratio()
    )
    max_disagree_ratio: float = setting(
        0.0, help="of requests whose usage, chunks, max_tokens and finish_reason disagree", check=ratio()
    )


# --- capacity search and greedy-determinism check (llmload.analysis.capacity / .determinism) ---
def _open_percent(source: str, key: str, value: Any) -> float:
    expect(source, key, value, (int, float), "a number in (0, 100)")
    if not 0 < value < 100:
        raise ConfigError(f"{source}: '{key}' must be a number in (0, 100), got {shown(value)}")
    return float(value)


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """`mode: capacity`: search the largest concurrency (or request rate) meeting every `slo` bound
    at `percentile`."""

    variable: str = setting(
        "concurrency",
        help="`concurrency` (closed-loop users) or `rate` (open-loop requests/s, `max_concurrency` slots)",
        check=one_of(CAPACITY_VARIABLES),
    )

    percentile: float = setting(90.0, help="the percentile the SLOs apply to", check=_open_percent)
    confidence: float = setting(
        0.95, help="two-sided level of each probe's confidence intervals", check=open_unit_interval
    )
    max_failure_ratio: float = setting(
        0.0, help="failed / sent requests a passing probe may have", check=ratio(below_one=True)
    )
    start: float = setting(
        1, help="first concurrency (an integer), or request rate (requests/s), probed", check=positive_number
    )
    max_users: int = setting(
        256, help=f"highest concurrency probed (at most {MAX_USERS_PER_RUNG})", check=_user_count
    )
    max_rate: float = setting(
        1000.0, help="`variable: rate`: highest rate probed, requests/s", check=positive_number
    )
    rate_resolution: float = setting(
        0.05,
        help="`variable: rate`: bisection stops when smallest failing / largest passing rate <= 1 + this",
        check=positive_number,
    )
    requests: int = setting(
        40,
        help="requests of a new probe (concurrency: at least one per user; p90 needs 36 to bound)",
        check=integer(),
    )
    max_requests: int = setting(
        400, help="an undecided probe is extended up to this many requests", check=integer()
    )
    max_probes: int = setting(
        20, help="concurrencies or rates tried (extensions not counted)", check=integer()
    )
    max_duration_s: float = setting(
        1800.0, help="no new probe starts after this long, s", check=positive_number
    )


def _check_capacity_and_determinism(config: SweepConfig) -> None:
    source, cap = config.source, config.capacity
    top, top_key = (cap.max_rate, "max_rate") if cap.variable == "rate" else (cap.max_users, "max_users")
    if cap.max_requests < cap.requests or top < cap.start:
        raise ConfigError(
            f"{source}: 'capacity.max_requests' must be >= 'capacity.requests' and "
            f"'capacity.{top_key}' >= 'capacity.start'"
        )
    if cap.variable == "concurrency" and cap.start != int(cap.start):
        raise ConfigError(f"{source}: 'capacity.start' must be a whole user count, got {shown(cap.start)}")
    if config.mode == "capacity" and config.duration is not None:
        raise ConfigError(
            f"{source}: 'mode: capacity' sizes probes by 'capacity.requests'; remove 'duration'"
        )
    if config.mode == "capacity" and not any(dataclasses.astuple(config.slo)):
        raise ConfigError(
            f"{source}: 'mode: capacity' needs a bound in 'slo' (ttft_ms, tpot_ms, itl_ms or e2el_ms)"
        )
    if config.check_determinism and (config.temperature != 0 or config.unique_prompts):
        # an explicit `true`; None (the default) turns the check on only where it can work
        raise ConfigError(
            f"{source}: 'check_determinism' needs 'temperature: 0' and the same prompts at every rung "
            "('unique_prompts: false')"
        )
    if config.check_determinism and config.mode != "concurrency":
        raise ConfigError(
            f"{source}: 'check_determinism' runs its probes at each rung's concurrency: it needs "
            "'mode: concurrency' (set 'check_determinism: false')"
        )


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Multi-turn sessions: each user plays conversations whose every turn resends the history."""

    turns: int = setting(
        4,
        help="requests per session; turn k resends turns 1..k-1 and their replies, plus a new message",
        check=integer(),
    )
    per_user: int = setting(
        1,
        help="sessions each user plays per count-based rung (time-based: until the deadline)",
        check=integer(),
    )
    user_tokens: int = setting(64, help="tokens of each new user message (synthetic)", check=integer())
    system_tokens: int = setting(
        0, help="tokens of a system message unique to the session, sent with every turn", check=integer(0)
    )
    think_time_s: float = setting(
        0.0, help="mean pause between a reply and the next turn, s", check=non_negative_number
    )
    think_time: str = setting(
        "constant", help="`constant`, or `exponential` with mean think_time_s", check=one_of(THINK_TIMES)
    )
    agent: bool = setting(
        False,
        help="agent sessions: a reply with tool calls is answered with tool results, and the session "
        "runs until a reply without tool calls (or `turns`); needs `tools` (docs/sessions.md)",
        check=boolean,
    )
    tool_latency_s: float = setting(
        0.0, help="agent sessions: mean tool latency, s", check=non_negative_number
    )
    tool_latency: str = setting(
        "constant", help="`constant`, or `exponential` with mean tool_latency_s", check=one_of(THINK_TIMES)
    )
    tool_result_tokens: int | Lengths = setting(
        64,
        help="agent sessions: tokens of each tool result (synthetic): a number, or a length "
        "distribution drawn per result",
        check=length_key,
    )
    fan_out: int | None = setting(
        None,
        help=f"agent sessions: sub-agent sessions (1 to {MAX_FAN_OUT}) a tool-call reply at "
        "`fan_out_turn` starts at once; their answers return as its one tool result (null: none)",
        check=optional(integer(1, MAX_FAN_OUT)),
    )
    fan_out_turn: int = setting(
        1, help="agent sessions with fan_out: the turn whose tool-call reply fans out", check=integer()
    )
    sub_agent_turns: int = setting(
        4, help="agent sessions with fan_out: each sub-agent's turn limit", check=integer()
    )


def _check_trace_and_sessions(config: SweepConfig) -> None:
    """Trace replay and sessions: which other keys they need or exclude."""
    source = config.source
    if (config.mode == "trace") != (config.trace_file is not None):
        raise ConfigError(f"{source}: 'mode: trace' and 'trace_file' go together")
    if config.mode == "trace" and (config.prompt_tokens is not None or config.prompt_file is not None):
        raise ConfigError(f"{source}: 'mode: trace' takes its prompts from 'trace_file', not 'prompt_*'")
    if config.sessions is not None:
        if config.mode != "concurrency":
            raise ConfigError(f"{source}: 'sessions' run in 'mode: concurrency' (users play sessions)")
        if config.endpoint not in ("chat", "responses") or not config.stream:
            raise ConfigError(
                f"{source}: 'sessions' need 'endpoint: chat' (or 'responses') and 'stream: true'"
            )
        _check_agent_sessions(config, config.sessions)


_AGENT_KEYS = (  # SessionConfig's keys that only agent sessions read
    "tool_latency_s",
    "tool_latency",
    "tool_result_tokens",
    "fan_out",
    "fan_out_turn",
    "sub_agent_turns",
)


def _check_agent_sessions(config: SweepConfig, sessions: SessionConfig) -> None:
    """Agent sessions: tools that may be called, no user think time, a fan-out turn a tool call
    can reach; the agent keys only with `agent: true`."""
    source, defaults = config.source, SessionConfig()
    if not sessions.agent:
        for key in _AGENT_KEYS:
            if getattr(sessions, key) != getattr(defaults, key):
                raise ConfigError(f"{source}: 'sessions.{key}' needs 'sessions.agent: true'")
        return
    if config.tools is None or config.tool_choice == "none":
        raise ConfigError(
            f"{source}: 'sessions.agent' needs 'tools' the model may call (not 'tool_choice: none')"
        )
    if sessions.think_time_s:
        raise ConfigError(
            f"{source}: 'sessions.think_time_s' is a user's pause; an agent session's turns follow "
            "tools ('sessions.tool_latency_s')"
        )
    if sessions.fan_out is not None and sessions.fan_out_turn >= sessions.turns:
        raise ConfigError(
            f"{source}: 'sessions.fan_out_turn' ({sessions.fan_out_turn}) must be below 'sessions.turns' "
            f"({sessions.turns}): the last turn's tool calls are never answered"
        )


RESPONSE_FORMATS = ("json_object", "json_schema")
TOOL_CHOICES = ("auto", "none", "required")


def _check_reply_shape(config: SweepConfig) -> None:
    """Tools and formats: on chat or the Responses API, tool_choice among the tools, a schema with
    json_schema and only then."""
    source, keys = config.source, []
    if config.tools is not None:
        keys.append("tools")
    if config.response_format is not None:
        keys.append("response_format")
    if keys and config.endpoint == "completions":
        raise ConfigError(f"{source}: '{keys[0]}' needs 'endpoint: chat' (or 'responses')")
    for key in ("tool_choice", "parallel_tool_calls"):
        if getattr(config, key) is not None and config.tools is None:
            raise ConfigError(f"{source}: '{key}' needs 'tools'")
    names = function_names(config.tools or ())
    if config.tool_choice is not None and config.tool_choice not in (*TOOL_CHOICES, *names):
        raise ConfigError(
            f"{source}: 'tool_choice': expected {', '.join(TOOL_CHOICES)} or a tool's name "
            f"({', '.join(names)}), got {shown(config.tool_choice)}"
        )
    if (config.response_format == "json_schema") != (config.response_schema is not None):
        raise ConfigError(f"{source}: 'response_format: json_schema' and 'response_schema' go together")


def _check_endpoint(config: SweepConfig) -> None:
    """What the endpoint allows: the Responses API is read as a stream; `max_completion_tokens`
    is a chat field, and the Responses API has its own (`max_output_tokens`)."""
    source = config.source
    if config.endpoint == "responses" and not config.stream:
        raise ConfigError(
            f"{source}: 'endpoint: responses' needs 'stream: true' (llmload reads the Responses API's events)"
        )
    field = config.max_tokens_field
    if field == "max_completion_tokens" and config.endpoint != "chat":
        raise ConfigError(
            f"{source}: 'max_tokens_field: max_completion_tokens' is a chat field; "
            f"'endpoint: {config.endpoint}' sends "
            + ("max_output_tokens" if config.endpoint == "responses" else "max_tokens")
        )
    if field == "max_tokens" and config.endpoint == "responses":
        raise ConfigError(
            f"{source}: 'endpoint: responses' sends max_output_tokens; leave 'max_tokens_field' at auto"
        )


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """One run: the ladder and the request every user sends. Every key is declared once here
    (`llmload.core.schema`): its check, help, command-line flag and docs row follow."""

    rungs: tuple[float, ...] = setting(
        (1, 4, 8, 10),
        help=(
            "the ladder: users per rung (concurrency), or requests/s with `mode: rate`; a rung may repeat; "
            f"at most {MAX_USERS_PER_RUNG} users a rung, {MAX_USERS_PER_PROCESS} a Locust process "
            "(docs/errors-and-exit-codes.md)"
        ),
        check=_rungs,
        flag="--rungs",
        parse=parse_rungs,
    )
    mode: str = setting(
        "concurrency",
        help="`concurrency` (rungs are users), `rate` (rungs are requests/s) or `capacity` (a search)",
        check=one_of(MODES),
    )
    max_concurrency: int = setting(
        64,
        help=(
            "rate mode: client slots (users) per rung; a due request waits for one "
            f"(at most {MAX_USERS_PER_RUNG})"
        ),
        check=_user_count,
    )
    arrival: str = setting(
        "poisson",
        help="rate mode: `poisson`, or `gamma` with `burstiness` as its shape",
        check=one_of(ARRIVALS),
    )
    burstiness: float = setting(1.0, help="rate mode, gamma arrivals: the shape", check=positive_number)
    requests_per_rung: int | None = setting(
        None, help="rate mode: requests per rung (else `duration`)", check=optional(integer())
    )
    seed: int = setting(0, help="arrival schedules and prompt sampling", check=any_integer)
    requests_per_user: int | None = setting(
        None,
        help="count-based rungs: requests each user sends per rung (null: rungs hold their users until "
        "`precision` or its caps end them, docs/precision.md)",
        check=optional(integer(1, 1_000_000)),
        flag="--requests-per-user",
        parse=int,
    )
    duration: float | None = setting(
        None,
        help="seconds per rung: users send requests until it is over, then finish what is in flight "
        "(at most 30 days)",
        check=optional(number(0, 30 * 86_400, above=True)),
        flag="--rung-duration",
        parse=float,
    )
    precision: float | None = setting(
        None,
        help="concurrency mode: each rung holds its users until the 95-percent interval of its agg tok/s "
        "is within +- this many percent (docs/precision.md), or a cap (precision_max_s, "
        f"precision_max_requests); null: {DEFAULT_PRECISION:g} unless `requests_per_user` or `duration` "
        "ends the rungs",
        check=optional(number(0, 100, above=True)),
        flag="--precision",
        parse=float,
    )
    precision_ttft: bool = setting(
        False, help="with `precision`: the interval of TTFT p50 must be within it too", check=boolean
    )
    precision_max_s: float = setting(
        120.0,
        help="held rungs: seconds a rung may run at most (then it ends with the precision it reached)",
        check=number(0, 30 * 86_400, above=True),
    )
    precision_max_requests: int = setting(
        2000,
        help="held rungs: completed requests after which a rung ends at most (its users finish "
        "what is in flight)",
        check=integer(1, 10_000_000),
    )
    warmup_requests: int = setting(
        1,
        help="requests per user at the first rung's concurrency before the ladder, left out of every figure",
        check=integer(0, 1_000_000),
        flag="--warmup-requests",
        parse=int,
    )
    spawn_rate: float = setting(
        100.0,
        help="Locust's spawn rate (users of a rung start together anyway); Locust warns above 100",
        check=positive_number,
    )
    endpoint: str = setting(
        "completions",
        help="`completions` (/v1/completions), `chat` (/v1/chat/completions) or `responses` "
        "(/v1/responses, streamed: docs/reasoning.md)",
        check=one_of(ENDPOINTS),
        flag="--endpoint",
        choices=ENDPOINTS,
    )
    model: str | None = setting(
        None,
        help="model name; null: the first listed by GET /v1/models",
        check=optional(string),
        flag="--model",
    )
    max_tokens: int | Lengths = setting(
        256,
        help="output tokens per request (chat also sends max_completion_tokens): a number, or a "
        "length distribution drawn per request (docs/rate-and-workloads.md#length-distributions)",
        check=length_key,
        flag="--max-tokens",
        parse=length_flag,
    )
    max_tokens_field: str = setting(
        "auto",
        help="the request field of max_tokens: `auto` (completions: max_tokens; chat: max_tokens and "
        "max_completion_tokens; responses: max_output_tokens), `max_tokens`, or `max_completion_tokens` "
        "(chat: OpenAI's reasoning models refuse max_tokens)",
        check=one_of(MAX_TOKENS_FIELDS),
        flag="--max-tokens-field",
        choices=MAX_TOKENS_FIELDS,
    )
    ignore_eos: bool = setting(
        True, help="ask the server to decode exactly max_tokens (vLLM, SGLang, llama.cpp)", check=boolean
    )
    stream: bool = setting(
        True,
        help="SSE streaming with include_usage; false: one JSON body (no TTFT)",
        check=boolean,
        flag="--stream",
        parse=lambda text: text == "true",
        choices=("true", "false"),
    )
    temperature: float = setting(0.0, help="0: greedy", check=non_negative_number)
    prompt: str = setting(
        DEFAULT_PROMPT,
        help="the prompt of every request (without prompt_tokens / prompt_file)",
        check=non_empty("a non-empty string"),
        shown_default="a fixed technical question",
    )
    unique_prompts: bool = setting(
        False,
        help="a random tag per request (after any shared prefix): no prompt is ever sent twice, "
        "not even by a rerun with the same seed",
        check=boolean,
    )
    distinct_prompts: bool = setting(
        True,
        help="every request of a run gets a prompt of its own (a tag from the seed after any shared "
        "prefix): a prefix cache serves only the shared prefix; false: `prompt` as written and the "
        "pool's prompts repeat",
        check=boolean,
    )
    prompt_tokens: int | Lengths | None = setting(
        None,
        help="synthetic prompts of this many input tokens: a number, or a length distribution drawn "
        "per request",
        check=optional(length_key),
        flag="--prompt-tokens",
        parse=length_flag,
    )
    scenario: str | None = setting(
        None,
        help='genai-bench shorthand for prompt_tokens and max_tokens: "N(480,240)/(300,150)", '
        '"U(50,100)/(50,100)" or "D(100,1000)"',
        check=optional(lambda source, key, value: parse_scenario(source, key, value) and value),
        flag="--scenario",
    )
    shared_prefix_ratio: float = setting(
        0.0, help="share of each synthetic prompt common to all requests", check=ratio(below_one=True)
    )
    prompt_file: str | None = setting(
        None,
        help="prompts from a text, JSONL or ShareGPT file (relative to the config file)",
        check=optional(non_empty("a file path")),
    )
    prompt_format: str = setting(
        "auto", help="`auto`, `lines`, `jsonl` or `sharegpt`", check=one_of(PROMPT_FORMATS)
    )
    gpu_metrics: str | None = setting(
        None,
        help="a DCGM exporter's Prometheus URL (e.g. http://gpu-host:9400/metrics), a path on the "
        "host, or `nvml` (this machine's GPUs, llmload[nvml]), read during the run for GPU power, "
        "energy and tokens per joule (docs/gpu.md)",
        check=optional(_gpu_metrics_url),
        flag="--gpu-metrics",
    )
    continuous_usage: bool | None = setting(
        None,
        help="ask for usage on every chunk (vLLM continuous_usage_stats); null: where the server "
        "honours it (probed before the run)",
        check=optional(boolean),
    )
    percentiles: tuple[float, ...] = setting(
        (50.0, 90.0, 99.0),
        help="percentiles of the latency tables",
        check=number_list("a list of numbers in (0, 100]", lambda p: 0 < p <= 100, "(0, 100]"),
    )
    slo: SloConfig = setting(
        default_factory=SloConfig,
        help="goodput SLOs (a request is good when it meets all)",
        check=section(SloConfig),
    )
    timeouts: TimeoutConfig = setting(
        default_factory=TimeoutConfig, help="client timeouts", check=section(TimeoutConfig)
    )
    retries: RetryConfig = setting(
        default_factory=RetryConfig,
        help="retries of failed requests",
        check=section(RetryConfig, "a mapping with max, on_status, backoff_s"),
    )
    soak: SoakConfig | None = setting(
        None,
        help="a soak run: one time-based rung judged by windows and thresholds",
        check=optional(section(SoakConfig)),
    )
    reconcile: ReconcileConfig = setting(
        default_factory=ReconcileConfig,
        help="token reconciliation thresholds (exit code 3 beyond them)",
        check=section(ReconcileConfig),
    )
    connection: str = setting(
        CONNECTION_KEEP_ALIVE,
        help="`keep-alive`: one pooled connection per user, reused; `close`: a new connection per request",
        check=one_of(CONNECTIONS),
        flag="--connection",
        choices=CONNECTIONS,
    )
    input_tolerance: float = setting(
        0.02,
        help="a rung whose mean input tokens miss `prompt_tokens` by more than this share fails the run",
        check=ratio(),
    )
    # capacity search and greedy-determinism check (llmload.analysis.capacity / .determinism)
    capacity: CapacityConfig = setting(
        default_factory=CapacityConfig,
        help="`mode: capacity`: the search (docs/capacity.md)",
        check=section(CapacityConfig),
    )
    check_determinism: bool | None = setting(
        None,
        help="probe each rung (one request a user, on prompts of the check's own) and compare their "
        "greedy texts across rungs; false: no text hashes either (`llmload compare` cannot match)",
        check=optional(boolean),
    )
    record_text: bool = setting(False, help="keep each request's generated text in its record", check=boolean)
    stop_on_fall: bool = setting(
        True,
        help="a concurrency ladder stops early when its agg tok/s falls over consecutive rungs "
        "(over-saturation: llmload.analysis.knee.falling); false: run every rung",
        check=boolean,
    )
    # trace replay and multi-turn sessions (llmload.loadgen.workload.trace, llmload.loadgen.workload.sessions)
    trace_file: str | None = setting(
        None,
        help="`mode: trace`: a Mooncake JSONL or CSV trace, AIPerf's multi-turn or DAG trace, or a Weka "
        "agentic trace (docs/traces.md; relative to the config file)",
        check=optional(non_empty("a file path")),
    )
    speed: float = setting(
        1.0, help="`mode: trace`: replay speed factor (2 = twice as fast)", check=positive_number
    )
    start_s: float = setting(
        0.0,
        help="`mode: trace`: window start, seconds after the trace's first line",
        check=non_negative_number,
    )
    duration_s: float | None = setting(
        None,
        help="`mode: trace`: window length in trace seconds (null: to the end)",
        check=optional(positive_number),
    )
    sessions: SessionConfig | None = setting(
        None,
        help="multi-turn chat sessions instead of single requests (docs/sessions.md)",
        check=optional(section(SessionConfig)),
    )
    tools: tuple[dict[str, Any], ...] | None = setting(
        None,
        help="function tools every request offers (chat, responses): a JSON/YAML file of OpenAI "
        "function tools, or a built-in set (weather, coding) (docs/agent-traffic.md)",
        check=optional(tools_key),
        shown_default="null",
    )
    tool_choice: str | None = setting(
        None,
        help="with tools: auto, none, required, or the name of one of the tools; null: not sent "
        "(the server's default, auto)",
        check=optional(string),
    )
    parallel_tool_calls: bool | None = setting(
        None,
        help="with tools: whether the model may call several at once; null: not sent",
        check=optional(boolean),
    )
    response_format: str | None = setting(
        None,
        help="structured output (chat, responses): json_object, or json_schema with response_schema",
        check=optional(one_of(RESPONSE_FORMATS)),
    )
    response_schema: dict[str, Any] | None = setting(
        None,
        help="`response_format: json_schema`: a JSON/YAML file holding the JSON Schema",
        check=optional(schema_key),
        shown_default="null",
    )
    source: str = "<defaults>"

    @property
    def structured(self) -> bool:
        """Whether its requests ask for tool calls or structured output: such replies stop on their
        own, so they are sent without ignore_eos and max_tokens is a cap."""
        return self.tools is not None or self.response_format is not None

    @property
    def rate_mode(self) -> bool:
        return self.mode == "rate"

    @property
    def rung_precision(self) -> float | None:
        """The precision (+- %) a rung of this run runs to (docs/precision.md): `precision` as asked;
        else the default for concurrency rungs of single requests that neither `requests_per_user`
        (count-based rungs) nor `duration` ends; None when something else ends the rungs."""
        if self.precision is not None:
            return self.precision
        held = self.requests_per_user is None and self.duration is None and self.soak is None
        return DEFAULT_PRECISION if held and self.mode == "concurrency" and self.sessions is None else None

    @property
    def per_user(self) -> int:
        """Requests a user sends in a count-based stage: `requests_per_user`, 1 when not given
        (a held rung's quota is its end, not a count)."""
        return self.requests_per_user or 1

    @property
    def most_users(self) -> int:
        """The most users any stage of the run holds at once (rate slots, a search's top, a rung)."""
        if self.mode in ("rate", "trace") or (self.mode == "capacity" and self.capacity.variable == "rate"):
            return self.max_concurrency
        if self.mode == "capacity":
            return self.capacity.max_users
        return int(max(self.rungs))

    @property
    def tagged_prompts(self) -> bool:
        """Whether every prompt carries a tag of its request (`unique_prompts` or `distinct_prompts`)."""
        return self.unique_prompts or self.distinct_prompts

    @property
    def determinism(self) -> bool:
        """Whether the greedy-determinism check runs (`check_determinism: true`: its probes cost one
        request per user at every rung, so it runs on request)."""
        return bool(self.check_determinism)

    @property
    def hash_texts(self) -> bool:
        """Whether the records keep prompt and text hashes: at temperature 0 without unique prompts,
        where a greedy text is a function of its prompt (the determinism check, `llmload compare`)."""
        return self.temperature == 0 and not self.unique_prompts and self.check_determinism is not False

    def with_overrides(self, source: str | None = None, **overrides: Any) -> SweepConfig:
        """A copy with the given fields replaced (None values are ignored), re-validated; errors
        name `source` (default: this config's source, "with command-line overrides")."""
        changed = {k: v for k, v in overrides.items() if v is not None}
        if not changed:
            return self
        raw = {f.name: getattr(self, f.name) for f, _ in settings(SweepConfig)}
        for name, value in raw.items():
            if dataclasses.is_dataclass(value) and not isinstance(value, type | Lengths):  # a section
                raw[name] = section_data(value, lambda lengths: lengths)  # re-validated as they are
        if "scenario" in changed:  # a new scenario sets both lengths, over the file's
            raw.pop("prompt_tokens"), raw.pop("max_tokens")
        elif {"prompt_tokens", "max_tokens"} & changed.keys():  # a length flag over the file's scenario
            raw["scenario"] = None
        raw.update(changed)
        return parse_config(raw, source=source or f"{self.source} (with command-line overrides)")


def section_data(section: Any, lengths: Callable[[Lengths], Any]) -> dict[str, Any]:
    """A configuration section as plain data (`dataclasses.asdict`), each length distribution
    among its keys as `lengths` gives it (asdict would make a mapping no check reads back)."""
    data = dataclasses.asdict(section)
    for f in dataclasses.fields(section):
        if isinstance(value := getattr(section, f.name), Lengths):
            data[f.name] = lengths(value)
    return data


def _check_mode(config: SweepConfig) -> None:
    """Rules that tie several keys together (rate mode, workloads, soak)."""
    source = config.source
    _check_trace_and_sessions(config)
    _check_endpoint(config)
    _check_reply_shape(config)
    _check_precision(config)
    if config.soak is not None and (config.duration is None or len(config.rungs) != 1):
        raise ConfigError(f"{source}: 'soak' needs one time-based rung: set 'rungs: [N]' and 'duration'")
    if config.mode in ("concurrency", "capacity"):
        for i, v in enumerate(config.rungs):
            if not isinstance(v, int):
                raise ConfigError(
                    f"{source}: 'rungs[{i}]' must be an integer user count, got {shown(v)} "
                    "(request rates need 'mode: rate')"
                )
            check_users(source, f"rungs[{i}]", v)
    elif config.rate_mode and config.requests_per_rung is None and config.duration is None:
        raise ConfigError(f"{source}: 'mode: rate' needs 'requests_per_rung' or 'duration' per rung")
    if config.arrival == "poisson" and config.burstiness != 1.0:
        raise ConfigError(f"{source}: 'burstiness' applies to 'arrival: gamma' (poisson is burstiness 1)")
    if config.prompt_tokens is not None and config.prompt_file is not None:
        raise ConfigError(
            f"{source}: 'prompt_tokens' (synthetic prompts) and 'prompt_file' exclude each other"
        )
    if config.shared_prefix_ratio and config.prompt_tokens is None:
        raise ConfigError(
            f"{source}: 'shared_prefix_ratio' applies to synthetic prompts: set 'prompt_tokens'"
        )


def _check_precision(config: SweepConfig) -> None:
    """`precision` ends concurrency rungs of single requests, by its own caps."""
    if config.precision is None:
        return
    if config.mode != "concurrency" or config.sessions is not None:
        raise ConfigError(
            f"{config.source}: 'precision' applies to concurrency rungs of single requests "
            "('mode: concurrency', no 'sessions')"
        )
    if config.duration is not None:
        raise ConfigError(
            f"{config.source}: 'precision' ends each rung itself: its time cap is 'precision_max_s', "
            "not 'duration'"
        )
    if config.requests_per_user is not None:
        raise ConfigError(
            f"{config.source}: 'precision' ends each rung itself: its cap of requests is "
            "'precision_max_requests', not 'requests_per_user' (which makes count-based rungs)"
        )


def _apply_scenario(config: SweepConfig, raw: dict[str, Any]) -> SweepConfig:
    """A `scenario` sets prompt_tokens and max_tokens; a different value of either is an error
    (the same value is a configuration re-validated with overrides)."""
    if config.scenario is None:
        return config
    ins, outs = parse_scenario(config.source, "scenario", config.scenario)
    prompt_tokens, max_tokens = ins.fixed or ins, outs.fixed or outs
    for key, value in (("prompt_tokens", prompt_tokens), ("max_tokens", max_tokens)):
        if raw.get(key) is not None and getattr(config, key) != value:
            raise ConfigError(f"{config.source}: 'scenario' sets '{key}': leave '{key}' out")
    return dataclasses.replace(config, prompt_tokens=prompt_tokens, max_tokens=max_tokens)


def _replies_of_prompt_file(raw: dict[str, Any]) -> dict[str, Any]:
    """`{dist: empirical, replies: true}` (a length key: the replies of the run's prompt file) as
    `replies: <prompt_file>` in the prompt file's `prompt_format`, so the length key's own check
    reads them (relative to the config file, as prompt_file is). Without a prompt_file it stays
    true, for that check to refuse naming the key."""
    prompt_file, fmt = raw.get("prompt_file"), raw.get("prompt_format", "auto")
    out = raw
    for key in ("prompt_tokens", "max_tokens"):
        value = raw.get(key)
        if isinstance(value, dict) and value.get("replies") is True and isinstance(prompt_file, str):
            named = {"replies": prompt_file} | ({"format": fmt} if fmt in PROMPT_FORMATS else {})
            out = out | {key: named | value | {"replies": prompt_file}}  # a format given stays
    return out


def parse_config(raw: Any, source: str) -> SweepConfig:
    """Validate a mapping (as read from YAML) into a SweepConfig."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    raw = _replies_of_prompt_file(raw)
    config = SweepConfig(**parse_section(SweepConfig, raw, source, error=ConfigError), source=source)
    config = _apply_scenario(config, raw)
    _check_mode(config)
    _check_capacity_and_determinism(config)
    return config


# --- bad input: YAML that would silently mean something else, or never finish, is an error -------
# A ladder is a few hundred bytes (the shipped ones are under 2 KB) and a few dozen values. PyYAML
# (pure Python: libyaml's loader cannot be extended) reads about 1 MB a second at worst, so these
# bounds keep any file's check well under a second while leaving room a hundred times over, e.g.
# for a long inline `prompt` (256 KiB is some 60,000 tokens; longer prompts go in `prompt_file`,
# read by its own reader). Values are counted with each alias as the values it repeats: nested
# aliases ("billion laughs") expand to billions of values that every later walk would visit.
MAX_LADDER_BYTES = 256 * 1024
MAX_YAML_VALUES = 10_000


class _TooLarge(yaml.YAMLError):
    """The document is beyond MAX_YAML_VALUES, or an alias contains itself (`problem` says which)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last), and
    a document of more than MAX_YAML_VALUES values once its aliases are expanded (counted while
    composing, so a dense or aliased file stops at the limit instead of being read to its end)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._values = 0  # the document's values so far, aliases expanded
        self._sizes: dict[int, int] = {}  # id(node) -> its values, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node = super().compose_node(parent, index)
        if node is None:
            return None
        if isinstance(event, yaml.AliasEvent):
            size = self._sizes.get(id(node))
            if size is None:  # the anchored node is still being composed: it holds its own alias
                raise _TooLarge(f"alias *{event.anchor} is used inside its own anchor", event.start_mark)
        else:
            size = 1 + sum(self._sizes[id(child)] for child in self._children(node))
            self._sizes[id(node)] = size
            size = 1  # its children were counted as they were composed
        self._values += size
        if self._values > MAX_YAML_VALUES:
            raise _TooLarge(
                f"more than {MAX_YAML_VALUES} values, each alias counted as the values it repeats "
                "(a ladder holds a few dozen)",
                event.start_mark,
            )
        return node

    @staticmethod
    def _children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader's own error names it
                continue
            if earlier is not key_node:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {shown(key)} (first given on line {earlier.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path, text: str) -> Any:
    """The YAML document of a config file; ConfigError for a syntax error, a duplicate key, a value
    YAML cannot build (e.g. the date 2024-02-30), or a file without any key."""
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        kind = "" if isinstance(e, _TooLarge) else " YAML syntax error:"
        raise ConfigError(f"{path}:{where}:{kind} {problem}") from None
    except (ValueError, OverflowError, RecursionError) as e:
        raise ConfigError(f"{path}: YAML value cannot be read: {str(e)[:200]}") from None
    if raw is None:
        raise ConfigError(f"{path}: the file holds no keys (an empty file is not the built-in ladder)")
    return raw


def _read_text(path: Path) -> str:
    """The file's text, read no further than MAX_LADDER_BYTES (a device or a pipe has no size)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_LADDER_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e}") from None
    if len(data) > MAX_LADDER_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_LADDER_BYTES // 1024} KiB, the most a ladder file may be "
            "(a ladder is a few KB; long prompts go in 'prompt_file')"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: cannot read config file: {e}") from None


@functools.lru_cache(maxsize=4)
def _parsed(source: str, text: str) -> SweepConfig:
    """The config of a file's text: a process that checks its ladder and then runs it (Locust's
    init, then the first tick) reads the file each time but parses it once."""
    return parse_config(_read_yaml(Path(source), text), source=source)


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a YAML ladder file."""
    path = Path(path)
    config = _parsed(str(path), _read_text(path))
    if config.prompt_file and not Path(config.prompt_file).is_absolute():
        # relative to the config file, so a config and its prompt file travel together
        config = dataclasses.replace(config, prompt_file=str(path.parent.resolve() / config.prompt_file))
    if config.trace_file and not Path(config.trace_file).is_absolute():  # the same for a trace
        config = dataclasses.replace(config, trace_file=str(path.parent.resolve() / config.trace_file))
    return config
