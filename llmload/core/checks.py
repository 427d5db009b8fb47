"""Value checks for configuration keys: each is `check(source, key, value) -> value` and raises
`ConfigError` with one line naming the source (file or flag), the key and what was expected.

Used by the `setting(...)` declarations of `llmload.core.config` (`llmload.core.schema`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.core.command_line import path_text
from llmload.core.schema import Check, parse_section, shown


class ConfigError(ValueError):
    """A configuration mistake; the message is one line naming the file (or flag) and the key."""


def expect(source: str, key: str, value: Any, types: tuple[type, ...], what: str) -> Any:
    """`value` if it is one of `types` (a bool never passes for a number; NaN and infinities never
    pass for a float, nor an integer too large for one), else ConfigError "'key' must be <what>,
    got <value>"."""
    wrong = isinstance(value, bool) and bool not in types
    wrong = wrong or not isinstance(value, types)
    wrong = wrong or (isinstance(value, float) and not math.isfinite(value))
    # an integer literal beyond any float (1e309 written out) where a number is read as a float
    wrong = wrong or (float in types and isinstance(value, int) and abs(value) > sys.float_info.max)
    if wrong:
        raise ConfigError(f"{source}: '{key}' must be {what}, got {shown(value)}")
    return value


def integer(minimum: int = 1, maximum: int | None = None) -> Check:
    """An integer >= minimum (and <= maximum, when given)."""
    if maximum is not None:
        return number(minimum, maximum, integer=True)

    def check(source: str, key: str, value: Any) -> int:
        expect(source, key, value, (int,), "an integer")
        if value < minimum:
            raise ConfigError(f"{source}: '{key}' must be an integer >= {minimum}, got {shown(value)}")
        return int(value)

    return check


def _bound(value: float) -> str:
    """A bound as a person writes it: 1000000, 0.5, 1e-06."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def number(low: float, high: float, *, integer: bool = False, above: bool = False) -> Check:
    """A finite number in [low, high] (in (low, high] with `above`); with `integer`, an integer.
    The bound of every numeric flag of every command (docs/development.md: a new flag declares
    its range with `flag_type(number(...), key)`); the check carries its `bounds`."""
    kind = "an integer" if integer else "a number"
    interval = f"{'(' if above else '['}{_bound(low)}, {_bound(high)}]"

    def check(source: str, key: str, value: Any) -> Any:
        expect(source, key, value, (int,) if integer else (int, float), f"{kind} in {interval}")
        if not ((low < value) if above else (low <= value)) or value > high:
            raise ConfigError(f"{source}: '{key}' must be {kind} in {interval}, got {shown(value)}")
        return int(value) if integer else float(value)

    setattr(check, "bounds", (low, high))  # noqa: B010
    return check


def any_integer(source: str, key: str, value: Any) -> int:
    return int(expect(source, key, value, (int,), "an integer"))


def positive_number(source: str, key: str, value: Any) -> float:
    """A finite number > 0."""
    expect(source, key, value, (int, float), "a number")
    if value <= 0:
        raise ConfigError(f"{source}: '{key}' must be a number > 0, got {shown(value)}")
    return float(value)


def non_negative_number(source: str, key: str, value: Any) -> float:
    """A finite number >= 0."""
    expect(source, key, value, (int, float), "a number")
    if value < 0:
        raise ConfigError(f"{source}: '{key}' must be a number >= 0, got {shown(value)}")
    return float(value)


def ratio(below_one: bool = False) -> Check:
    """A number in [0, 1] (or [0, 1))."""
    interval = "[0, 1)" if below_one else "[0, 1]"

    def check(source: str, key: str, value: Any) -> float:
        expect(source, key, value, (int, float), "a number")
        if not (0 <= value < 1 if below_one else 0 <= value <= 1):
            raise ConfigError(f"{source}: '{key}' must be a number in {interval}, got {shown(value)}")
        return float(value)

    return check


def open_unit_interval(source: str, key: str, value: Any) -> float:
    """A number in (0, 1), e.g. a confidence level."""
    expect(source, key, value, (int, float), "a number")
    if not 0 < value < 1:
        raise ConfigError(f"{source}: '{key}' must be a number in (0, 1), got {shown(value)}")
    return float(value)


def boolean(source: str, key: str, value: Any) -> bool:
    return bool(expect(source, key, value, (bool,), "true or false"))


def one_of(choices: tuple[str, ...]) -> Check:
    def check(source: str, key: str, value: Any) -> str:
        if value not in choices:
            raise ConfigError(f"{source}: '{key}' must be one of {', '.join(choices)}, got {shown(value)}")
        return str(value)

    return check


def string(source: str, key: str, value: Any) -> str:
    return str(expect(source, key, value, (str,), "a string"))


def non_empty(what: str) -> Check:
    """A string with something besides white space; `what` says what it is ("a file path")."""

    def check(source: str, key: str, value: Any) -> str:
        expect(source, key, value, (str,), what)
        if not value.strip():
            raise ConfigError(f"{source}: '{key}' must be {what}")
        return str(value)

    return check


def optional(check: Check) -> Check:
    """`check`, or None (null in YAML) for "not set"."""

    def optional_check(source: str, key: str, value: Any) -> Any:
        return None if value is None else check(source, key, value)

    if hasattr(check, "section"):  # an optional section still lists its keys in the docs
        setattr(optional_check, "section", check.section)  # noqa: B010
    return optional_check


def number_list(what: str, item: Callable[[float], bool], bound: str) -> Check:
    """A list of numbers each satisfying `item` (e.g. percentiles in (0, 100])."""

    def check(source: str, key: str, value: Any) -> tuple[float, ...]:
        expect(source, key, value, (list, tuple), what)
        out = []
        for i, v in enumerate(value):
            expect(source, f"{key}[{i}]", v, (int, float), f"a number in {bound}")
            if not item(v):
                raise ConfigError(f"{source}: '{key}[{i}]' must be in {bound}, got {shown(v)}")
            out.append(float(v))
        return tuple(out)

    return check


def section(cls: type, what: str = "a mapping") -> Check:
    """A nested mapping validated key by key into `cls` (null or a missing key: the defaults;
    a key set to null keeps its default)."""

    def check(source: str, key: str, value: Any) -> Any:
        if value is None:
            return cls()
        expect(source, key, value, (dict,), what)
        given = {k: v for k, v in value.items() if v is not None}
        return cls(**parse_section(cls, given, source, prefix=f"{key}.", error=ConfigError))

    setattr(check, "section", cls)  # the docs reference lists its keys  # noqa: B010
    return check


# --- command-line flags checked by the same function as their YAML key ---------------------------
_FLAG = "<flag>"  # the source the checks are called with; argparse names the flag itself


def number_text(text: str) -> Any:
    """A flag's text as YAML would read the number: an int, a float (nan, inf included: the
    checks refuse them), or the text itself when it is no number (the check then says so)."""
    stripped = text.strip()
    for convert in (int, float):
        try:
            return convert(stripped)
        except ValueError:
            continue
    return text


def list_text(text: str) -> Any:
    """A comma-separated flag as a list of numbers (see `number_text`); an empty item (`1,,2`,
    a trailing comma, an empty flag) is refused, never dropped."""
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise argparse.ArgumentTypeError(f"an empty item in {text[:100]!r}; expected e.g. 50,90,99")
    return [number_text(item) for item in items]


def file_path(text: str) -> Path:
    """An argparse `type` for a flag naming a file: not empty (Path('') is the current folder) and
    not a folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; give a file")
    path = Path(text)
    try:
        folder = path.is_dir()
    except OSError as e:  # a name too long for the system, ...
        raise argparse.ArgumentTypeError(f"{path_text(text)}: {e.strerror or e}") from None
    if folder:
        raise argparse.ArgumentTypeError(f"{path_text(text)} is a folder, not a file")
    return path


def file_name(text: str) -> str:
    """`file_path`, kept as the text (for a flag passed on to another command line)."""
    file_path(text)
    return text


def folder_path(text: str) -> Path:
    """An argparse `type` for a flag naming a folder: not empty (Path('') is the current folder,
    never what an empty value meant) and a name the system can hold."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; give a folder")
    path = Path(text)
    try:
        path.exists()
    except OSError as e:  # a name too long for the system, ...
        raise argparse.ArgumentTypeError(f"{path_text(text)}: {e.strerror or e}") from None
    return path


def flag_type(check: Check, key: str, parse: Callable[[str], Any] = number_text) -> Callable[[str], Any]:
    """An argparse `type` that checks a flag's text with `check`, the check of its YAML twin
    `key`, so the flag and the key accept and refuse the same values with the same words."""

    def convert(text: str) -> Any:
        try:
            return check(_FLAG, key, parse(text))
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(f"{_FLAG}: ")) from None

    convert.__name__ = key  # argparse names the type in some messages
    return convert
