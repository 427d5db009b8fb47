"""The run configuration: the YAML ladder file, its schema, validation and command-line overrides.

`load_config(path)` returns a validated `SweepConfig` or raises `ConfigError` whose message is
one line naming the file, the key and what was expected. Nothing is started before the whole
file has been validated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROMPT = (
    "Write a detailed technical explanation of how continuous batching and speculative decoding "
    "work together in a modern LLM inference server."
)
ENDPOINTS = ("completions", "chat")
MODES = ("concurrency", "rate", "trace")  # rungs are user counts, request rates, or a trace file
ARRIVALS = ("poisson", "gamma")
PROMPT_FORMATS = ("auto", "lines", "jsonl", "sharegpt")


class ConfigError(ValueError):
    """A configuration mistake; the message is one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Service-level objectives for goodput; a None bound is not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    """Client timeouts in seconds."""

    connect: float = 10.0  # TCP connect
    first_token: float = 120.0  # headers and each later read: the longest silence tolerated
    total: float = 900.0  # a whole request, first byte to last


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retries of failed requests: none unless `max` > 0. Each attempt is its own record."""

    max: int = 0  # retries after the first attempt
    on_status: tuple[int, ...] = (429, 503)  # HTTP statuses that are retried
    backoff_s: float = 1.0  # wait before retry n when the server sends no Retry-After: backoff_s * 2**(n-1)


@dataclass(frozen=True, slots=True)
class SoakConfig:
    """A soak run's windows and pass/fail thresholds (see llmload.analysis.soak); a None threshold
    is not checked."""

    window_s: float = 300.0  # windows by request end time
    settle_windows: int = 1  # first windows left out of the drift fit (ramp-up)
    confidence: float = 0.95  # two-sided level of the drift confidence intervals
    min_agg_tok_s: float | None = None
    max_ttft_p99_ms: float | None = None
    max_tpot_p99_ms: float | None = None
    max_failure_ratio: float | None = None
    max_tok_s_drift_pct_per_h: float | None = None  # alarm when tok/s falls faster than this
    max_ttft_drift_pct_per_h: float | None = None  # alarm when TTFT grows faster than this


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """Token reconciliation limits (llmload.analysis.reconcile): a rung beyond one fails the run."""

    max_stopped_early_ratio: float = 0.0  # of completed requests; checked only with ignore_eos
    max_disagree_ratio: float = 0.0  # usage vs chunks vs max_tokens vs finish_reason


# trace replay and multi-turn sessions (issue 16): llmload.loadgen.trace, llmload.loadgen.sessions
THINK_TIMES = ("constant", "exponential")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Multi-turn sessions: each user plays conversations whose every turn resends the history."""

    turns: int = 4  # requests per session; turn k sends turns 1..k-1 and their replies, plus a new message
    per_user: int = 1  # sessions each user plays per count-based rung (time-based: until the deadline)
    user_tokens: int = 64  # tokens of each new user message (synthetic)
    system_tokens: int = 0  # tokens of a system message unique to the session (sent with every turn)
    think_time_s: float = 0.0  # mean pause between a reply and the next turn
    think_time: str = "constant"  # constant | exponential (mean think_time_s)


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """One run: the ladder and the request every user sends."""

    rungs: tuple[float, ...] = (1, 4, 8, 10)  # users (integers), or requests/s in rate mode
    mode: str = "concurrency"
    max_concurrency: int = 64  # rate mode: client slots (users) per rung; a due request waits for one
    arrival: str = "poisson"  # rate mode: poisson, or gamma with `burstiness` as its shape
    burstiness: float = 1.0
    requests_per_rung: int | None = None  # rate mode: requests per rung (else `duration`)
    seed: int = 0  # arrival schedules and workload sampling
    requests_per_user: int = 1
    duration: float | None = None  # seconds per rung; None = count-based rungs
    warmup_requests: int = 1  # per user, at the first rung's concurrency, excluded from results
    spawn_rate: float = 1000.0
    endpoint: str = "completions"
    model: str | None = None  # None: the first model listed by GET /v1/models
    max_tokens: int = 256
    ignore_eos: bool = True
    stream: bool = True
    temperature: float = 0.0
    prompt: str = DEFAULT_PROMPT
    unique_prompts: bool = False  # prefix each prompt with a per-request tag to defeat prefix caching
    prompt_tokens: int | None = None  # synthetic prompts of this many tokens (llmload.loadgen.workload)
    shared_prefix_ratio: float = 0.0  # share of each synthetic prompt common to all requests
    prompt_file: str | None = None  # text lines, JSONL with "prompt", or ShareGPT JSON
    prompt_format: str = "auto"
    continuous_usage: bool = False  # ask for usage on every chunk (vLLM continuous_usage_stats)
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)
    slo: SloConfig = field(default_factory=SloConfig)
    timeouts: TimeoutConfig = field(default_factory=TimeoutConfig)
    retries: RetryConfig = field(default_factory=RetryConfig)
    soak: SoakConfig | None = None  # a soak run: one time-based rung judged by windows and thresholds
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    # trace replay and multi-turn sessions (issue 16)
    trace_file: str | None = None  # mode trace: Mooncake JSONL or CSV (llmload.core.trace_file)
    speed: float = 1.0  # mode trace: replay speed factor (2 = twice as fast)
    start_s: float = 0.0  # mode trace: window start, seconds after the trace's first line
    duration_s: float | None = None  # mode trace: window length in trace seconds (None: to the end)
    sessions: SessionConfig | None = None  # multi-turn chat sessions instead of single requests
    source: str = "<defaults>"

    @property
    def rate_mode(self) -> bool:
        return self.mode == "rate"

    def with_overrides(self, source: str | None = None, **overrides: Any) -> SweepConfig:
        """A copy with the given fields replaced (None values are ignored), re-validated; errors
        name `source` (default: this config's source, "with command-line overrides")."""
        changed = {k: v for k, v in overrides.items() if v is not None}
        if not changed:
            return self
        raw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "source"}
        raw["slo"] = dataclasses.asdict(self.slo)
        raw["timeouts"] = dataclasses.asdict(self.timeouts)
        raw["reconcile"] = dataclasses.asdict(self.reconcile)
        raw["retries"] = dataclasses.asdict(self.retries)
        raw["soak"] = dataclasses.asdict(self.soak) if self.soak else None
        raw["sessions"] = dataclasses.asdict(self.sessions) if self.sessions else None
        raw.update(changed)
        return parse_config(raw, source=source or f"{self.source} (with command-line overrides)")


def _expect(source: str, key: str, value: Any, types: tuple[type, ...], what: str) -> Any:
    # bool is an int subclass: never accept it where a number is expected
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{source}: '{key}' must be {what}, got {value!r}")
    if not isinstance(value, types):
        raise ConfigError(f"{source}: '{key}' must be {what}, got {value!r}")
    return value


def _positive_int(source: str, key: str, value: Any, *, allow_zero: bool = False) -> int:
    _expect(source, key, value, (int,), "an integer")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ConfigError(f"{source}: '{key}' must be an integer {bound}, got {value!r}")
    return int(value)


def _positive_float(source: str, key: str, value: Any) -> float:
    _expect(source, key, value, (int, float), "a number")
    if value <= 0:
        raise ConfigError(f"{source}: '{key}' must be a number > 0, got {value!r}")
    return float(value)


def _entries(
    source: str, section: str, value: Any, cls: type, what: str = "a mapping"
) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a nested section, once every key is a field of `cls`."""
    _expect(source, section, value, (dict,), what)
    known = [f.name for f in dataclasses.fields(cls)]
    for sub in value:
        if sub not in known:
            raise ConfigError(f"{source}: unknown key '{section}.{sub}' (known: {', '.join(known)})")
    return list(value.items())


def _section(source: str, key: str, value: Any, cls: type) -> Any:
    if value is None:
        return cls()
    kwargs: dict[str, Any] = {}
    for sub, sub_value in _entries(source, key, value, cls):
        if sub_value is not None:
            kwargs[sub] = _positive_float(source, f"{key}.{sub}", sub_value)
    return cls(**kwargs)


def _retries(source: str, value: Any) -> RetryConfig:
    kwargs: dict[str, Any] = {}
    for sub, v in _entries(source, "retries", value, RetryConfig, "a mapping with max, on_status, backoff_s"):
        key = f"retries.{sub}"
        if sub == "max":
            kwargs[sub] = _positive_int(source, key, v, allow_zero=True)
        elif sub == "backoff_s":
            kwargs[sub] = _positive_float(source, key, v)
        else:
            what = "a list of HTTP status codes, e.g. [429, 503]"
            _expect(source, key, v, (list, tuple), what)
            if not all(isinstance(s, int) and not isinstance(s, bool) and 400 <= s <= 599 for s in v):
                raise ConfigError(f"{source}: '{key}' must be {what} (400-599), got {v!r}")
            kwargs[sub] = tuple(v)
    return RetryConfig(**kwargs)


def _soak(source: str, value: Any) -> SoakConfig:
    kwargs: dict[str, Any] = {}
    for sub, v in _entries(source, "soak", value, SoakConfig):
        key = f"soak.{sub}"
        if v is None:
            continue
        if sub == "settle_windows":
            kwargs[sub] = _positive_int(source, key, v, allow_zero=True)
        elif sub == "window_s":
            kwargs[sub] = _positive_float(source, key, v)
        else:
            _expect(source, key, v, (int, float), "a number")
            ok, what = {
                "confidence": (0 < v < 1, "in (0, 1)"),
                "max_failure_ratio": (0 <= v <= 1, "in [0, 1]"),
            }.get(sub, (v >= 0, ">= 0"))
            if not ok:
                raise ConfigError(f"{source}: '{key}' must be a number {what}, got {v!r}")
            kwargs[sub] = float(v)
    return SoakConfig(**kwargs)


def _rungs(source: str, value: Any) -> tuple[float, ...]:
    """User counts or request rates (> 0); `_check_mode` requires integers in concurrency mode."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    _expect(source, "rungs", value, (list, tuple), "a list of user counts, e.g. [1, 4, 8, 10]")
    if not value:
        raise ConfigError(f"{source}: 'rungs' is empty; give at least one user count, e.g. [1, 4, 8, 10]")
    out: list[float] = []
    for i, v in enumerate(value):
        key = f"rungs[{i}]"
        out.append(_positive_float(source, key, v) if isinstance(v, float) else _positive_int(source, key, v))
    return tuple(out)


def _choice(key: str, choices: tuple[str, ...]):
    def check(source: str, value: Any) -> str:
        if value not in choices:
            raise ConfigError(f"{source}: '{key}' must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return check


def _ratio(source: str, key: str, value: Any, *, below_one: bool = False) -> float:
    _expect(source, key, value, (int, float), "a number")
    if not (0 <= value < 1 if below_one else 0 <= value <= 1):
        raise ConfigError(
            f"{source}: '{key}' must be a number in {'[0, 1)' if below_one else '[0, 1]'}, got {value!r}"
        )
    return float(value)


def _reconcile(source: str, value: Any) -> ReconcileConfig:
    entries = _entries(source, "reconcile", value, ReconcileConfig)
    return ReconcileConfig(**{k: _ratio(source, f"reconcile.{k}", v) for k, v in entries})


def _non_negative(source: str, key: str, value: Any) -> float:
    _expect(source, key, value, (int, float), "a number >= 0")
    if value < 0:
        raise ConfigError(f"{source}: '{key}' must be a number >= 0, got {value!r}")
    return float(value)


def _trace_file(source: str, value: Any) -> str:
    _expect(source, "trace_file", value, (str,), "a file path")
    if not value.strip():
        raise ConfigError(f"{source}: 'trace_file' must be a file path")
    return value


def _sessions(source: str, value: Any) -> SessionConfig:
    kwargs: dict[str, Any] = {}
    for sub, v in _entries(source, "sessions", value, SessionConfig):
        key = f"sessions.{sub}"
        if sub == "think_time":
            kwargs[sub] = _choice(key, THINK_TIMES)(source, v)
        elif sub == "think_time_s":
            kwargs[sub] = _non_negative(source, key, v)
        else:
            kwargs[sub] = _positive_int(source, key, v, allow_zero=sub == "system_tokens")
    return SessionConfig(**kwargs)


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
        if config.endpoint != "chat" or not config.stream:
            raise ConfigError(f"{source}: 'sessions' need 'endpoint: chat' and 'stream: true'")


def _check_mode(config: SweepConfig) -> None:
    """Rules that tie several keys together (rate mode, workloads)."""
    source = config.source
    _check_trace_and_sessions(config)
    if config.mode == "concurrency":
        for i, v in enumerate(config.rungs):
            if not isinstance(v, int):
                raise ConfigError(
                    f"{source}: 'rungs[{i}]' must be an integer user count, got {v!r} "
                    "(request rates need 'mode: rate')"
                )
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


def _percentiles(source: str, value: Any) -> tuple[float, ...]:
    _expect(source, "percentiles", value, (list, tuple), "a list of numbers in (0, 100]")
    out = []
    for i, p in enumerate(value):
        _expect(source, f"percentiles[{i}]", p, (int, float), "a number in (0, 100]")
        if not 0 < p <= 100:
            raise ConfigError(f"{source}: 'percentiles[{i}]' must be in (0, 100], got {p!r}")
        out.append(float(p))
    return tuple(out)


def _prompt(source: str, value: Any) -> str:
    _expect(source, "prompt", value, (str,), "a non-empty string")
    if not value.strip():
        raise ConfigError(f"{source}: 'prompt' must be a non-empty string")
    return value


def _prompt_file(source: str, value: Any) -> str:
    _expect(source, "prompt_file", value, (str,), "a file path")
    if not value.strip():
        raise ConfigError(f"{source}: 'prompt_file' must be a file path")
    return value


def _endpoint(source: str, value: Any) -> str:
    if value not in ENDPOINTS:
        raise ConfigError(f"{source}: 'endpoint' must be one of {', '.join(ENDPOINTS)}, got {value!r}")
    return str(value)


def _temperature(source: str, value: Any) -> float:
    _expect(source, "temperature", value, (int, float), "a number >= 0")
    if value < 0:
        raise ConfigError(f"{source}: 'temperature' must be a number >= 0, got {value!r}")
    return float(value)


def _bool(key: str):
    return lambda source, value: _expect(source, key, value, (bool,), "true or false")


def _optional(check):
    return lambda source, value: None if value is None else check(source, value)


_VALIDATORS: dict[str, Any] = {
    "rungs": _rungs,
    "requests_per_user": lambda s, v: _positive_int(s, "requests_per_user", v),
    "duration": _optional(lambda s, v: _positive_float(s, "duration", v)),
    "warmup_requests": lambda s, v: _positive_int(s, "warmup_requests", v, allow_zero=True),
    "spawn_rate": lambda s, v: _positive_float(s, "spawn_rate", v),
    "endpoint": _endpoint,
    "model": _optional(lambda s, v: _expect(s, "model", v, (str,), "a string")),
    "max_tokens": lambda s, v: _positive_int(s, "max_tokens", v),
    "ignore_eos": _bool("ignore_eos"),
    "stream": _bool("stream"),
    "temperature": _temperature,
    "prompt": _prompt,
    "unique_prompts": _bool("unique_prompts"),
    "percentiles": _percentiles,
    "slo": lambda s, v: _section(s, "slo", v, SloConfig),
    "timeouts": lambda s, v: _section(s, "timeouts", v, TimeoutConfig),
    "retries": _optional(_retries),
    "soak": _optional(_soak),
    "mode": _choice("mode", MODES),
    "max_concurrency": lambda s, v: _positive_int(s, "max_concurrency", v),
    "arrival": _choice("arrival", ARRIVALS),
    "burstiness": lambda s, v: _positive_float(s, "burstiness", v),
    "requests_per_rung": _optional(lambda s, v: _positive_int(s, "requests_per_rung", v)),
    "seed": lambda s, v: _expect(s, "seed", v, (int,), "an integer"),
    "prompt_tokens": _optional(lambda s, v: _positive_int(s, "prompt_tokens", v)),
    "shared_prefix_ratio": lambda s, v: _ratio(s, "shared_prefix_ratio", v, below_one=True),
    "prompt_file": _optional(lambda s, v: _prompt_file(s, v)),
    "prompt_format": _choice("prompt_format", PROMPT_FORMATS),
    "continuous_usage": _bool("continuous_usage"),
    "reconcile": _reconcile,
    # trace replay and multi-turn sessions (issue 16)
    "trace_file": _optional(_trace_file),
    "speed": lambda s, v: _positive_float(s, "speed", v),
    "start_s": lambda s, v: _non_negative(s, "start_s", v),
    "duration_s": _optional(lambda s, v: _positive_float(s, "duration_s", v)),
    "sessions": _optional(_sessions),
}


def parse_config(raw: Any, source: str) -> SweepConfig:
    """Validate a mapping (as read from YAML) into a SweepConfig."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _VALIDATORS:
            raise ConfigError(f"{source}: unknown key '{key}' (known: {', '.join(_VALIDATORS)})")
        values[key] = _VALIDATORS[key](source, value)
    config = SweepConfig(**values, source=source)
    if config.soak is not None and (config.duration is None or len(config.rungs) != 1):
        raise ConfigError(f"{source}: 'soak' needs one time-based rung: set 'rungs: [N]' and 'duration'")
    _check_mode(config)
    return config


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a YAML ladder file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config file: {e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}:{where}: YAML syntax error: {problem}") from None
    config = parse_config(raw, source=str(path))
    if config.prompt_file and not Path(config.prompt_file).is_absolute():
        # relative to the config file, so a config and its prompt file travel together
        config = dataclasses.replace(config, prompt_file=str(path.parent.resolve() / config.prompt_file))
    if config.trace_file and not Path(config.trace_file).is_absolute():  # the same for a trace (issue 16)
        config = dataclasses.replace(config, trace_file=str(path.parent.resolve() / config.trace_file))
    return config
