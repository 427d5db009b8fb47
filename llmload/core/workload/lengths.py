"""Length distributions of a workload: what `prompt_tokens` and `max_tokens` (or `scenario`) ask.

A length is a number (every request the same, as before) or a mapping:

- `{dist: fixed, value: N}`;
- `{dist: uniform, min: a, max: b}`: every integer in [a, b] equally likely;
- `{dist: normal, mean: m, std: s, min: a, max: b}`: a normal truncated to [a, b], rounded;
- `{dist: lognormal, mean: m, std: s, min: a, max: b}`: a lognormal whose lengths have mean m
  and standard deviation s, truncated to [a, b], rounded;
- `{dist: empirical, file: path}`: the lengths of a file, one integer per non-empty line
  (`load_empirical`), each as likely as its share of the lines (or `values: [...]` inline, or
  `replies: FILE`: the token lengths of a ShareGPT / JSONL prompt file's replies, counted by
  `llmload.core.workload.token_count`; `replies: true`: those of the run's `prompt_file`); `min` / `max`
  keep the lengths in [min, max] (the others are left out, as a truncated normal leaves its
  tails out).

`scenario` is genai-bench's shorthand for both at once: `N(480,240)/(300,150)` (normal input /
output), `U(50,100)/(50,100)` (uniform), `D(100,1000)` (fixed).

Request i's length is a pure function of (seed, which length, i): one uniform number from a hash
of the three, put through the distribution's inverse CDF (truncation included, so no draw is
thrown away). So the sequence is the same at every rung, and any split of the indices across
processes or workers gives back exactly the single-process sequence, with no shared state.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import yaml

from llmload.core.checks import ConfigError, expect
from llmload.core.schema import shown
from llmload.core.workload.prompt_files import PROMPT_FORMATS, load_replies
from llmload.core.workload.token_count import count_text_tokens

DISTS = ("fixed", "uniform", "normal", "lognormal", "empirical")
_KEYS = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std", "min", "max"),
    "lognormal": ("mean", "std", "min", "max"),
    "empirical": ("file", "values", "replies", "format", "min", "max"),  # one of the first three
}
EMPIRICAL_SOURCES = ("file", "values", "replies")
MAX_LENGTH = 10_000_000  # tokens: beyond any model's context; a bound keeps the arithmetic exact
SCENARIO_TAIL_STDS = 4  # a scenario's normal has no bounds: cut it at mean + this many std (and at 1)
_STD_NORMAL = NormalDist()
FLAG_CHARS = 200  # a length mapping given as flag text is a few dozen characters


@dataclass(frozen=True, slots=True)
class Lengths:
    """One length distribution (see the module docstring); `values` are an empirical's lengths."""

    dist: str
    low: int
    high: int
    mean: float = 0.0
    std: float = 0.0
    values: tuple[int, ...] = ()

    def length(self, seed: int, stream: str, index: int) -> int:
        """The length of request `index` of the run seeded `seed`; `stream` tells the input
        lengths from the output lengths, so the two are independent."""
        digest = hashlib.blake2b(f"{seed}:{stream}:{index}".encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2**64  # in (0, 1), never either end
        return self.at(u)

    def at(self, u: float) -> int:
        """The length at quantile `u` in (0, 1) (the inverse CDF)."""
        if self.dist == "fixed":
            return self.low
        if self.dist == "uniform":
            return min(self.high, self.low + int(u * (self.high - self.low + 1)))
        if self.dist == "empirical":
            return self.values[min(len(self.values) - 1, int(u * len(self.values)))]
        mu, sigma, lo, hi = self._normal_scale()
        a, b = _STD_NORMAL.cdf((lo - mu) / sigma), _STD_NORMAL.cdf((hi - mu) / sigma)
        z = _STD_NORMAL.inv_cdf(min(max(a + u * (b - a), 1e-300), 1 - 1e-16))
        x = mu + sigma * z
        return max(self.low, min(self.high, round(math.exp(x) if self.dist == "lognormal" else x)))

    def _normal_scale(self) -> tuple[float, float, float, float]:
        """The normal behind a normal or lognormal: its mu, sigma and the bounds on its scale
        (each bound widened by half a token, so rounding gives the end lengths their full share)."""
        lo, hi = self.low - 0.5, self.high + 0.5
        if self.dist == "normal":
            return self.mean, self.std, lo, hi
        sigma2 = math.log1p((self.std / self.mean) ** 2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), math.log(max(lo, 0.5)), math.log(hi)

    def as_mapping(self) -> dict[str, Any]:
        """The mapping `parse_lengths` reads back as this distribution (an empirical's lengths
        inline: a configuration sent to the workers carries no file)."""
        if self.dist == "fixed":
            return {"dist": "fixed", "value": self.low}
        if self.dist == "uniform":
            return {"dist": "uniform", "min": self.low, "max": self.high}
        if self.dist == "empirical":
            return {"dist": "empirical", "values": list(self.values)}
        return {"dist": self.dist, "mean": self.mean, "std": self.std, "min": self.low, "max": self.high}

    @property
    def fixed(self) -> int | None:
        """The one length of a fixed distribution (None for the others)."""
        return self.low if self.dist == "fixed" else None

    def describe(self) -> str:
        """How a table note shows it, e.g. `normal(128, 32) in [16, 512]`."""
        if self.dist == "fixed":
            return str(self.low)
        if self.dist == "uniform":
            return f"uniform({self.low}, {self.high})"
        if self.dist == "empirical":
            return f"empirical({len(self.values)} lengths in [{self.low}, {self.high}])"
        return f"{self.dist}({self.mean:g}, {self.std:g}) in [{self.low}, {self.high}]"


def fixed(n: int) -> Lengths:
    return Lengths("fixed", n, n)


def _int(source: str, key: str, value: Any, minimum: int) -> int:
    expect(source, key, value, (int,), "an integer")
    if value < minimum:
        raise ConfigError(f"{source}: '{key}' must be an integer >= {minimum}, got {shown(value)}")
    if value > MAX_LENGTH:
        raise ConfigError(f"{source}: '{key}' must be an integer <= {MAX_LENGTH}, got {shown(value)}")
    return int(value)


def _number(source: str, key: str, value: Any, minimum: float) -> float:
    expect(source, key, value, (int, float), "a number")
    if not minimum <= value <= MAX_LENGTH:
        raise ConfigError(
            f"{source}: '{key}' must be a number in [{minimum:g}, {MAX_LENGTH}], got {shown(value)}"
        )
    return float(value)


def load_empirical(source: str, key: str, path: str | Path) -> tuple[int, ...]:
    """The lengths of a file (one integer >= 1 per non-empty line); ConfigError naming the file,
    the key and the first bad line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(
            f"{source}: '{key}' cannot read {shown(str(path))}: {getattr(e, 'strerror', None) or e}"
        ) from None
    values = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if not text.isdecimal() or not 1 <= int(text) <= MAX_LENGTH:
            raise ConfigError(
                f"{source}: '{key}' {shown(str(path))} line {number}: expected an integer in "
                f"[1, {MAX_LENGTH}], got {shown(text)}"
            )
        values.append(int(text))
    if not values:
        raise ConfigError(f"{source}: '{key}' {shown(str(path))} holds no length")
    return tuple(values)


def parse_lengths(source: str, key: str, value: Any, base: Path | None = None) -> Lengths:
    """A length key's value (a number or a mapping, see the module docstring) as a Lengths;
    ConfigError naming the key otherwise. `base` is the directory a relative `file` is read from."""
    if not isinstance(value, dict):
        return fixed(_int(source, key, value, 1))
    dist = value.get("dist")
    if dist not in DISTS:
        raise ConfigError(f"{source}: '{key}.dist' must be one of {', '.join(DISTS)}, got {shown(dist)}")
    allowed = _KEYS[dist]
    for k in value:
        if k != "dist" and k not in allowed:
            raise ConfigError(
                f"{source}: unknown key {shown(f'{key}.{k}')} for dist {dist} (known: {', '.join(allowed)})"
            )
    if dist == "empirical":
        return _empirical(source, key, value, base)
    missing = [k for k in allowed if k not in value]
    if missing:
        raise ConfigError(f"{source}: '{key}' with dist {dist} needs {', '.join(missing)}")
    if dist == "fixed":
        return fixed(_int(source, f"{key}.value", value["value"], 1))
    low, high = (_int(source, f"{key}.{k}", value[k], 1) for k in ("min", "max"))
    if low > high:
        raise ConfigError(f"{source}: '{key}.min' {low} is above '{key}.max' {high}")
    if dist == "uniform":
        return Lengths(dist, low, high)
    mean = _number(source, f"{key}.mean", value["mean"], 1)
    std = _number(source, f"{key}.std", value["std"], 0)
    if std == 0:
        raise ConfigError(f"{source}: '{key}.std' must be above 0 (a fixed length is a number)")
    return Lengths(dist, low, high, mean, std)


def _empirical(source: str, key: str, value: dict[str, Any], base: Path | None) -> Lengths:
    """An empirical distribution: its lengths from `file`, inline `values` or the `replies` of a
    prompt file (exactly one of them), kept to [`min`, `max`] when given."""
    given = [k for k in EMPIRICAL_SOURCES if k in value]
    if len(given) != 1:
        raise ConfigError(
            f"{source}: '{key}' with dist empirical needs exactly one of {', '.join(EMPIRICAL_SOURCES)}"
        )
    if "format" in value and "replies" not in value:
        raise ConfigError(f"{source}: '{key}.format' applies to 'replies' (the prompt file's format)")
    low = _int(source, f"{key}.min", value["min"], 1) if "min" in value else 1
    high = _int(source, f"{key}.max", value["max"], 1) if "max" in value else MAX_LENGTH
    if low > high:
        raise ConfigError(f"{source}: '{key}.min' {low} is above '{key}.max' {high}")
    if "values" in value:
        listed = expect(source, f"{key}.values", value["values"], (list, tuple), "a list of lengths")
        if not listed:
            raise ConfigError(f"{source}: '{key}.values' holds no length")
        values = tuple(_int(source, f"{key}.values[{i}]", v, 1) for i, v in enumerate(listed))
    elif "file" in value:
        values = load_empirical(source, f"{key}.file", _path(source, f"{key}.file", value["file"], base))
    else:
        values = reply_lengths(source, key, value, base)
    kept = tuple(v for v in values if low <= v <= high)
    if not kept:
        raise ConfigError(
            f"{source}: '{key}' has no length in [{low}, {high}] (its min, max): "
            f"its lengths are in [{min(values)}, {max(values)}]"
        )
    return Lengths("empirical", min(kept), max(kept), values=kept)


def _path(source: str, key: str, value: Any, base: Path | None) -> Path:
    """A file path key's value, relative to `base` (the config file's directory) when given."""
    expect(source, key, value, (str,), "a file path")
    if not value.strip():
        raise ConfigError(f"{source}: '{key}' must be a file path, got {shown(value)}")
    path = Path(value)
    return path if base is None or path.is_absolute() else base / path


def reply_lengths(source: str, key: str, value: dict[str, Any], base: Path | None) -> tuple[int, ...]:
    """The token lengths of a prompt file's replies (`{dist: empirical, replies: FILE}`, `format`
    the file's, default auto), each counted by llmload's model of a BPE tokenizer
    (`llmload.core.workload.token_count`, the simulator's). `replies: true`, the run's own prompt_file,
    is made `replies: <prompt_file>` by the configuration (`llmload.core.config`) before this."""
    replies = value["replies"]
    if replies is True:
        raise ConfigError(
            f"{source}: '{key}.replies' true takes the replies of 'prompt_file', which is not set "
            "(set 'prompt_file', or give the file: 'replies: FILE')"
        )
    if not isinstance(replies, str):
        raise ConfigError(
            f"{source}: '{key}.replies' must be true (the prompt_file's replies) or a file path, "
            f"got {shown(replies)}"
        )
    fmt = value.get("format", "auto")
    if fmt not in PROMPT_FORMATS:
        raise ConfigError(
            f"{source}: '{key}.format' must be one of {', '.join(PROMPT_FORMATS)}, got {shown(fmt)}"
        )
    path = _path(source, f"{key}.replies", replies, base)
    lengths = []
    for text in load_replies(source, f"{key}.replies", path, fmt):
        tokens = max(1, count_text_tokens(text))
        if tokens > MAX_LENGTH:
            raise ConfigError(
                f"{source}: '{key}.replies' {shown(str(path))} holds a reply of {tokens} tokens, "
                f"above {MAX_LENGTH}"
            )
        lengths.append(tokens)
    return tuple(lengths)


_SCENARIO = re.compile(r"^\s*([NUD])\s*\(([^()]*)\)\s*(?:/\s*\(([^()]*)\))?\s*$")


def parse_scenario(source: str, key: str, value: Any) -> tuple[Lengths, Lengths]:
    """A genai-bench scenario string as (input, output) lengths; ConfigError naming the key."""
    expect(source, key, value, (str,), 'a scenario string such as "N(480,240)/(300,150)"')
    m = _SCENARIO.match(value)
    if m is None:
        raise ConfigError(
            f'{source}: \'{key}\' must look like "N(480,240)/(300,150)", "U(50,100)/(50,100)" '
            f'or "D(100,1000)", got {shown(value)}'
        )
    kind, first, second = m.groups()
    try:
        numbers = [int(x) for x in first.split(",")] + ([int(x) for x in second.split(",")] if second else [])
    except ValueError:
        raise ConfigError(f"{source}: '{key}' takes integers, got {shown(value)}") from None
    want = 2 if kind == "D" else 4
    if len(numbers) != want or (kind == "D") != (second is None):
        raise ConfigError(f"{source}: '{key}' {kind}(...) takes {want} integers, got {shown(value)}")
    if kind == "D":
        return fixed(_int(source, key, numbers[0], 1)), fixed(_int(source, key, numbers[1], 1))
    (a, b), (c, d) = numbers[:2], numbers[2:]
    return _scenario_half(source, key, kind, a, b), _scenario_half(source, key, kind, c, d)


def _scenario_half(source: str, key: str, kind: str, a: int, b: int) -> Lengths:
    """One side of a U or N scenario: uniform(a, b), or normal(a, b) cut at 1 and at the tail."""
    if kind == "U":
        return parse_lengths(source, key, {"dist": "uniform", "min": a, "max": b})
    top = max(1, a + SCENARIO_TAIL_STDS * b)
    return parse_lengths(source, key, {"dist": "normal", "mean": a, "std": b, "min": 1, "max": top})


def length_key(source: str, key: str, value: Any) -> int | Lengths:
    """The check of `prompt_tokens` and `max_tokens`: a fixed length stays a plain integer (what
    every request asks, as without distributions), any other distribution a Lengths. A relative
    empirical `file` is read from the config file's directory."""
    if isinstance(value, Lengths):  # a configuration re-validated with overrides
        return value
    base = Path(source).parent if Path(source).is_file() else None
    lengths = parse_lengths(source, key, value, base)
    return lengths.low if lengths.fixed is not None else lengths


def length_flag(text: str) -> Any:
    """A length flag's text: an integer, or a YAML flow mapping such as `{dist: uniform, min: 16,
    max: 64}` (left as text when it is neither, for the check to refuse naming the flag)."""
    if len(text) > FLAG_CHARS or "&" in text or "*" in text:  # no anchors or aliases: no bombs
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | dict) else text


def as_lengths(value: int | Lengths) -> Lengths:
    """A length key's value as a distribution (a plain integer: fixed)."""
    return value if isinstance(value, Lengths) else fixed(value)


def draw(value: int | Lengths, seed: int, stream: str, index: int) -> int:
    """Request `index`'s length of a length key's value (a plain integer: itself, no hashing)."""
    return value.length(seed, stream, index) if isinstance(value, Lengths) else value
